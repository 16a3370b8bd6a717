"""The kubelet's plugin watcher (pkg/kubelet/pluginmanager), for the kubelet stand-in.

Like the real one (pluginwatcher/plugin_watcher.go): it watches the ``plugins_registry``
directory and its subdirectories with inotify (here the watchdog library), ignores names
starting with ``.`` and anything that is not a unix socket, and finds the sockets already there
at start. A socket created (or renamed into place) is a plugin to register, under a new
identity each time (the desired state's UUID, formerly a timestamp), so a replaced socket is
deregistered, then registered again (reconciler/reconciler.go: deregistrations first), and
only at the reconciler's next pass, a second later: its operations are keyed by the socket's
path (nestedpendingoperations), so the registration it tries in the pass that started the
deregistration is refused as already under way (the same for a socket removed and made again
at its path). For that second the plugin is gone (a real
1.36 and 1.37 kubelet did this when a DaemonSet's driver restarted in its pod and made its
sockets again at the same paths: ``OperationExecutor.UnregisterPlugin started``, then
``RegisterPlugin started`` 1.0 s later; tests/node/test_daemonset.py). A removed socket
deregisters its plugin.

Registration (operationexecutor/operation_generator.go, ``GenerateRegisterPluginFunc``): dial
(10 s), ``GetInfo`` (1 s), pick the handler of ``PluginInfo.type`` (only ``DRAPlugin`` here;
"RegisterPlugin error -- no handler registered for plugin type: <type> at socket <path>"), an
empty endpoint means the registration socket itself, ``ValidatePlugin`` ("RegisterPlugin error
-- plugin validation failed with err: ..."), then ``RegisterPlugin`` ("RegisterPlugin error --
plugin registration failed with err: ..."), then ``NotifyRegistrationStatus(true)`` (5 s). Each
refusal is sent with ``NotifyRegistrationStatus(false, <those words>)``. A registration that
failed before the plugin entered the actual state (dial, GetInfo, type, validation) is tried
again with exponential backoff (0.5 s doubling to 2 min 2 s, pkg/util/goroutinemap/
exponentialbackoff); one refused by ``RegisterPlugin`` is not, as in the real reconciler.

Not modelled: the 1.35+ connection monitor (monitor.go), which deregisters a plugin whose
registration socket stopped answering GetInfo twice at 10 s intervals, and registers again a
socket that answers again; the real reconciler's 1 s loop otherwise (the stand-in reacts at
once, but for the replaced socket above).
"""

from __future__ import annotations

import logging
import stat
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import grpc
from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers import Observer

from token_resource.protocol import pluginregistration_pb2 as pb
from token_resource.protocol.pluginregistration import GET_INFO, NOTIFY_REGISTRATION_STATUS

LOG = logging.getLogger("kubelet-standin")

DIAL_SECONDS = 10.0
GET_INFO_SECONDS = 1.0
NOTIFY_SECONDS = 5.0
FIRST_RETRY_SECONDS = 0.5
# The real reconciler's loop period (pluginmanager's reconcilerLoopSleepDuration).
RECONCILE_SECONDS = 1.0
LAST_RETRY_SECONDS = 122.0


class PluginHandler(Protocol):
    """The handler of one plugin type (cache.PluginHandler)."""

    def validate_plugin(self, name: str, endpoint: str, versions: list[str]) -> str | None: ...

    def register_plugin(
        self, name: str, endpoint: str, versions: list[str], socket: Path
    ) -> str | None: ...

    def deregister_plugin(self, name: str, endpoint: str, socket: Path) -> None: ...


@dataclass
class _Registered:
    identity: str
    name: str
    endpoint: str


