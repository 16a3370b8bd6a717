"""The kubelet stand-in's admission of the node's pods, once after every start.

A real kubelet, once its Node has synced (about a second after ``kubelet.sock`` appeared),
admits the pods bound to its node (pkg/kubelet/kubelet.go ``HandlePodAdditions``; the device
manager's ``Allocate`` through container_manager_linux.go
``GetAllocateResourcesPodAdmitHandler``): with the devices the plugins have listed by then,
calling Allocate on the plugins for the pods that need devices anew.
The rules and the verdicts are admission.py's; this part times the admission and applies it
to the stand-in's state and checkpoint.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import grpc

from tests.standin.admission import (
    AdmissionError,
    Checkpoint,
    PodStore,
    RuntimeState,
    admit_pods,
    describe_admission,
)
from tests.standin.kubelet_links import DevicePluginClients
from tests.standin.kubelet_rules import rpc_error
from token_resource.protocol.deviceplugin import HEALTHY


class PodAdmission(DevicePluginClients):
    """Admits the pods of ``_pods`` (if any) after each start of the kubelet stand-in."""

    _pods: PodStore | None  # the pods bound to the node
    _runtime: RuntimeState  # which of them still run
    _synced: int  # the generation whose Node sync_node() declared synced

    def sync_node(self) -> None:
        """The Node has synced now: admit the pods at once instead of at ``admit_after``."""
        with self._cond:
            self._synced = self._generation
            self._cond.notify_all()

    def _admit_when_due(self, generation: int, due: float) -> None:
        """At ``due`` (a real kubelet first waits for its Node), admit the pods bound to the
        node with the devices the plugins have listed by then (tests/standin/admission.py).
        Nothing is decided if the kubelet stops first."""
        assert self._pods is not None
        with self._cond:
            while (
                self._serving(generation) and self._synced != generation and due > time.monotonic()
            ):
                self._cond.wait(due - time.monotonic())
            if not self._serving(generation):
                return
            # Healthy devices count only once this kubelet's stream listed them.
            healthy = {
                name: [device for device, health in view.devices if health == HEALTHY]
                if view.stream_open and view.listed_at is not None
                else []
                for name, view in self._views.items()
            }
            for name in self._checkpoint.registered:
                healthy.setdefault(name, [])  # registered before: known, with no device yet
            checkpoint = Checkpoint(
                dict(self._checkpoint.registered), dict(self._checkpoint.pod_devices)
            )
        running = self._runtime.running()
        decided = admit_pods(
            self._pods.load(),
            running=running,
            checkpoint=checkpoint,
            healthy=healthy,
            allocate=self._allocate_for_admission,
            generation=generation,
            clock=time.monotonic,
        )
        with self._cond:
            if not self._serving(generation):
                return  # stopped meanwhile: its Allocate calls may have failed for that
            self._runtime.set_running(running)
            self._pods.report(decided)
            self._checkpoint = checkpoint
            self._write_checkpoint()
            self._statuses.update(decided)
            self._admitted_at = time.monotonic()
            self._changed(*describe_admission(decided))

    def _allocate_for_admission(self, resource: str, device_ids: Sequence[str]) -> None:
        try:
            response = self.allocate(resource, device_ids, timeout=self._dial_timeout)
        except LookupError as error:
            raise AdmissionError(str(error)) from None
        except grpc.RpcError as error:
            raise AdmissionError(rpc_error(error)) from None
        if len(response.container_responses) != 1:
            raise AdmissionError(
                f"unexpected number of container responses: {len(response.container_responses)}"
            )
