"""The kubelet's DRA manager (pkg/kubelet/cm/dra), for the kubelet stand-in: the handler of
``DRAPlugin`` registrations, the ResourceSlice wipes, the client of the plugins'
``NodePrepareResources`` / ``NodeUnprepareResources``, and the watcher of their health.
This module is the manager and its handling of the plugin watcher's registrations
(kubelet_plugins.py); its other parts: kubelet_dra_state.py (what it keeps, the views a test
reads), kubelet_dra_wipes.py, kubelet_dra_health.py and kubelet_dra_calls.py.

Registration (plugin/dra_plugin_manager.go, 1.34+): ``ValidatePlugin`` and ``RegisterPlugin``
choose the first of the plugin's ``supported_versions`` that the kubelet speaks (``"invalid
supported gRPC versions of DRA driver plugin <driver> at endpoint <endpoint>: none of services
supported by the plugin ([...]) are supported by the kubelet ([...])"``; an empty list: "empty
list of supported gRPC services (aka supported versions)"). A kubelet of the 1.32 era
(``dra_versions=("v1beta1.DRAPlugin",)``) chose by its own order instead (registration.go,
``validateSupportedServices``) and fell back to its alpha service where this one refuses. The
driver name and the endpoint are not checked (the real code does not); a second plugin of a
driver may not take an endpoint already registered ("endpoint <e> already registered for DRA
driver plugin <d>"). Several plugins of one driver may be registered at once (rolling
update, 1.33+: plugins_store.go); calls go to the newest connected one, else the newest
(``get``), and a deregistration removes the plugin of its endpoint only. A kubelet of the 1.32
era keeps one plugin per driver: a registration replaces the one there ("the old plugin was
replaced and will be forgotten by the kubelet"), and a deregistration of the driver, from
either socket, removes whichever is registered (``DeRegisterPlugin(pluginName)``,
``draPlugins.delete``). A plugin is connected while its gRPC channel is READY (the real one's
stats handler, ConnBegin/ConnEnd).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

import grpc

from tests.standin.kubelet_dra_calls import CALL_SECONDS, PluginCalls
from tests.standin.kubelet_dra_health import (
    HEALTH_RETRY,
    HEALTH_TIMEOUT,
    RESOURCE_HEALTH,
    HealthWatch,
)
from tests.standin.kubelet_dra_state import (
    CallResult,
    ClaimResult,
    DeviceHealthView,
    DraCall,
    DraView,
    DriverView,
    Plugin,
    PluginView,
)
from tests.standin.kubelet_dra_wipes import (
    WIPE_FIRST_RETRY,
    WIPE_LAST_RETRY,
    ApiAccess,
    SliceWipes,
)

# The DRA side's names, imported from here by the kubelet stand-in, its script and the tests.
__all__ = [
    "CALL_SECONDS",
    "DEREGISTRATION_GRACE",
    "HEALTH_RETRY",
    "HEALTH_TIMEOUT",
    "KUBELET_VERSIONS",
    "POLLER_END_SECONDS",
    "RESOURCE_HEALTH",
    "WIPE_FIRST_RETRY",
    "WIPE_LAST_RETRY",
    "ApiAccess",
    "CallResult",
    "ClaimResult",
    "DeviceHealthView",
    "DraCall",
    "DraManager",
    "DraView",
    "DriverView",
    "PluginView",
]

# How long a channel's connectivity poller may take to end once nobody listens (it looks every
# 0.2 s); see _close_channels.
POLLER_END_SECONDS = 5.0
DEREGISTRATION_GRACE = 30.0
KUBELET_VERSIONS = ("v1.DRAPlugin", "v1beta1.DRAPlugin")


class DraManager(SliceWipes, HealthWatch, PluginCalls):
    """The DRAPlugin handler of the plugin watcher, under the kubelet stand-in's lock."""

    def __init__(
        self,
        cond: threading.Condition,
        changed: Callable[[str], None],
        violation: Callable[[str], None],
        *,
        node: str,
        apiserver: ApiAccess | None,
        versions: Sequence[str] = KUBELET_VERSIONS,
        grace: float = DEREGISTRATION_GRACE,
        resource_health: str | None = "1.36",
        health_retry: float = HEALTH_RETRY,
    ) -> None:
        if resource_health is not None and resource_health not in RESOURCE_HEALTH:
            raise ValueError(f"resource_health: one of {RESOURCE_HEALTH} or None")
        self._cond, self._changed, self._violation = cond, changed, violation
        self.node, self.apiserver = node, apiserver
        self.versions, self.grace = tuple(versions), grace
        # The 1.32 era (no v1 service yet) kept one plugin per driver.
        self.one_plugin_per_driver = "v1.DRAPlugin" not in self.versions
        self.resource_health, self.health_retry = resource_health, health_retry
        # Guarded by cond:
        self._plugins = {}
        self._drivers = {}
        self._start_wipes = 0
        self._wipe_due = {}
        self._generation = 0
        self._threads: list[threading.Thread] = []
        self._health = {}
        self._expiries = []

    # --- lifecycle (called with the lock NOT held) ---------------------------------------------

    def start(self) -> None:
        with self._cond:
            self._generation += 1
            generation = self._generation
        self._spawn(lambda: self._wipe(None, generation), "kubelet-dra-start-wipe")
        self._spawn(lambda: self._wiper(generation), "kubelet-dra-wiper")
        self._spawn(lambda: self._health_clock(generation), "kubelet-dra-health-clock")

    def stop(self) -> None:
        """The kubelet goes: every plugin registration is forgotten, pending wipes too, and every
        health stream is cancelled."""
        with self._cond:
            self._generation += 1
            plugins = [p for ps in self._plugins.values() for p in ps]
            self._plugins.clear()
            self._wipe_due.clear()
            self._health.clear()
            self._expiries.clear()
            for plugin in plugins:
                _cancel(plugin)
            for name in list(self._drivers):
                self._drivers[name] = replace(self._drivers[name], plugins=())
            threads, self._threads = self._threads, []
            self._changed("DRA manager stopped")
        _close_channels(plugins)
        for thread in threads:
            thread.join()

    def _spawn(self, target: Callable[[], None], name: str) -> None:
        thread = threading.Thread(target=target, name=name)
        with self._cond:
            self._threads = [t for t in self._threads if t.is_alive()]
            self._threads.append(thread)
        thread.start()

    # --- the handler (the watcher's thread) ------------------------------------------------

    def choose(self, versions: list[str]) -> tuple[str | None, str | None]:
        """(chosen service, problem)."""
        if not versions:
            return None, "empty list of supported gRPC services (aka supported versions)"
        if "v1.DRAPlugin" in self.versions:  # 1.34+: the plugin's order
            chosen = next((v for v in versions if v in self.versions), None)
        else:  # 1.32: the kubelet's own order
            chosen = next((v for v in self.versions if v in versions), None)
        if chosen is None:
            return None, (
                f"none of services supported by the plugin ({_go_list(versions)}) are "
                f"supported by the kubelet ({_go_list(self.versions)})"
            )
        return chosen, None

    def validate_plugin(self, name: str, endpoint: str, versions: list[str]) -> str | None:
        problem = self.choose(versions)[1]
        if problem is None:
            return None
        error = (
            f"invalid supported gRPC versions of DRA driver plugin {name} at endpoint "
            f"{endpoint}: {problem}"
        )
        with self._cond:
            self._update(
                name,
                last_error=f"RegisterPlugin error -- plugin validation failed with err: {error}",
            )
        return error

    def register_plugin(
        self, name: str, endpoint: str, versions: list[str], socket: Path
    ) -> str | None:
        chosen = self.choose(versions)[0]
        if chosen is None:
            return self.validate_plugin(name, endpoint, versions)
        replaced: list[Plugin] = []
        with self._cond:
            if self.one_plugin_per_driver:
                replaced = self._plugins.pop(name, [])
                for old in replaced:
                    _cancel(old)
            if any(p.endpoint == endpoint for p in self._plugins.get(name, [])):
                error = f"endpoint {endpoint} already registered for DRA driver plugin {name}"
                refused = f"RegisterPlugin error -- plugin registration failed with err: {error}"
                self._update(name, last_error=refused)
                return error
            plugin = Plugin(
                name, endpoint, socket, chosen, grpc.insecure_channel(f"unix:{endpoint}")
            )
            plugin.health_service = self.health_service(versions)
            self._plugins.setdefault(name, []).append(plugin)
            view = self._drivers.get(name, DriverView(name))
            self._update(name, registrations=view.registrations + 1, registered_at=time.monotonic())
            self._sync(name)
            self._changed(f"DRA driver {name}: plugin at {endpoint} registered ({chosen})")
        _close_channels(replaced)
        plugin.on_connectivity = lambda state: self._connectivity(plugin, state)
        plugin.channel.subscribe(plugin.on_connectivity, try_to_connect=True)
        if plugin.health_service is not None:
            self._spawn(lambda: self._watch_health(plugin), f"kubelet-dra-health-{name}")
        return None

    def deregister_plugin(self, name: str, endpoint: str, socket: Path) -> None:
        with self._cond:
            plugins = self._plugins.get(name, [])
            gone = [p for p in plugins if self.one_plugin_per_driver or p.endpoint == endpoint]
            self._plugins[name] = [p for p in plugins if p not in gone]
            if not gone:
                return
            for plugin in gone:
                _cancel(plugin)  # its health stream, as the real one's HealthStreamCancel
            view = self._drivers[name]
            self._update(
                name,
                deregistrations=view.deregistrations + 1,
                unregistered=view.unregistered + (not self._plugins[name]),
            )
            self._sync(name)
            self._changed(f"DRA driver {name}: plugin at {endpoint} deregistered")
        _close_channels(gone)

    def _connectivity(self, plugin: Plugin, state: grpc.ChannelConnectivity) -> None:
        with self._cond:
            connected = state == grpc.ChannelConnectivity.READY
            if plugin.connected == connected or plugin not in self._plugins.get(plugin.driver, []):
                return
            plugin.connected = connected
            self._update(plugin.driver)
            self._sync(plugin.driver)
            self._changed(f"DRA driver {plugin.driver}: {plugin.endpoint} connected={connected}")