class PluginWatcher:
    """Desired state (sockets seen) and actual state (plugins registered), reconciled by a
    thread of its own; every change of state goes through ``cond`` and ``changed``."""

    def __init__(
        self,
        directory: Path,
        handlers: dict[str, PluginHandler],
        cond: threading.Condition,
        changed: Callable[[str], None],
    ) -> None:
        self.directory = directory
        self._handlers = handlers
        self._cond = cond
        self._changed = changed
        # Guarded by cond:
        self._desired: dict[Path, str] = {}  # socket -> identity of its latest creation
        self._actual: dict[Path, _Registered] = {}
        self._retry: dict[Path, tuple[float, float]] = {}  # socket -> (not before, delay)
        # socket -> when its deregistration's pass is over (no registration there before).
        self._quiet_until: dict[Path, float] = {}
        self._running = False
        self._observer: Any = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        observer = Observer()
        observer.schedule(_Events(self), str(self.directory), recursive=True)
        observer.start()
        with self._cond:
            self._running = True
            self._observer = observer
            for path in sorted(self.directory.rglob("*")):
                self._seen(path)
            self._thread = threading.Thread(target=self._reconcile, name="kubelet-plugins")
            self._thread.start()

    def stop(self) -> None:
        """Stop watching; registered plugins stay registered until the owner drops them."""
        with self._cond:
            self._running = False
            observer, thread = self._observer, self._thread
            self._observer = self._thread = None
            self._cond.notify_all()
        if observer is not None:
            observer.stop()
            observer.join()
        if thread is not None:
            thread.join()

    # --- events (watchdog's thread) ----------------------------------------------------------

    def _seen(self, path: Path) -> None:
        """Caller holds the lock: a new file or directory under the watched one."""
        if any(part.startswith(".") for part in path.relative_to(self.directory).parts):
            return
        try:
            is_socket = stat.S_ISSOCK(path.lstat().st_mode)
        except OSError:
            return
        if is_socket:
            self._desired[path] = str(uuid.uuid4())
            self._retry.pop(path, None)
            self._changed(f"plugin socket {path} found")

    def _gone(self, path: Path) -> None:
        """Caller holds the lock."""
        if self._desired.pop(path, None) is not None:
            self._retry.pop(path, None)
            self._changed(f"plugin socket {path} removed")

    # --- the reconciler (its own thread) -------------------------------------------------------

    def _reconcile(self) -> None:
        while True:
            with self._cond:
                work = self._next_work()
                while work is None and self._running:
                    now = time.monotonic()
                    waits = [not_before - now for not_before, _ in self._retry.values()]
                    waits += [until - now for until in self._quiet_until.values() if until > now]
                    self._cond.wait(max(min(waits), 0.01) if waits else None)
                    work = self._next_work()
                if not self._running:
                    return
            assert work is not None
            action, path, item = work
            if action == "deregister":
                assert isinstance(item, _Registered)
                self._handlers["DRAPlugin"].deregister_plugin(item.name, item.endpoint, path)
            else:
                assert isinstance(item, str)
                self._register(path, item)

    def _next_work(self) -> tuple[str, Path, _Registered | str] | None:
        """Caller holds the lock: deregistrations first, then registrations due."""
        for path, registered in list(self._actual.items()):
            if self._desired.get(path) != registered.identity:
                del self._actual[path]
                # Whatever comes at this path next registers at the next pass, a second on.
                self._quiet_until[path] = time.monotonic() + RECONCILE_SECONDS
                return "deregister", path, registered
        now = time.monotonic()
        for path, identity in self._desired.items():
            current = self._actual.get(path)
            if current is not None and current.identity == identity:
                continue
            not_before, _ = self._retry.get(path, (0.0, 0.0))
            if max(not_before, self._quiet_until.get(path, 0.0)) <= now:
                # Until it fails, no second attempt: the first is under way.
                self._retry[path] = (float("inf"), self._retry.get(path, (0, 0))[1])
                return "register", path, identity
        return None

    def _register(self, path: Path, identity: str) -> None:
        """GenerateRegisterPluginFunc; on failure, the next attempt after a backoff."""
        error, in_actual_state = self._try_register(path, identity)
        with self._cond:
            if error is None or in_actual_state:
                self._retry.pop(path, None)
            elif self._desired.get(path) == identity:
                delay = self._retry.get(path, (0.0, 0.0))[1]
                delay = min(delay * 2, LAST_RETRY_SECONDS) if delay else FIRST_RETRY_SECONDS
                self._retry[path] = (time.monotonic() + delay, delay)
            if error is not None:
                self._changed(f"registration at {path} failed: {error}")
            self._cond.notify_all()

    def _try_register(self, path: Path, identity: str) -> tuple[str | None, bool]:
        with grpc.insecure_channel(f"unix:{path}") as channel:
            try:
                grpc.channel_ready_future(channel).result(timeout=DIAL_SECONDS)
            except grpc.FutureTimeoutError:
                return f"RegisterPlugin error -- dial failed at socket {path}", False
            get_info = channel.unary_unary(
                GET_INFO, pb.InfoRequest.SerializeToString, pb.PluginInfo.FromString
            )
            try:
                info = get_info(pb.InfoRequest(), timeout=GET_INFO_SECONDS)
            except grpc.RpcError as failure:
                return (
                    "RegisterPlugin error -- failed to get plugin info using RPC GetInfo at "
                    f"socket {path}, err: {failure}"
                ), False
            handler = self._handlers.get(info.type)
            if handler is None:
                error = (
                    f"RegisterPlugin error -- no handler registered for plugin type: {info.type} "
                    f"at socket {path}"
                )
                return _notify(channel, False, error), False
            endpoint = info.endpoint or str(path)
            versions = list(info.supported_versions)
            problem = handler.validate_plugin(info.name, endpoint, versions)
            if problem is not None:
                error = f"RegisterPlugin error -- plugin validation failed with err: {problem}"
                return _notify(channel, False, error), False
            with self._cond:
                self._actual[path] = _Registered(identity, info.name, endpoint)
            problem = handler.register_plugin(info.name, endpoint, versions, path)
            if problem is not None:
                error = f"RegisterPlugin error -- plugin registration failed with err: {problem}"
                return _notify(channel, False, error), True
            return _notify(channel, True, ""), True


def _notify(channel: grpc.Channel, registered: bool, error: str) -> str | None:
    """NotifyRegistrationStatus; returns the registration's error (or the call's)."""
    notify = channel.unary_unary(
        NOTIFY_REGISTRATION_STATUS,
        pb.RegistrationStatus.SerializeToString,
        pb.RegistrationStatusResponse.FromString,
    )
    try:
        notify(
            pb.RegistrationStatus(plugin_registered=registered, error=error), timeout=NOTIFY_SECONDS
        )
    except grpc.RpcError as failure:
        return f"{error}: {failure}" if error else f"failed to send registration status: {failure}"
    return error or None


class _Events(FileSystemEventHandler):
    """watchdog's thread hands each event to the watcher under its lock."""

    def __init__(self, watcher: PluginWatcher) -> None:
        self._watcher = watcher

    def on_any_event(self, event: FileSystemEvent) -> None:
        watcher = self._watcher
        source = Path(str(event.src_path))
        with watcher._cond:
            if event.event_type == "created":
                if event.is_directory:
                    for path in sorted(source.rglob("*")):
                        watcher._seen(path)
                watcher._seen(source)
            elif event.event_type == "deleted":
                watcher._gone(source)
            elif event.event_type == "moved":
                watcher._gone(source)
                watcher._seen(Path(str(getattr(event, "dest_path", ""))))
