"""A kubelet stand-in: the device manager's side of the device-plugin protocol (v1beta1).

It serves ``v1beta1.Registration`` on ``kubelet.sock`` and, like the real kubelet's device
manager, dials every plugin that registers, keeps its ListAndWatch stream open and derives
capacity and allocatable from the latest list it received. The rules it enforces are the
real kubelet's (see the project's device-plugin notes); two kubelet generations are modelled:

- default (1.32): Register blocks while it dials the plugin and asks GetDevicePluginOptions,
  and fails with ``failed to dial device plugin: ...`` if that fails;
- ``register_first`` (1.24-era): Register is answered at once and the dial happens afterwards
  (a failure is only logged), and the options come from ``RegisterRequest.options``.

``device_manager`` picks which connections a resource keeps (kubelet_endpoints.py): "1.32",
the default, one that a Register replaces, its old stream cancelled; "1.36", the real handler
by resource name, whose replaced client streams on (and its end disconnects its successor);
"1.37", several endpoints per resource keyed by socket path. It also picks the wipe at start
(kubelet_rules.py ``clean_directory``: up to 1.32 every file, from 1.33 sockets only).

The endpoint is joined onto the directory unchecked, as both kubelets read do
(``filepath.Join(socketDir, r.Endpoint)``), so ``sub/plugin.sock`` is a socket in a
subdirectory, which the wipe at start leaves alone. For the agent's fallback a kubelet that
will not take such an endpoint is modelled too (``subdirectory_endpoints``): one that refuses
the Register, and one (register_first) that answers it and never dials.

It can also play a kubelet's start as a real one goes through it (``socket_after``,
``admit_after``, ``pods``): ``kubelet.sock`` a moment after the start, then, once its Node has
synced (about a second later), the admission of the pods bound to the node, in which a pod whose
resource has no healthy devices yet is rejected (tests/standin/admission.py).

Integration tests use :class:`KubeletStandin` in-process; tests/standin/kubelet_script.py
runs it as a process of its own (the system tests' containers, the script-mode tests). Its
parts: kubelet_state.py (the state under its lock), kubelet_links.py (the clients of the
plugins), kubelet_registration.py (Register), kubelet_pod_admission.py (the pods' admission
at start); the rules they apply are kubelet_rules.py's and kubelet_endpoints.py's. The DRA
side (``plugins_registry_dir``) needs kubelet_plugins.py and the kubelet_dra*.py modules
beside this file, imported only when it is on.
"""

from __future__ import annotations

import importlib
import os
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

import grpc

from tests.standin.admission import Checkpoint, PodStore, RuntimeState
from tests.standin.kubelet_endpoints import DEVICE_MANAGERS, EndpointBook
from tests.standin.kubelet_links import Link, wait_until_ended
from tests.standin.kubelet_pod_admission import PodAdmission
from tests.standin.kubelet_registration import RegistrationServer
from tests.standin.kubelet_rules import (
    CHECKPOINT,
    JOINED,
    NEVER_DIALLED,
    REFUSED,
    KubeletView,
    Options,
    clean_directory,
    is_extended_resource_name,
    serves_exactly,
    wait_for_view,
)
from tests.standin.kubelet_state import LOG
from token_resource.protocol.deviceplugin import KUBELET_SOCKET, registration_handler

if TYPE_CHECKING:
    from tests.standin.kubelet_dra import ApiAccess, CallResult
    from tests.standin.kubelet_plugins import PluginWatcher
    from tests.standin.kubelet_pods import PodSource, PodWorkers

# What tests import from here: the stand-in, and the views and rules it applies.
__all__ = [
    "CHECKPOINT",
    "JOINED",
    "LOG",
    "NEVER_DIALLED",
    "REFUSED",
    "KubeletStandin",
    "KubeletView",
    "Options",
    "clean_directory",
    "is_extended_resource_name",
    "serves_exactly",
    "wait_for_view",
]

_REGISTER_WORKERS = 16
# The name kubelet.sock is bound under before the rename (start(): why); the name the
# socket keeps in ss and /proc/net/unix.
BINDING_NAME = f".{KUBELET_SOCKET}.binding"
# How long stop() (and a replacing Register) waits for a client thread to end after its stream
# was cancelled, and again after its channel was closed. A cancelled sync stream was once seen
# still waiting in __next__ under heavy load; closing the channel ends it for certain.
LINK_END_SECONDS = 10.0