def _go_list(items: Sequence[str]) -> str:
    """Go's %q of a []string: ["a" "b"]."""
    return "[" + " ".join(json.dumps(item) for item in items) + "]"


def _close_channels(plugins: Sequence[Plugin]) -> None:
    """Caller does NOT hold the lock: unsubscribe, wait for grpcio's poller to end, close.

    grpcio's connectivity poller checks its subscribers, then may ask the channel for its
    state: a channel closed in between raises "Cannot invoke RPC: Channel closed!" in the
    poller's thread (grpc/_channel.py, _poll_connectivity; Channel.close unsubscribes too, but
    does not wait). Its end shows in the channel's private connectivity state, the same in
    grpcio 1.46 to 1.85."""
    for plugin in plugins:
        if plugin.on_connectivity is not None:
            plugin.channel.unsubscribe(plugin.on_connectivity)
    deadline = time.monotonic() + POLLER_END_SECONDS
    for plugin in plugins:
        state = getattr(plugin.channel, "_connectivity_state", None)
        while getattr(state, "polling", False) and time.monotonic() < deadline:
            time.sleep(0.01)
        plugin.channel.close()


def _cancel(plugin: Plugin) -> None:
    """Caller holds the lock: end the plugin's health stream, if one is open."""
    if plugin.health_call is not None:
        plugin.health_call.cancel()  # type: ignore[no-untyped-call]  # grpc-stubs: untyped
