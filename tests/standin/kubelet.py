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
runs it as a process of its own (the system tests' containers, the script-mode tests). The
DRA side (``plugins_registry_dir``) needs kubelet_plugins.py and kubelet_dra.py beside this
file, imported only when it is on.
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import grpc
from google.protobuf.message import Message

from tests.standin.admission import (
    AdmissionError,
    Checkpoint,
    PodStatus,
    PodStore,
    RuntimeState,
    admit_pods,
    describe_admission,
    write_atomically,
)
from tests.standin.kubelet_endpoints import DEVICE_MANAGERS, EndpointBook
from tests.standin.kubelet_rules import (
    CHECKPOINT,
    JOINED,
    NEVER_DIALLED,
    REFUSED,
    KubeletView,
    Options,
    ResourceView,
    _abridged,
    _describe,
    _quote,
    clean_directory,
    device_problems,
    is_extended_resource_name,
    registration_problem,
    serves_exactly,
    wait_for_view,
)
from token_resource.protocol import deviceplugin_pb2 as pb
from token_resource.protocol.deviceplugin import (
    ALLOCATE,
    GET_DEVICE_PLUGIN_OPTIONS,
    GET_PREFERRED_ALLOCATION,
    HEALTHY,
    KUBELET_SOCKET,
    LIST_AND_WATCH,
    MAX_MESSAGE_BYTES,
    registration_handler,
)

if TYPE_CHECKING:
    from tests.standin.kubelet_dra import ApiAccess, CallResult, DraManager
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

LOG = logging.getLogger("kubelet-standin")

# A plugin's messages are refused above this size, as by the kubelet's gRPC client.
_CHANNEL_OPTIONS = [("grpc.max_receive_message_length", MAX_MESSAGE_BYTES)]
_REGISTER_WORKERS = 16
# How long stop() (and a replacing Register) waits for a client thread to end after its stream
# was cancelled, and again after its channel was closed. A cancelled sync stream was once seen
# still waiting in __next__ under heavy load; closing the channel ends it for certain.
LINK_END_SECONDS = 10.0

_Response = TypeVar("_Response", bound=Message)


class _DialError(Exception):
    """The kubelet could not connect to a plugin (dial, options, PluginConnected); the text is
    the kubelet's error."""


class _Stale(Exception):
    """A Register finished after the kubelet stopped or restarted under it."""


@dataclass(eq=False)
class _Link:
    """The kubelet's connection to the plugin of one successful Register."""

    resource: str
    path: Path
    channel: grpc.Channel
    endpoint: str  # as the Register named it
    register_options: Options
    options: Options | None = None  # GetDevicePluginOptions' answer
    call: grpc.CallIterator[pb.ListAndWatchResponse] | None = None
    thread: threading.Thread | None = None
    # Set under the lock once the kubelet closed it (disconnected, or replaced in "1.32"): its
    # lists no longer count.
    closed: bool = False
    ended: bool = False  # its stream ended (set under the lock)


class KubeletStandin:
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
        self._server: grpc.Server | None = None
        self._executor: ThreadPoolExecutor | None = None
        self._book = EndpointBook[_Link](device_manager)  # the clients and endpoints it holds
        self._ended: list[_Link] = []  # every link whose thread may not have ended yet
        self._views: dict[str, ResourceView] = {}
        self._rejected: list[str] = []
        self._checkpoint = Checkpoint()
        self._started_at = self._socket_at = 0.0
        self._admitted_at: float | None = None
        self._statuses: dict[str, PodStatus] = {}
        self._synced = 0  # the generation whose Node sync_node() declared synced
        self._dra: DraManager | None = None
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

    @property
    def socket_path(self) -> Path:
        return self.socket_dir / KUBELET_SOCKET

    @property
    def checkpoint_path(self) -> Path:
        return self.socket_dir / CHECKPOINT

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
            binding = self.socket_dir / f".{KUBELET_SOCKET}.binding"
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
        _wait_until_ended(links)
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

    # --- admitting the node's pods, once after every start -----------------------------------

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
            raise AdmissionError(_rpc_error(error)) from None
        if len(response.container_responses) != 1:
            raise AdmissionError(
                f"unexpected number of container responses: {len(response.container_responses)}"
            )

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

    # --- calling plugins, as the kubelet does ----------------------------------------------

    def allocate(
        self, resource: str, device_ids: Sequence[str], timeout: float = 10.0
    ) -> pb.AllocateResponse:
        """Allocate with one container request, as the kubelet sends at container creation."""
        request = pb.AllocateRequest(
            container_requests=[pb.ContainerAllocateRequest(devices_ids=device_ids)]
        )
        return self.allocate_raw(resource, request, timeout)

    def allocate_raw(
        self, resource: str, request: pb.AllocateRequest, timeout: float = 10.0
    ) -> pb.AllocateResponse:
        return self._call(resource, ALLOCATE, request, pb.AllocateResponse, timeout)

    def get_preferred_allocation(
        self,
        resource: str,
        available: Sequence[str],
        must_include: Sequence[str],
        size: int,
        timeout: float = 10.0,
    ) -> pb.PreferredAllocationResponse:
        request = pb.PreferredAllocationRequest(
            container_requests=[
                pb.ContainerPreferredAllocationRequest(
                    available_deviceIDs=available,
                    must_include_deviceIDs=must_include,
                    allocation_size=size,
                )
            ]
        )
        return self.get_preferred_allocation_raw(resource, request, timeout)

    def get_preferred_allocation_raw(
        self, resource: str, request: pb.PreferredAllocationRequest, timeout: float = 10.0
    ) -> pb.PreferredAllocationResponse:
        return self._call(
            resource, GET_PREFERRED_ALLOCATION, request, pb.PreferredAllocationResponse, timeout
        )

    def _call(
        self,
        resource: str,
        method: str,
        request: Message,
        response_type: type[_Response],
        timeout: float,
    ) -> _Response:
        """A unary call on the connection the kubelet holds; grpc.RpcError propagates as-is."""
        with self._cond:
            link = self._book.current(resource)
            if link is None or not self._views[resource].stream_open:
                raise LookupError(f"{resource}: no device plugin connected")
        rpc = link.channel.unary_unary(method, _serialize, response_type.FromString)
        response: _Response = rpc(request, timeout=timeout)
        return response

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

    def _violation(self, text: str) -> None:
        """Caller holds the lock: a plugin broke the protocol."""
        self._rejected.append(text)
        self._changed(f"protocol violation: {text}")

    # --- Register --------------------------------------------------------------------------

    def _register(self, request: pb.RegisterRequest, context: grpc.ServicerContext) -> pb.Empty:
        with self._cond:
            generation = self._generation
        problem = registration_problem(request, self._subdirectory_endpoints)
        if problem is not None:
            self._refuse(context, request, problem)
        path = self.socket_dir / request.endpoint
        link = _Link(
            request.resource_name,
            path,
            grpc.insecure_channel(f"unix:{path}", _CHANNEL_OPTIONS),
            request.endpoint,
            Options.of(request.options),
        )
        if self.device_manager != "1.32":
            with self._cond:  # connectClient's registerClient comes before the dial
                self._book.register_client(link)
        try:
            if not self._register_first:
                link.options = self._connect(link, lambda: not self._serving(generation))
            replaced = self._accept(request, link, generation)
        except _DialError as error:
            self._forget(link)
            self._refuse(context, request, str(error))
        except _Stale:
            self._forget(link)
            context.abort(grpc.StatusCode.UNAVAILABLE, "the kubelet restarted during Register")
        # "1.32": the old stream is already cancelled; let its thread finish before answering.
        _wait_until_ended(replaced)
        return pb.Empty()

    def _forget(self, link: _Link) -> None:
        """A failed connectClient: deregisterClient (up to 1.36 by name, in 1.37 every client
        of the path, a live one too: kubelet_endpoints.py), and the channel is not used."""
        if self.device_manager != "1.32":
            with self._cond:
                self._book.deregister_client(link.resource, link.path)
        link.channel.close()

    def _refuse(
        self, context: grpc.ServicerContext, request: pb.RegisterRequest, error: str
    ) -> NoReturn:
        """Record and fail the Register call (a Go error reaches the plugin as UNKNOWN)."""
        with self._cond:
            self._rejected.append(error)
            self._changed(f"refused Register of {_quote(request.resource_name)}: {error}")
        context.abort(grpc.StatusCode.UNKNOWN, error)

    def _connect(self, link: _Link, abandoned: Callable[[], bool]) -> Options:
        """The 1.32 kubelet's synchronous part of Register: dial, then GetDevicePluginOptions."""
        self._dial(link, abandoned)
        get_options = link.channel.unary_unary(
            GET_DEVICE_PLUGIN_OPTIONS, _serialize, pb.DevicePluginOptions.FromString
        )
        # The kubelet sets no deadline here; the dial timeout keeps a stuck plugin from
        # holding a test (and stop()) forever.
        future = get_options.future(pb.Empty(), timeout=self._dial_timeout)
        self._wait(future, abandoned, None)
        try:
            return Options.of(future.result())
        except grpc.RpcError as error:
            raise _DialError(f"failed to get device plugin options: {_rpc_error(error)}") from None

    def _dial(self, link: _Link, abandoned: Callable[[], bool]) -> None:
        """Like grpc.DialContext with WithBlock: wait until connected, at most the dial timeout."""
        if not link.path.is_socket():
            raise _DialError(f"failed to dial device plugin: no socket at {link.path}")
        try:
            self._wait(grpc.channel_ready_future(link.channel), abandoned, self._dial_timeout)
        except _DialError as error:
            raise _DialError(f"failed to dial device plugin: {error}") from None

    def _wait(
        self, future: grpc.Future[Any], abandoned: Callable[[], bool], timeout: float | None
    ) -> None:
        """Wait for a gRPC future, giving up (and cancelling it) at the timeout or when
        ``abandoned()`` turns true, so that stop() never waits for a dial to time out."""
        future.add_done_callback(lambda _: self._wake())
        with self._cond:
            self._cond.wait_for(lambda: future.done() or abandoned(), timeout)
            gave_up = abandoned()
        if not future.done() or gave_up:
            future.cancel()
            raise _DialError("context canceled" if gave_up else "context deadline exceeded")

    def _wake(self) -> None:
        with self._cond:
            self._cond.notify_all()

    def _accept(
        self,
        request: pb.RegisterRequest,
        link: _Link,
        generation: int,
    ) -> list[_Link]:
        """PluginConnected: make ``link`` the resource's current endpoint (1.37: refused if
        its path is connected already) and start its client thread.

        Returns the registrations it replaced ("1.32"), whose streams are cancelled first.
        """
        name = request.resource_name
        with self._cond:
            if not self._serving(generation):
                raise _Stale
            replaced: list[_Link] = []
            if self.device_manager == "1.32":  # the stand-in's own model: close the old one
                replaced = self._book.register_client(link)
                for old in replaced:
                    self._drop(old)
            error = self._book.connect(link)
            if error is not None:
                raise _DialError(error)
            previous = self._views.get(name)
            self._views[name] = ResourceView(
                name=name,
                endpoint=request.endpoint,
                register_options=link.register_options,
                options=link.options,
                registrations=1 if previous is None else previous.registrations + 1,
                registered_at=time.monotonic(),
                # The kubelet keeps the old list until the new stream sends one.
                devices=() if previous is None else previous.devices,
                # A 1.32 kubelet counts the plugin as connected once Register succeeds;
                # a 1.24-era one only after its later dial.
                stream_open=not self._register_first,
            )
            self._endpoints_changed(name)
            link.thread = threading.Thread(
                target=self._run_link, args=(link,), name=f"kubelet-{name}", daemon=True
            )
            self._ended = [
                live for live in self._ended if live.thread and live.thread.is_alive()
            ] + [link]
            link.thread.start()
            self._changed(f"registered {name} via {request.endpoint}")
            return replaced

    def _serving(self, generation: int) -> bool:
        """Caller holds the lock: the server that took a Register call is still the live one."""
        return self._server is not None and self._generation == generation

    # --- one client thread per registration -------------------------------------------------

    def _run_link(self, link: _Link) -> None:
        """The kubelet's client loop: (dial,) open ListAndWatch, record every message."""
        reason = "the plugin ended the stream"
        refused = False
        try:
            if self._register_first:
                if (
                    self._subdirectory_endpoints == NEVER_DIALLED
                    and "/" in link.path.relative_to(self.socket_dir).as_posix()
                ):
                    LOG.info("%s: not dialling %s (a subdirectory)", link.resource, link.path)
                    return
                self._dial(link, lambda: link.closed)
            call = self._open_stream(link)
            for response in call or ():
                self._received(link, response)
        except _DialError as error:
            reason, refused = f"{error} (after Register was answered)", True
        except grpc.RpcError as error:
            reason = _rpc_error(error)
            # The kubelet's client refused a message (over 4 MiB): a protocol violation.
            refused = error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        finally:
            if not self._link_ended(link, reason, refused):
                link.channel.close()

    def _open_stream(self, link: _Link) -> grpc.CallIterator[pb.ListAndWatchResponse] | None:
        with self._cond:
            if link.closed:
                return None
            list_and_watch = link.channel.unary_stream(
                LIST_AND_WATCH, _serialize, pb.ListAndWatchResponse.FromString
            )
            link.call = list_and_watch(pb.Empty())
            if self._register_first:
                self._update(link.resource, stream_open=True)
                self._changed(f"connected to {link.resource} at {link.path.name}")
            return link.call

    def _received(self, link: _Link, response: pb.ListAndWatchResponse) -> None:
        """Each message replaces the whole device set, whichever of the resource's clients
        sent it (genericDeviceUpdateCallback); in the real handlers ("1.36", "1.37") it also
        makes the healthy ones allocatable again, connected endpoint or not."""
        devices = tuple((device.ID, device.health) for device in response.devices)
        problems = device_problems(devices)
        with self._cond:
            if link.closed:
                return
            view = self._views[link.resource]
            self._update(
                link.resource,
                devices=devices,
                stream_open=view.stream_open or self.device_manager != "1.32",
                lists_received=view.lists_received + 1,
                listed_at=time.monotonic() if view.listed_at is None else view.listed_at,
            )
            events = [f"{link.resource}: {_describe(devices)}"]
            for problem in _abridged(problems):
                self._rejected.append(f"{link.resource}: {problem}")
                events.append(f"protocol violation: {link.resource}: {problem}")
            self._changed(*events)

    def _link_ended(self, link: _Link, reason: str, refused: bool) -> bool:
        """handler.go runClient after a stream ended: disconnect the client the handler finds
        for it (kubelet_endpoints.py: not always this one, or none). True if ``link`` stays
        an endpoint of the kubelet all the same (a stale one), its channel kept open."""
        name = link.resource
        with self._cond:
            link.ended = True
            if refused and not link.closed:
                self._rejected.append(f"{name}: {reason}")
            client = self._book.client_for(link)
            if client is None:  # closed by the kubelet itself, or forgotten by its handler
                stale = link in self._book.endpoints(name)
                if stale:
                    self._endpoints_changed(name)
                    self._changed(
                        f"stream for {name} at {link.endpoint} ended ({reason}), but its "
                        "client was forgotten: a stale endpoint, still allocatable"
                    )
                return stale
            self._book.deregister_client(name, client.path)
            self._drop(client)  # Disconnect closes its connection
            unhealthy = self._book.disconnect(client)
            view = self._endpoints_changed(name, **({"stream_open": False} if unhealthy else {}))
            outcome = "allocatable 0" if unhealthy else f"current endpoint {view.endpoint}"
            if client is not link:  # up to 1.36 the handler finds its client by name
                outcome = f"disconnected {client.endpoint}, {outcome}"
            self._changed(f"stream for {name} at {link.endpoint} ended ({reason}): {outcome}")
            return False

    def _endpoints_changed(self, name: str, **changes: Any) -> ResourceView:
        """Caller holds the lock: the view follows the kubelet's endpoints of ``name``."""
        held = self._book.endpoints(name)
        current = self._book.current(name)
        if current is not None:
            changes.update(
                endpoint=current.endpoint,
                register_options=current.register_options,
                options=current.options,
            )
        self._update(
            name,
            endpoints=tuple(link.endpoint for link in held),
            stale_endpoints=tuple(link.endpoint for link in held if link.ended),
            **changes,
        )
        return self._views[name]

    def _drop_links(self, running: Sequence[_Link]) -> list[_Link]:
        """Caller holds the lock: the kubelet goes away, every resource becomes unhealthy.
        Returns the endpoints it held (stale ones' channels are still open)."""
        for link in running:
            self._drop(link)
        held = self._book.clear()
        for name in self._views:
            self._endpoints_changed(name, stream_open=False)
        return held

    def _drop(self, link: _Link) -> None:
        """Caller holds the lock: stop using ``link`` and cancel its stream (or pending dial)."""
        link.closed = True
        if link.call is not None:
            link.call.cancel()  # type: ignore[no-untyped-call]  # grpc-stubs leaves it untyped

    # --- state ---------------------------------------------------------------------------

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


def _wait_until_ended(links: Sequence[_Link]) -> None:
    """Wait for the client threads of ``links``, whose streams were cancelled: a bounded wait,
    then their channels closed and another; a thread still running then is an error."""
    deadline = time.monotonic() + LINK_END_SECONDS
    for link in links:
        if link.thread is not None:
            link.thread.join(max(deadline - time.monotonic(), 0))
    stuck = [link for link in links if link.thread is not None and link.thread.is_alive()]
    for link in stuck:
        LOG.warning("%s: the client thread outlived its cancelled stream", link.resource)
        link.channel.close()
    for link in stuck:
        assert link.thread is not None
        link.thread.join(LINK_END_SECONDS)
    still = [link.resource for link in stuck if link.thread is not None and link.thread.is_alive()]
    if still:
        raise RuntimeError(f"kubelet stand-in: the client threads of {still} did not end")


def _sibling(name: str) -> Any:
    """A module beside this one: ``tests.standin.<name>`` in the tests, ``<name>`` when this
    file runs as a script with its siblings copied beside it (the DRA side only)."""
    return importlib.import_module(f"{__package__}.{name}" if __package__ else name)


def _serialize(message: Message) -> bytes:
    return message.SerializeToString()


def _rpc_error(error: grpc.RpcError) -> str:
    """As grpc-go prints a status, e.g. ``rpc error: code = Unavailable desc = ...``."""
    code = "".join(word.capitalize() for word in error.code().name.split("_"))
    return f"rpc error: code = {code} desc = {error.details()}"


def _sleep_until(moment: float) -> None:
    while (left := moment - time.monotonic()) > 0:
        time.sleep(left)
