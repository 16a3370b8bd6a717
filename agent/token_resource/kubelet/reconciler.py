"""Turns the configured resources into running plugin servers and keeps each one registered.

The only place that starts, changes or stops plugin servers. It is driven by the agent with
the desired resources (at start and on reload), diffed against what actually runs, and with
what happens to the kubelet's socket directory.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from token_resource.config.diff import diff_resources
from token_resource.config.model import ResourceSpec
from token_resource.kubelet.plugin import PluginServer
from token_resource.kubelet.registration import RegistrationError, register
from token_resource.observe.observer import NullObserver, Observer
from token_resource.protocol.deviceplugin import KUBELET_SOCKET

log = logging.getLogger(__name__)

# Retry quickly at first (a fresh kubelet.sock can exist a moment before it accepts calls),
# then back off so that a broken kubelet is not hammered.
FIRST_RETRY_DELAY = 0.05
MAX_RETRY_DELAY = 5.0
# grpcio up to 1.80 closes a channel by walking the stack of every task. With 1.46 (RHEL 9's)
# the frames it leaves refer to each other and to the finished Register call, whose connection
# to the kubelet then stays open until the cyclic garbage collector runs: in a quiet agent that
# can take hours, a connection to a dead kubelet kept per restart. A collection this long after
# registrations end frees them, one for a burst of registrations (a full one takes 10-30 ms).
COLLECT_DELAY = 1.0


@dataclass(frozen=True)
class PluginState:
    name: str
    count: int
    registered: bool


@dataclass
class _Plugin:
    server: PluginServer
    registered: bool = False
    registering: asyncio.Task[None] | None = field(default=None, repr=False)
    # The kubelet.sock (by inode) that the plugin registered, or is registering, with.
    kubelet: int | None = None


class Reconciler:
    def __init__(
        self,
        directory: Path,
        on_change: Callable[[], None],
        observer: Observer = NullObserver(),  # noqa: B008 (stateless)
    ) -> None:
        self._directory = directory
        self._observer = observer
        self._kubelet_socket = directory / KUBELET_SOCKET
        self._on_change = on_change
        self._plugins: dict[str, _Plugin] = {}
        self._by_endpoint: dict[str, _Plugin] = {}
        self._checks: set[asyncio.Task[None]] = set()
        self._collection: asyncio.TimerHandle | None = None

    def kubelet_present(self) -> bool:
        return self._kubelet_inode() is not None

    def _kubelet_inode(self) -> int | None:
        try:
            status = self._kubelet_socket.lstat()
        except FileNotFoundError:
            return None
        return status.st_ino if stat.S_ISSOCK(status.st_mode) else None

    def states(self) -> list[PluginState]:
        return [
            PluginState(name, plugin.server.pool.count, plugin.registered)
            for name, plugin in sorted(self._plugins.items())
        ]

    async def apply(self, desired: Mapping[str, ResourceSpec]) -> list[str]:
        """Make the running servers match ``desired``: stop what is gone, update what changed
        in place, start and register what is new. Returns why resources could not be served.

        Unchanged resources are not touched: no new socket, no new registration. The diff is
        taken against what runs, so a resource that failed to start is tried again next time.
        """
        running = {name: plugin.server.spec for name, plugin in self._plugins.items()}
        diff = diff_resources(running, desired)
        for spec in diff.removed:
            await self._stop(self._plugins[spec.name])
            log.info("%s: removed; stopped serving", spec.name)
        for _, spec in diff.changed:
            self._plugins[spec.name].server.update(spec)
        failures = []
        for spec in diff.added:
            try:
                await self._start(spec)
            except (OSError, RuntimeError) as error:
                log.error("%s: cannot serve: %s", spec.name, error)
                failures.append(f"{spec.name}: cannot serve: {error}")
        self._on_change()
        return failures

    def kubelet_started(self) -> None:
        """A new kubelet.sock: a (re)started kubelet knows no plugin yet."""
        log.info("kubelet.sock appeared: registering %d resource(s)", len(self._plugins))
        self._observer.kubelet_appeared()
        current = self._kubelet_inode()
        for plugin in self._plugins.values():
            # One that already registered (or is registering) with this very kubelet is left
            # alone: cancelling a Register in flight and sending another registers twice.
            if current is None or plugin.kubelet != current:
                self._register_soon(plugin)

    def kubelet_stopped(self) -> None:
        log.info("kubelet.sock went away: waiting for the kubelet")
        for plugin in self._plugins.values():
            self._cancel_registration(plugin)
            plugin.registered = False
            plugin.kubelet = None  # a new kubelet.sock may reuse the inode
        self._on_change()

    def socket_removed(self, endpoint: str) -> None:
        """One of our socket files vanished (the kubelet wipes them when it restarts)."""
        plugin = self._by_endpoint.get(endpoint)
        if plugin is not None:
            check = asyncio.ensure_future(self._check_socket(plugin))
            self._checks.add(check)
            check.add_done_callback(self._checks.discard)

    async def _check_socket(self, plugin: _Plugin) -> None:
        # A serve in progress replaces the socket anyway: look once it is done, or the
        # deletion that serve itself causes would start yet another serve.
        await plugin.server.settled()
        if self._plugins.get(plugin.server.spec.name) is not plugin:
            return  # removed from the configuration meanwhile
        if not plugin.server.socket_intact():
            endpoint = plugin.server.endpoint
            plugin.server.log.info("socket %s was removed: serving on a new one", endpoint)
            self._register_soon(plugin)

    async def close(self) -> None:
        if self._collection is not None:
            self._collection.cancel()
        for check in list(self._checks):
            check.cancel()
        await asyncio.gather(*self._checks, return_exceptions=True)
        while self._plugins:
            await self._stop(next(iter(self._plugins.values())))

    async def _start(self, spec: ResourceSpec) -> None:
        plugin = _Plugin(PluginServer(spec, self._directory, self._observer))
        await plugin.server.serve()
        self._plugins[spec.name] = self._by_endpoint[plugin.server.endpoint] = plugin
        log.info("%s: serving %d token(s) on %s", spec.name, spec.count, plugin.server.endpoint)
        self._register_soon(plugin)

    async def _stop(self, plugin: _Plugin) -> None:
        del self._plugins[plugin.server.spec.name], self._by_endpoint[plugin.server.endpoint]
        self._cancel_registration(plugin)
        await plugin.server.stop()

    def _register_soon(self, plugin: _Plugin) -> None:
        self._cancel_registration(plugin)
        plugin.registered = False
        plugin.kubelet = None
        plugin.registering = asyncio.ensure_future(self._keep_registered(plugin))
        self._on_change()

    @staticmethod
    def _cancel_registration(plugin: _Plugin) -> None:
        if plugin.registering is not None:
            plugin.registering.cancel()
            plugin.registering = None

    def _collect_soon(self) -> None:
        if self._collection is None:
            self._collection = asyncio.get_running_loop().call_later(COLLECT_DELAY, self._collect)

    def _collect(self) -> None:
        self._collection = None
        gc.collect()

    async def _keep_registered(self, plugin: _Plugin) -> None:
        """Serve on an intact socket, then register once the kubelet is there; retry on failure."""
        server, delay = plugin.server, FIRST_RETRY_DELAY
        while True:
            try:
                # Shielded: a registration cancelled mid-way must not leave a half-built server.
                await asyncio.shield(server.ensure_serving())
                plugin.kubelet = self._kubelet_inode()
                if plugin.kubelet is None:
                    server.log.info("waiting for kubelet.sock to register")
                    return
                try:
                    await register(self._directory, server.endpoint, server.spec.name)
                finally:
                    self._collect_soon()
            except (RegistrationError, OSError, RuntimeError) as error:
                server.log.warning("registration failed, retrying in %.2f s: %s", delay, error)
                self._observer.registration_failed(server.spec.name)
                await asyncio.sleep(delay)
                delay = min(delay * 2, MAX_RETRY_DELAY)
                continue
            plugin.registered = True
            self._observer.registered(server.spec.name)
            server.log.info("registered with the kubelet (%d token(s))", server.pool.count)
            self._on_change()
            return
