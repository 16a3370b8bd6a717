"""Turns the configured resources into running plugin servers and keeps each one registered.

The only place that starts, changes or stops plugin servers. It is driven by the agent with
the desired resources (at start and on reload), diffed against what actually runs, and with
what happens in the kubelet's socket directory. A kubelet restart costs a Register per
resource and nothing more: the sockets live in the agent's own directory, which the kubelet
leaves alone (``sockets``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Callable

from token_resource.config.diff import diff_resources
from token_resource.config.model import ResourceSpec
from token_resource.health.state import ALL_HEALTHY, TokenHealth
from token_resource.host.fswatch import FileEvent
from token_resource.kubelet.connection import KubeletConnection, SocketIdentity
from token_resource.kubelet.plugin import PluginServer
from token_resource.kubelet.registration import RegistrationError
from token_resource.kubelet.sockets import SUBDIRECTORY, SUBDIRECTORY_MODE, SocketLayout
from token_resource.observe.observer import NullObserver, Observer
from token_resource.protocol.deviceplugin import KUBELET_SOCKET

log = logging.getLogger(__name__)

# Retry quickly at first (a fresh kubelet.sock can exist a moment before it accepts calls),
# then back off so that a broken kubelet is not hammered.
FIRST_RETRY_DELAY = 0.05
MAX_RETRY_DELAY = 5.0
# After a Register the kubelet answered, how long to wait for its ListAndWatch: a kubelet that
# answers first and dials later (1.24-era) and cannot reach the socket never opens one.
DIAL_BACK_SECONDS = 10.0
# Resources a log line names before it says "and N more".
LOGGED_NAMES = 5


@dataclass(frozen=True)
class PluginState:
    name: str
    count: int
    registered: bool


@dataclass(frozen=True)
class PluginSummary:
    """The device-plugin resources in a few figures: what a status line needs, in time that
    does not grow with their number."""

    total: int
    registered: int
    first: tuple[PluginState, ...]  # the first few by name


@dataclass
class _Plugin:
    server: PluginServer
    registered: bool = False
    registering: asyncio.Task[None] | None = field(default=None, repr=False)
    # Due when the kubelet has not opened ListAndWatch this long after Register.
    dial_back: asyncio.TimerHandle | None = field(default=None, repr=False)
    # The kubelet.sock that the plugin registered, or is registering, with.
    kubelet: SocketIdentity | None = None


class Reconciler:
    def __init__(
        self,
        directory: Path,
        on_change: Callable[[], None],
        observer: Observer = NullObserver(),  # noqa: B008 (stateless)
        watch: Callable[[Path], None] = lambda directory: None,
    ) -> None:
        """``watch`` starts (or renews) the inotify watch of a directory whose events then
        reach :meth:`on_file_event`."""
        self._directory = directory
        self._watch = watch
        self._observer = observer
        self._kubelet = KubeletConnection(directory, on_change)
        self._on_change = on_change
        self.layout = SocketLayout(directory)
        self._plugins: dict[str, _Plugin] = {}
        self._by_endpoint: dict[str, _Plugin] = {}
        # The names in order, made again after a change of the set of servers.
        self._names: list[str] | None = None
        self._registered = 0  # how many plugins are registered
        self._health: Mapping[str, TokenHealth] = MappingProxyType({})
        self._checks: set[asyncio.Task[None]] = set()
        self._fallback: asyncio.Task[None] | None = None
        # Changes of the set of servers (apply, the fallback) one at a time.
        self._changing = asyncio.Lock()

    def name_sockets_after(self, instance: str | None) -> None:
        """Before the first apply: the instance to put in every socket's name (an agent beside
        another), or None for the fixed names."""
        self.layout = SocketLayout(self._directory, instance=instance)

    def kubelet_present(self) -> bool:
        """Whether a kubelet accepts calls on kubelet.sock (not merely a file left there)."""
        return self._kubelet.accepting()

    def kubelet_expected(self) -> bool:
        """Whether a kubelet.sock is there, answering or not yet."""
        return self._kubelet.identity() is not None

    def states(self) -> list[PluginState]:
        return [self._state(name) for name in self._sorted_names()]

    def summary(self, first: int) -> PluginSummary:
        names = self._sorted_names()[:first]
        return PluginSummary(
            len(self._plugins), self._registered, tuple(self._state(name) for name in names)
        )

    def _state(self, name: str) -> PluginState:
        plugin = self._plugins[name]
        return PluginState(name, plugin.server.pool.count, plugin.registered)

    def _sorted_names(self) -> list[str]:
        if self._names is None:
            self._names = sorted(self._plugins)
        return self._names

    async def apply(
        self,
        desired: Mapping[str, ResourceSpec],
        health: Mapping[str, TokenHealth] = MappingProxyType({}),
    ) -> list[str]:
        """Make the running servers match ``desired``: stop what is gone, update what changed
        in place, start and register what is new, each listing its tokens with their
        ``health`` (all healthy for a resource it does not name). Returns why resources could
        not be served.

        Unchanged resources are not touched: no new socket, no new registration. The diff is
        taken against what runs, so a resource that failed to start is tried again next time.
        """
        async with self._changing:
            self._health = health
            return await self._apply(desired)

    async def _apply(self, desired: Mapping[str, ResourceSpec]) -> list[str]:
        running = {name: plugin.server.spec for name, plugin in self._plugins.items()}
        diff = diff_resources(running, desired)
        for spec in diff.removed:
            await self._stop(self._plugins[spec.name])
            log.info("%s: removed; stopped serving", spec.name)
        for _, spec in diff.changed:
            self._plugins[spec.name].server.update(spec)
        for name, plugin in self._plugins.items():
            plugin.server.set_health(self._health.get(name, ALL_HEALTHY))
        # Created side by side: each socket's bind and listen are independent.
        started = await asyncio.gather(
            *(self._start(spec) for spec in diff.added), return_exceptions=True
        )
        failures = []
        for spec, outcome in zip(diff.added, started):
            if isinstance(outcome, (OSError, RuntimeError)):
                log.error("%s: cannot serve: %s", spec.name, outcome)
                failures.append(f"{spec.name}: cannot serve: {outcome}")
            elif isinstance(outcome, BaseException):
                raise outcome
        self._on_change()
        return failures

    def watch_directories(self) -> None:
        """Watch the device-plugin directory (kubelet.sock) and the sockets' directory."""
        for directory in self.directories():
            self._watch(directory)

    def directories(self) -> set[Path]:
        return {self._directory, self.layout.directory}

    def on_file_event(self, event: FileEvent) -> None:
        """What a file event in :meth:`directories` means for the plugins."""
        kubelet_socket = self._directory / KUBELET_SOCKET
        gone = event.kind in ("deleted", "moved")
        if (event.kind == "created" and event.path == kubelet_socket) or (
            event.kind == "moved" and event.dest == kubelet_socket
        ):
            self.kubelet_started()
        elif gone and event.path == kubelet_socket:
            self.kubelet_stopped()
        elif gone and event.path == self._directory / SUBDIRECTORY and self.layout.subdirectory:
            self.socket_directory_removed()
        elif (
            gone
            and event.path.parent == self.layout.directory
            and self.layout.owns(event.path.name)
        ):
            self.socket_removed(event.path)

    def kubelet_started(self) -> None:
        """A new kubelet.sock: a (re)started kubelet knows no plugin yet."""
        log.info("kubelet.sock appeared: registering %d resource(s)", len(self._plugins))
        self._observer.kubelet_appeared()
        current = self._kubelet.appeared()
        for plugin in self._plugins.values():
            # One that already registered (or is registering) with this very kubelet is left
            # alone: cancelling a Register in flight and sending another registers twice.
            if current is None or plugin.kubelet != current:
                self._register_soon(plugin)

    def kubelet_stopped(self) -> None:
        if self._kubelet.connected_to_current():
            log.debug("an older kubelet.sock went away: the kubelet there now is registered with")
            return
        log.info("kubelet.sock went away: waiting for the kubelet")
        self._kubelet.vanished()
        for plugin in self._plugins.values():
            self._cancel_registration(plugin)
            self._set_registered(plugin, False)
            plugin.kubelet = None
        self._on_change()

    def socket_removed(self, path: Path) -> None:
        """A file vanished where the agent's sockets are."""
        plugin = self._by_endpoint.get(str(path.relative_to(self._directory)))
        if plugin is not None:
            self._check_soon(plugin)

    def socket_directory_removed(self) -> None:
        """The agent's own directory went, with every socket in it: serve them all again."""
        if self.layout.subdirectory:
            log.warning("%s was removed: serving every resource again", self.layout.directory)
            self.layout.directory.mkdir(mode=SUBDIRECTORY_MODE, exist_ok=True)
            self._watch(self.layout.directory)
            for plugin in self._plugins.values():
                self._check_soon(plugin)

    def _check_soon(self, plugin: _Plugin) -> None:
        check = asyncio.ensure_future(self._check_socket(plugin))
        self._checks.add(check)
        check.add_done_callback(self._checks.discard)

    async def _check_socket(self, plugin: _Plugin) -> None:
        # A serve in progress replaces the socket anyway: look once it is done, or the
        # deletion that serve itself causes would start yet another serve.
        await plugin.server.settled()
        if self._plugins.get(plugin.server.spec.name) is not plugin:
            return  # removed from the configuration meanwhile, or replaced by the fallback
        if not plugin.server.socket_intact():
            endpoint = plugin.server.endpoint
            plugin.server.log.info("socket %s was removed: serving on a new one", endpoint)
            self._register_soon(plugin)

    async def close(self) -> None:
        tasks = [*self._checks, *([self._fallback] if self._fallback else [])]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await asyncio.gather(*(self._stop(plugin) for plugin in list(self._plugins.values())))
        await self._kubelet.close()

    async def _start(self, spec: ResourceSpec) -> None:
        plugin = _Plugin(PluginServer(spec, self.layout, self._observer))
        # Before it can register: the kubelet's first list must already say it.
        plugin.server.set_health(self._health.get(spec.name, ALL_HEALTHY))
        await plugin.server.serve()
        self._plugins[spec.name] = self._by_endpoint[plugin.server.endpoint] = plugin
        self._names = None
        log.debug("%s: serving %d token(s) on %s", spec.name, spec.count, plugin.server.endpoint)
        self._register_soon(plugin)

    async def _stop(self, plugin: _Plugin) -> None:
        del self._plugins[plugin.server.spec.name]
        self._by_endpoint.pop(plugin.server.endpoint, None)
        self._names = None
        self._cancel_registration(plugin)
        self._set_registered(plugin, False)
        await plugin.server.stop()

    def _register_soon(self, plugin: _Plugin) -> None:
        self._cancel_registration(plugin)
        self._set_registered(plugin, False)
        plugin.kubelet = None
        plugin.registering = asyncio.ensure_future(self._keep_registered(plugin))
        self._on_change()

    def _set_registered(self, plugin: _Plugin, registered: bool) -> None:
        self._registered += registered - plugin.registered
        plugin.registered = registered

    @staticmethod
    def _cancel_registration(plugin: _Plugin) -> None:
        if plugin.registering is not None:
            plugin.registering.cancel()
            plugin.registering = None
        if plugin.dial_back is not None:
            plugin.dial_back.cancel()
            plugin.dial_back = None

    async def _keep_registered(self, plugin: _Plugin) -> None:
        """Serve on an intact socket, then register once the kubelet is there; retry on failure."""
        server, delay = plugin.server, FIRST_RETRY_DELAY
        while True:
            try:
                if not server.serving_intact():
                    # Shielded: a registration cancelled mid-way must not leave a half-built
                    # server.
                    await asyncio.shield(server.ensure_serving())
                if self._kubelet.identity() is None:
                    server.log.info("waiting for kubelet.sock to register")
                    return
                client = await self._kubelet.client()
                # Only now: a kubelet.sock that appears while the connection is made cancels
                # this task, and kubelet_started() must then see it unregistered.
                plugin.kubelet = self._kubelet.connected_to()
                opened = server.next_stream()
                await client.register(server.endpoint, server.spec.name)
            except RegistrationError as error:
                if error.already_connected:
                    refused = server.endpoint
                    await asyncio.shield(self._serve_elsewhere(plugin))
                    server.log.warning(
                        "the kubelet will not take %s again (%s): registering %s in %.2f s",
                        refused,
                        error,
                        server.endpoint,
                        delay,
                    )
                elif error.answered and self.layout.subdirectory:
                    self._fall_back(f"it refused {server.endpoint}: {error}")
                    return
                else:
                    server.log.warning("registration failed, retrying in %.2f s: %s", delay, error)
            except (OSError, RuntimeError) as error:
                server.log.warning("registration failed, retrying in %.2f s: %s", delay, error)
            else:
                self._registered_now(plugin, opened)
                return
            self._observer.registration_failed(server.spec.name)
            await asyncio.sleep(delay)
            delay = min(delay * 2, MAX_RETRY_DELAY)

    async def _serve_elsewhere(self, plugin: _Plugin) -> None:
        old = plugin.server.endpoint
        await plugin.server.serve_elsewhere()
        self._by_endpoint.pop(old, None)
        if self._plugins.get(plugin.server.spec.name) is plugin:
            self._by_endpoint[plugin.server.endpoint] = plugin

    def _registered_now(self, plugin: _Plugin, opened: asyncio.Event) -> None:
        server = plugin.server
        self._set_registered(plugin, True)
        self._observer.registered(server.spec.name)
        server.log.debug("registered with the kubelet (%d token(s))", server.pool.count)
        if self._registered == len(self._plugins):
            log.info("%s", self._all_registered())
        self._on_change()
        if not opened.is_set():
            plugin.dial_back = asyncio.get_running_loop().call_later(
                DIAL_BACK_SECONDS, self._dial_back_missed, plugin, opened
            )

    def _all_registered(self) -> str:
        """One line for a burst of registrations, where one per resource would be 1,000."""
        summary = self.summary(LOGGED_NAMES)
        listed = ", ".join(f"{state.name}={state.count}" for state in summary.first)
        more = summary.total - len(summary.first)
        return f"{summary.total} resource(s) registered with the kubelet: {listed}" + (
            f", and {more} more" if more else ""
        )

    def _dial_back_missed(self, plugin: _Plugin, opened: asyncio.Event) -> None:
        plugin.dial_back = None
        if opened.is_set():
            return
        if self.layout.subdirectory:
            self._fall_back(f"it never connected to {plugin.server.endpoint}")
        else:
            plugin.server.log.warning(
                "the kubelet has not connected %g s after Register", DIAL_BACK_SECONDS
            )

    def _fall_back(self, reason: str) -> None:
        """The kubelet does not take endpoints in the agent's directory: serve every resource
        beside kubelet.sock instead, for as long as the agent runs."""
        if self._fallback is not None:
            return
        log.warning(
            "the kubelet does not take sockets in %s (%s): serving them in %s instead",
            self.layout.directory,
            reason,
            self._directory,
        )
        self.layout = SocketLayout(self._directory, False, self.layout.instance)
        self._on_change()
        self._fallback = asyncio.ensure_future(self._move_servers())

    async def _move_servers(self) -> None:
        async with self._changing:
            specs = {name: plugin.server.spec for name, plugin in self._plugins.items()}
            # Every old server stops before a new one registers: the kubelet must never see
            # two servers for one resource.
            await asyncio.gather(*(self._stop(plugin) for plugin in list(self._plugins.values())))
            for failure in await self._apply(specs):
                log.error("after moving the sockets: %s", failure)
