"""What the kubelet stand-in keeps under its one lock, and how it makes each change known.

The base of the stand-in's parts (kubelet.py's KubeletStandin is made of them): the resource
views a test reads (kubelet_rules.py), the pods' statuses, and the device manager's checkpoint,
which a real kubelet writes to ``kubelet_internal_checkpoint`` and reads back at start
(pkg/kubelet/cm/devicemanager/manager.go ``writeCheckpoint``/``readCheckpoint``; its contents:
admission.py). Every change goes through ``_changed``: waiters wake, the state file (the
script mode's) is written, the event is logged.
"""

from __future__ import annotations

import json
import logging
import threading
from dataclasses import replace
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from tests.standin.admission import Checkpoint, PodStatus, write_atomically
from tests.standin.kubelet_rules import CHECKPOINT, KubeletView, ResourceView
from token_resource.protocol.deviceplugin import KUBELET_SOCKET

if TYPE_CHECKING:
    import grpc

    from tests.standin.kubelet_dra import DraManager
    from tests.standin.kubelet_pods import PodWorkers

LOG = logging.getLogger("kubelet-standin")


class KubeletState:
    """The state every part of the kubelet stand-in shares; KubeletStandin.__init__ sets it.

    One lock (inside ``_cond``) guards it, and ``_cond`` is notified at every change so that
    waiters and in-flight dials wake up.
    """

    socket_dir: Path
    device_manager: str  # "1.32", "1.36" or "1.37" (kubelet_endpoints.py)
    _state_file: Path | None
    _cond: threading.Condition
    # Guarded by _cond:
    _generation: int  # bumped by each start
    _server: grpc.Server | None  # the Registration server, while it runs
    _views: dict[str, ResourceView]
    _rejected: list[str]
    _checkpoint: Checkpoint
    _started_at: float
    _socket_at: float
    _admitted_at: float | None
    _statuses: dict[str, PodStatus]
    _dra: DraManager | None  # the DRA side, if on
    _pod_workers: PodWorkers | None  # the pod sync, if on (kubelet_pods.py)

    @property
    def socket_path(self) -> Path:
        return self.socket_dir / KUBELET_SOCKET

    @property
    def checkpoint_path(self) -> Path:
        return self.socket_dir / CHECKPOINT

    def _serving(self, generation: int) -> bool:
        """Caller holds the lock: the server that took a Register call is still the live one."""
        return self._server is not None and self._generation == generation

    def _violation(self, text: str) -> None:
        """Caller holds the lock: a plugin broke the protocol."""
        self._rejected.append(text)
        self._changed(f"protocol violation: {text}")

    def _update(self, name: str, **changes: Any) -> None:
        self._views[name] = replace(self._views[name], **changes)

    def _write_checkpoint(self) -> None:
        """Caller holds the lock. Like the real one: the devices of every resource registered
        so far and the admitted pods' devices, which a starting kubelet reads back."""
        for name, view in self._views.items():
            self._checkpoint.registered[name] = tuple(device for device, _ in view.devices)
        write_atomically(self.checkpoint_path, self._checkpoint.to_json(self._generation))

    def _snapshot(self) -> KubeletView:
        return KubeletView(
            self._generation,
            MappingProxyType(dict(self._views)),
            tuple(self._rejected),
            started_at=self._started_at,
            socket_at=self._socket_at,
            admitted_at=self._admitted_at,
            pods=MappingProxyType(dict(self._statuses)),
            dra=None if self._dra is None else self._dra.snapshot(),
            pod_syncs={} if self._pod_workers is None else self._pod_workers.snapshot(),
        )

    def _changed(self, *events: str) -> None:
        """Caller holds the lock, after every change: wake waiters, save the state, log.

        The state file is written before the event is logged, so a reader that saw the
        line finds the state file up to date.
        """
        self._cond.notify_all()
        if self._state_file is not None:
            write_atomically(self._state_file, json.dumps(self._snapshot().to_dict(), indent=2))
        for event in events:
            LOG.info("%s", event)