class KubeletStandin(RegistrationServer, PodAdmission):
    """A kubelet's device manager: Registration server plus one client per registered plugin.

    Thread-safe: one lock (inside ``_cond``) guards all state, and ``_cond`` is notified at
    every change so that :meth:`wait_for` and in-flight dials wake up.
    """

    def __init__(
        self,
        socket_dir: Path,
        *,
        dial_timeout: float = 10.0,
        register_first: bool = False,
        device_manager: str = "1.32",
        subdirectory_endpoints: str = JOINED,
        state_file: Path | None = None,
        pods: PodStore | None = None,
        runtime: RuntimeState | None = None,
        socket_after: float = 0.0,
        admit_after: float = 0.0,
        started_at: float | None = None,
        plugins_registry_dir: Path | None = None,
        node: str = "node-a",
        apiserver: ApiAccess | None = None,
        dra_versions: Sequence[str] = ("v1.DRAPlugin", "v1beta1.DRAPlugin"),
        deregistration_grace: float = 30.0,
        dra_resource_health: str | None = "1.36",
        dra_health_retry: float = 5.0,
        pod_source: PodSource | None = None,
    ) -> None:
        """``device_manager``: "1.32", "1.36" or "1.37" (see the module's docstring); with
        ``register_first`` only "1.32".

        ``kubelet.sock`` appears ``socket_after`` seconds after each start, and ``pods``, the
        pods bound to the node, are admitted ``admit_after`` seconds after it (the kubelet first
        waits for its Node to sync); ``runtime``: which of them still run (default: this
        process's memory). The first start counts from ``started_at`` (time.monotonic()), if
        given, instead of from start().

        ``plugins_registry_dir`` turns on the DRA side (kubelet_plugins.py and
        kubelet_dra.py): the plugin watcher there, the DRA manager for ``node``, wiping slices
        through ``apiserver`` (the node's credentials; None: no wipes), speaking
        ``dra_versions`` (a 1.32-era kubelet: ``("v1beta1.DRAPlugin",)``), wiping a gone
        driver's slices ``deregistration_grace`` seconds after its last plugin left, watching
        every plugin's health as a ``dra_resource_health`` kubelet does ("1.36": v1alpha1 on
        every plugin; "1.37": the health service the plugin lists; None: none), again
        ``dra_health_retry`` seconds after each end of a stream. With ``pod_source`` too, it
        syncs the node's pods that hold claims as the 1.36 pod workers do (kubelet_pods.py)."""
        self.socket_dir = Path(os.path.abspath(socket_dir))
        self._dial_timeout = dial_timeout
        if device_manager not in DEVICE_MANAGERS or (register_first and device_manager != "1.32"):
            raise ValueError(f"device_manager: one of {DEVICE_MANAGERS}, 1.32 with register_first")
        self._register_first = register_first
        self.device_manager = device_manager
        self._subdirectory_endpoints = subdirectory_endpoints
        self._state_file = state_file
        self._pods = pods
        self._runtime = runtime if runtime is not None else RuntimeState(None)
        self._socket_after = socket_after
        self._admit_after = admit_after
        self._first_start_at = started_at
        self._admission: threading.Thread | None = None
        self._cond = threading.Condition()
        # Guarded by _cond:
        self._generation = 0
        self._server = None
        self._executor: ThreadPoolExecutor | None = None
        self._book = EndpointBook[Link](device_manager)
        self._ended = []
        self._views = {}
        self._rejected = []
        self._checkpoint = Checkpoint()
        self._started_at = self._socket_at = 0.0
        self._admitted_at = None
        self._statuses = {}
        self._synced = 0
        self._dra = None
        self._watcher: PluginWatcher | None = None
        self._pod_workers: PodWorkers | None = None
        if plugins_registry_dir is not None:
            dra = _sibling("kubelet_dra")
            self._dra = dra.DraManager(
                self._cond,
                self._changed,
                self._violation,
                node=node,
                apiserver=apiserver,
                versions=dra_versions,
                grace=deregistration_grace,
                resource_health=dra_resource_health,
                health_retry=dra_health_retry,
            )
            if pod_source is not None:
                self._pod_workers = _sibling("kubelet_pods").PodWorkers(
                    self._cond, self._changed, self._dra, node, pod_source
                )
            self._watcher = _sibling("kubelet_plugins").PluginWatcher(
                Path(os.path.abspath(plugins_registry_dir)),
                {"DRAPlugin": self._dra},
                self._cond,
                self._changed,
            )

    def __enter__(self) -> KubeletStandin:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # --- lifecycle ---------------------------------------------------------------------

    def start(self) -> None:
        """Like a starting kubelet: delete every file in the directory but the checkpoint
        (up to 1.32 plugins' sockets, regular files and symlinks alike; from 1.33 sockets only;
        subdirectories stay), read and
        write the checkpoint, then serve Registration on a fresh ``kubelet.sock``. Plugins that
        were serving must notice and register again. With pods, their admission follows in a
        thread of its own."""
        started = time.monotonic() if self._first_start_at is None else self._first_start_at
        self._first_start_at = None
        _sleep_until(started + self._socket_after)
        with self._cond:
            if self._server is not None:
                raise RuntimeError("the kubelet stand-in is already running")
            self.socket_dir.mkdir(parents=True, exist_ok=True)
            removed = clean_directory(self.socket_dir, sockets_only=self.device_manager != "1.32")
            if removed:
                LOG.info("kubelet starting: removed %s", ", ".join(removed))
            executor = ThreadPoolExecutor(_REGISTER_WORKERS, thread_name_prefix="kubelet-register")
            server = grpc.server(executor, handlers=[registration_handler(self._register)])
            # gRPC creates the socket file a moment before it listens on it (a thread connecting
            # the moment the file appeared was refused 4 to 53 times in 100, grpcio 1.46 to
            # 1.85), while a real kubelet's net.Listen binds and listens back to back. So it
            # binds under another name, and kubelet.sock appears, by a rename, only once it
            # listens (connections then wait for start()).
            binding = self.socket_dir / BINDING_NAME
            binding.unlink(missing_ok=True)
            # Older grpcio reports a failed bind by returning 0 instead of raising.
            if not server.add_insecure_port(f"unix:{binding}"):
                raise RuntimeError(f"cannot serve on {binding}")
            os.replace(binding, self.socket_path)
            socket_at = time.monotonic()
            # Before the server starts, so that the first Register sees this generation.
            self._server, self._executor = server, executor
            self._generation += 1
            self._checkpoint = Checkpoint.read(self.checkpoint_path)
            self._write_checkpoint()
            server.start()
            self._started_at, self._socket_at, self._admitted_at = started, socket_at, None
            if self._pods is not None:
                self._admission = threading.Thread(
                    target=self._admit_when_due,
                    args=(self._generation, socket_at + self._admit_after),
                    name="kubelet-admission",
                    daemon=True,
                )
                self._admission.start()
            self._changed(
                f"kubelet listening on {self.socket_path} (generation {self._generation})"
            )
        if self._dra is not None and self._watcher is not None:
            self._dra.start()  # the node-wide slice wipe, in the background as in the kubelet
            self._watcher.start()
            if self._pod_workers is not None:
                self._pod_workers.start()

    def stop(self) -> None:
        """Stop serving, end every ListAndWatch stream, remove ``kubelet.sock``; forget every
        DRA plugin. Idempotent."""
        if self._pod_workers is not None:
            self._pod_workers.stop()
        if self._watcher is not None and self._dra is not None:
            self._watcher.stop()
            self._dra.stop()
        with self._cond:
            server, executor = self._server, self._executor
            if server is None or executor is None:
                return
            self._server = self._executor = None
            links, self._ended = self._ended, []
            held = self._drop_links(links)
            self._changed("kubelet stopped: every resource has allocatable 0")
            admission, self._admission = self._admission, None
        server.stop(None).wait()
        # In-flight Register calls see the stop (their dial is abandoned) and return quickly.
        executor.shutdown(wait=True)
        self._await_links(links)
        for link in held:  # stale endpoints (kubelet_endpoints.py) kept theirs open till now
            link.channel.close()
        # It sees the stop at once, unless in an Allocate call (bounded by the dial timeout).
        if admission is not None:
            admission.join(self._dial_timeout + LINK_END_SECONDS)
            if admission.is_alive():
                raise RuntimeError("kubelet stand-in: the pod admission did not end")
        self.socket_path.unlink(missing_ok=True)

    def restart(self) -> None:
        """Like a kubelet restart: stop, then start (which deletes every file but the
        checkpoint).

        Every resource stays unhealthy (allocatable 0) until its plugin registers again.
        """
        self.stop()
        self.start()

    # --- observing -----------------------------------------------------------------------

    def snapshot(self) -> KubeletView:
        with self._cond:
            return self._snapshot()

    def wait_for(
        self, predicate: Callable[[KubeletView], bool], timeout: float = 20.0
    ) -> KubeletView:
        """The first view for which ``predicate`` holds; AssertionError with the last one.

        A predicate that raises LookupError (``view.resources[name]`` before the plugin
        registered) counts as not satisfied yet.
        """
        return wait_for_view(
            self._cond, self._snapshot, predicate, timeout, "kubelet stand-in", "the kubelet sees"
        )

    # --- DRA, as the kubelet's DRA manager calls plugins ---------------------------------------

    def prepare(
        self, driver: str, claims: Sequence[tuple[str, str, str]], timeout: float = 45.0
    ) -> CallResult:
        """NodePrepareResources for ``claims`` ((namespace, uid, name) each) on the driver's
        plugin; the kubelet's verdict and each claim's answer (kubelet_dra.py)."""
        if self._dra is None:
            raise RuntimeError("the kubelet stand-in has no plugins_registry_dir")
        return self._dra.call("NodePrepareResources", driver, claims, timeout)

    def unprepare(
        self, driver: str, claims: Sequence[tuple[str, str, str]], timeout: float = 45.0
    ) -> CallResult:
        if self._dra is None:
            raise RuntimeError("the kubelet stand-in has no plugins_registry_dir")
        return self._dra.call("NodeUnprepareResources", driver, claims, timeout)

    def _await_links(self, links: Sequence[Link]) -> None:
        # LINK_END_SECONDS is read at each call, so that a test can shorten it.
        wait_until_ended(links, LINK_END_SECONDS)


def _sibling(name: str) -> Any:
    """A module beside this one: ``tests.standin.<name>`` in the tests, ``<name>`` when this
    file runs as a script with its siblings copied beside it (the DRA side only)."""
    return importlib.import_module(f"{__package__}.{name}" if __package__ else name)


def _sleep_until(moment: float) -> None:
    while (left := moment - time.monotonic()) > 0:
        time.sleep(left)
