"""The kubelet's DRA manager (pkg/kubelet/cm/dra), for the kubelet stand-in: the handler of
``DRAPlugin`` registrations, the ResourceSlice wipes, the client of the plugins'
``NodePrepareResources`` / ``NodeUnprepareResources``, and the watcher of their health.

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

Wipes (``wipeResourceSlices``): at start, every slice of the node (DeleteCollection with
``fieldSelector=spec.nodeName=<node>``, after a GET of the Node), in the background; and
``deregistration_grace`` (30 s, ``wipingDelay``) after a driver has no connected plugin left,
that driver's slices (``spec.driver=<d>,spec.nodeName=<node>``) unless a plugin of it is
connected again by then (``sync``). Failed wipes are retried after 1 s, doubling, up to 5 min.

Calls (manager.go ``prepareResources``/``unprepareResources``, dra_plugin.go): one request per
driver with the claims' namespace, uid and name, a 45 s deadline, the chosen version's method
path. The kubelet's errors: "DRA driver <d> is not registered", "NodePrepareResources: <rpc
error>", "NodePrepareResources failed for ResourceClaim <name>: <error>", "NodePrepareResources
returned result for unknown claim UID <uid>", "NodePrepareResources skipped <n> ResourceClaims"
(the last two are also protocol violations here: every claim needs exactly one entry).

Health (ResourceHealthStatus, KEP-4680; plugin/dra_plugin_manager.go ``add``, dra_plugin.go
``NodeWatchResources``, manager.go ``HandleWatchResourcesStream``, healthinfo.go): for every
registered plugin a thread opens ``NodeWatchResources`` on the plugin's DRA socket and reads it
until it ends; ``health_retry`` (5 s) after each end, failed or clean alike (wait.UntilWithContext
waits its period after every run), it opens it again, until the plugin deregisters or the
kubelet stops (a cancelled stream is not an error). Except in 1.37, where a stream that ends
Unimplemented (HandleWatchResourcesStream logs it at V(4) and returns it; ``add``'s loop then
calls streamCancel) is not opened again on that plugin until it registers again, and is no
error; other errors are retried as in 1.36. A 1.36 kubelet (``resource_health="1.36"``)
opens ``v1alpha1.DRAResourceHealth`` on every plugin, listed in ``supported_versions`` or not; a
1.37 one (``"1.37"``, pickHealthService) the plugin's listed ``v1.DRAResourceHealth``, else its
listed ``v1alpha1.DRAResourceHealth``, else none; None: the feature off, no stream. Errors are
kept as the kubelet logs them ("Error receiving from WatchResources stream" err=...). Each
response updates the devices it lists (others keep their last health); the kubelet times a
device from its own receipt of the response, not from the driver's ``last_updated_time``, and
reads it Unknown once more than its ``health_check_timeout_seconds`` (0 or less: 30 s) have
passed (``effective``, computed when the view is taken); the driver's whole record goes when a
stream of it ends (``clearDriver``). Not modelled: the checkpoint file, the pods' status.
"""

from __future__ import annotations

import heapq
import http.client
import json
import ssl
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any
from urllib.parse import quote

import grpc

from token_resource.protocol import dra_health_v1alpha1_pb2 as health_pb
from token_resource.protocol import dra_v1_pb2 as pb
from token_resource.protocol.dra import HEALTH_SERVICES, HEALTH_VERSION, health_method, method

CALL_SECONDS = 45.0
# How long a channel's connectivity poller may take to end once nobody listens (it looks every
# 0.2 s); see _close_channels.
POLLER_END_SECONDS = 5.0
DEREGISTRATION_GRACE = 30.0
HEALTH_RETRY = 5.0  # the period of the health stream's wait.UntilWithContext
HEALTH_TIMEOUT = 30.0  # DefaultHealthTimeout, for a health_check_timeout_seconds of 0 or less
RESOURCE_HEALTH = ("1.36", "1.37")  # the kubelets whose choice of health service is modelled
KUBELET_VERSIONS = ("v1.DRAPlugin", "v1beta1.DRAPlugin")
WIPE_FIRST_RETRY = 1.0
WIPE_LAST_RETRY = 300.0
_SLICES = "/apis/resource.k8s.io/v1/resourceslices"
_V1ALPHA1_HEALTH = HEALTH_SERVICES[0]  # "v1alpha1.DRAResourceHealth"
_HEALTH = {health_pb.HEALTHY: "Healthy", health_pb.UNHEALTHY: "Unhealthy"}  # else "Unknown"


@dataclass(frozen=True)
class ApiAccess:
    """How the kubelet reaches the API server: its URL and the node's own credentials (PEM),
    as in its kubeconfig."""

    url: str
    ca_pem: bytes
    cert_pem: bytes
    key_pem: bytes

    def connection(self, timeout: float | None = 10.0) -> http.client.HTTPSConnection:
        context = ssl.create_default_context(cadata=self.ca_pem.decode())
        with tempfile.TemporaryDirectory(prefix="kubelet-standin-") as directory:
            pair = Path(directory, "client.pem")
            pair.write_bytes(self.cert_pem + self.key_pem)
            context.load_cert_chain(pair)
        host, _, port = self.url.removeprefix("https://").partition(":")
        return http.client.HTTPSConnection(host, int(port), context=context, timeout=timeout)

    def request(self, verb: str, path: str, timeout: float = 10.0) -> tuple[int, Any]:
        connection = self.connection(timeout)
        try:
            connection.request(verb, path)
            response = connection.getresponse()
            return response.status, json.loads(response.read() or b"null")
        finally:
            connection.close()


@dataclass(frozen=True)
class PluginView:
    endpoint: str
    socket: str  # its registration socket
    version: str  # the service chosen, e.g. "v1.DRAPlugin"
    connected: bool
    health_service: str | None = None  # the health service watched on it, None: none
    # A 1.37 kubelet stopped watching it: the stream ended Unimplemented (until it registers
    # again, as a new plugin).
    health_stopped: bool = False


@dataclass(frozen=True)
class DraCall:
    """One NodePrepareResources or NodeUnprepareResources as the kubelet made it."""

    endpoint: str
    claims: tuple[tuple[str, str, str], ...]  # (namespace, uid, name)
    error: str | None  # the kubelet's error for the call, None if it succeeded


@dataclass(frozen=True)
class DeviceHealthView:
    """A device's latest health as the kubelet keeps it (healthinfo.go)."""

    pool: str
    device: str
    health: str  # as last reported: "Healthy", "Unhealthy" or "Unknown" (any other value)
    last_updated_time: int  # as last reported (unix s); the kubelet does not time from it
    timeout: float  # health_check_timeout_seconds, HEALTH_TIMEOUT for 0 or less
    message: str
    received: float  # time.monotonic() of the latest response that listed it
    effective: str  # health, or "Unknown" once more than timeout has passed since received


@dataclass(frozen=True)
class DriverView:
    name: str
    plugins: tuple[PluginView, ...] = ()  # in registration order
    registrations: int = 0
    deregistrations: int = 0
    unregistered: int = 0  # times a deregistration left the driver with no plugin
    last_error: str | None = None  # of the latest refused registration
    registered_at: float | None = None  # time.monotonic() of its latest registration
    wipes: int = 0  # slice wipes done for this driver after its grace
    prepares: tuple[DraCall, ...] = ()
    unprepares: tuple[DraCall, ...] = ()
    health: tuple[DeviceHealthView, ...] = ()  # by (pool, device); gone when a stream ends
    health_streams: int = 0  # NodeWatchResources streams opened
    health_responses: int = 0
    health_errors: tuple[str, ...] = ()  # how the streams failed, as the kubelet logs err=

    def device_health(self, pool: str, device: str) -> DeviceHealthView:
        """KeyError (a LookupError: wait_for waits on) while the device has no health."""
        for view in self.health:
            if (view.pool, view.device) == (pool, device):
                return view
        raise KeyError(f"no health of {pool}/{device} from {self.name}")


@dataclass(frozen=True)
class ClaimResult:
    devices: tuple[tuple[tuple[str, ...], str, str, tuple[str, ...]], ...] = ()
    # (request names, pool, device, CDI device IDs) each
    error: str = ""


@dataclass(frozen=True)
class CallResult:
    """What the kubelet got: per claim UID the plugin's answer, and its own verdict."""

    claims: Mapping[str, ClaimResult] = field(default_factory=dict)
    error: str | None = None


@dataclass(frozen=True)
class DraView:
    drivers: Mapping[str, DriverView]
    start_wipes: int  # node-wide wipes done at kubelet starts

    def to_dict(self) -> dict[str, Any]:
        return {
            "drivers": {n: asdict(d) for n, d in self.drivers.items()},
            "start_wipes": self.start_wipes,
        }


@dataclass(eq=False)
class _Plugin:
    driver: str
    endpoint: str
    socket: Path
    version: str
    channel: grpc.Channel
    connected: bool = False
    health_service: str | None = None
    health_call: grpc.CallIterator[health_pb.NodeWatchResourcesResponse] | None = None
    health_stopped: bool = False
    on_connectivity: Callable[[grpc.ChannelConnectivity], None] | None = None


class DraManager:
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
        self._plugins: dict[str, list[_Plugin]] = {}
        self._drivers: dict[str, DriverView] = {}
        self._start_wipes = 0
        self._wipe_due: dict[str, float] = {}  # driver -> when its slices go
        self._generation = 0  # bumped by stop(): background work of an old run ends
        self._threads: list[threading.Thread] = []
        self._health: dict[str, dict[tuple[str, str], DeviceHealthView]] = {}  # driver's devices
        self._expiries: list[tuple[float, str, str, str]] = []  # heap: (when, driver, pool, dev)

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
        replaced: list[_Plugin] = []
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
            plugin = _Plugin(
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

    def _connectivity(self, plugin: _Plugin, state: grpc.ChannelConnectivity) -> None:
        with self._cond:
            connected = state == grpc.ChannelConnectivity.READY
            if plugin.connected == connected or plugin not in self._plugins.get(plugin.driver, []):
                return
            plugin.connected = connected
            self._update(plugin.driver)
            self._sync(plugin.driver)
            self._changed(f"DRA driver {plugin.driver}: {plugin.endpoint} connected={connected}")

    # --- wipes --------------------------------------------------------------------------------

    def _sync(self, driver: str) -> None:
        """Caller holds the lock: a usable driver cancels its wipe, else one is due."""
        if self.apiserver is None:
            return
        if any(p.connected for p in self._plugins.get(driver, [])):
            self._wipe_due.pop(driver, None)
        elif driver not in self._wipe_due:
            self._wipe_due[driver] = time.monotonic() + self.grace
        self._cond.notify_all()

    def _wiper(self, generation: int) -> None:
        while True:
            with self._cond:
                while self._generation == generation:
                    now = time.monotonic()
                    due = [d for d, when in self._wipe_due.items() if when <= now]
                    if due:
                        break
                    waits = [when - now for when in self._wipe_due.values()]
                    self._cond.wait(min(waits) if waits else None)
                if self._generation != generation:
                    return
                for driver in due:
                    del self._wipe_due[driver]
            for driver in due:
                self._wipe(driver, generation)

    def _wipe(self, driver: str | None, generation: int) -> None:
        """DeleteCollection of the node's (driver's) slices, retried until it succeeds."""
        if self.apiserver is None:
            return
        selector = f"spec.nodeName={self.node}"
        if driver is not None:
            selector = f"spec.driver={driver},{selector}"
        delay = WIPE_FIRST_RETRY
        while True:
            error = self._try_wipe(selector)
            with self._cond:
                if self._generation != generation:
                    return
                if error is None:
                    if driver is None:
                        self._start_wipes += 1
                    else:
                        self._update(driver, wipes=self._drivers[driver].wipes + 1)
                    self._changed(f"ResourceSlices deleted ({selector})")
                    return
                self._changed(f"deleting ResourceSlices ({selector}) failed: {error}")
                self._cond.wait_for(lambda: self._generation != generation, delay)
            delay = min(delay * 2, WIPE_LAST_RETRY)

    def _try_wipe(self, selector: str) -> str | None:
        assert self.apiserver is not None
        try:
            status, body = self.apiserver.request("GET", f"/api/v1/nodes/{self.node}")
            if status == 200:
                path = f"{_SLICES}?fieldSelector={quote(selector)}"
                status, body = self.apiserver.request("DELETE", path)
        except (OSError, ValueError) as error:
            return str(error)
        if status in (200, 404):
            return None
        return f"{status}: {body.get('message') if isinstance(body, dict) else body}"

    # --- health ---------------------------------------------------------------------------

    def health_service(self, versions: Sequence[str]) -> str | None:
        """The health service the kubelet watches on a plugin that lists ``versions``."""
        if self.resource_health == "1.36":
            return _V1ALPHA1_HEALTH
        if self.resource_health == "1.37":
            return next((s for s in (HEALTH_VERSION, _V1ALPHA1_HEALTH) if s in versions), None)
        return None

    def _gone(self, plugin: _Plugin) -> bool:
        """Caller holds the lock: deregistered, or the kubelet stopped."""
        return plugin not in self._plugins.get(plugin.driver, [])

    def _watch_health(self, plugin: _Plugin) -> None:
        """The plugin's health thread: open the stream, read it to its end, again after
        ``health_retry`` seconds, until the plugin is gone."""
        assert plugin.health_service is not None
        path = health_method(plugin.health_service)
        while True:
            with self._cond:
                if self._gone(plugin):
                    return
                watch = plugin.channel.unary_stream(
                    path,
                    health_pb.NodeWatchResourcesRequest.SerializeToString,
                    health_pb.NodeWatchResourcesResponse.FromString,
                )
                call = plugin.health_call = watch(health_pb.NodeWatchResourcesRequest())
                view = self._drivers[plugin.driver]
                self._update(plugin.driver, health_streams=view.health_streams + 1)
                self._changed(f"DRA driver {plugin.driver}: {path} opened at {plugin.endpoint}")
            error: str | None = None
            unsupported = False
            try:
                for response in call:
                    self._health_received(plugin, response)
            except grpc.RpcError as failure:
                error = _rpc_error(failure)
                unsupported = (
                    self.resource_health == "1.37"
                    and failure.code() == grpc.StatusCode.UNIMPLEMENTED
                )
            with self._cond:
                plugin.health_call = None
                gone = self._gone(plugin)
                self._health.pop(plugin.driver, None)  # clearDriver, at every end of a stream
                view = self._drivers[plugin.driver]
                if unsupported and not gone:
                    # 1.37: logged at V(4), not an error; streamCancel ends wait.Until.
                    plugin.health_stopped = True
                    self._update(plugin.driver)
                    self._changed(
                        f"DRA driver {plugin.driver}: Driver does not support WatchResources "
                        f"health stream, stopping (at {plugin.endpoint})"
                    )
                    return
                if error is not None and not gone:  # context.Canceled: not an error
                    self._update(plugin.driver, health_errors=(*view.health_errors, error))
                    self._changed(
                        f"DRA driver {plugin.driver}: Error receiving from WatchResources "
                        f"stream err={json.dumps(error)}"
                    )
                else:
                    self._update(plugin.driver)
                    self._changed(f"DRA driver {plugin.driver}: WatchResources stream ended")
                if gone or self._cond.wait_for(lambda: self._gone(plugin), self.health_retry):
                    return

    def _health_received(
        self, plugin: _Plugin, response: health_pb.NodeWatchResourcesResponse
    ) -> None:
        """updateHealthInfo: each device listed gets its new health, timed from now."""
        now = time.monotonic()
        with self._cond:
            if self._gone(plugin):
                return
            devices = self._health.setdefault(plugin.driver, {})
            for reported in response.devices:
                seconds = reported.health_check_timeout_seconds
                timeout = float(seconds) if seconds > 0 else HEALTH_TIMEOUT
                health = _HEALTH.get(reported.health, "Unknown")
                key = (reported.device.pool_name, reported.device.device_name)
                devices[key] = DeviceHealthView(
                    *key, health, reported.last_updated_time, timeout, reported.message, now, health
                )
                heapq.heappush(self._expiries, (now + timeout, plugin.driver, *key))
            view = self._drivers[plugin.driver]
            self._update(plugin.driver, health_responses=view.health_responses + 1)
            self._changed(
                f"DRA driver {plugin.driver}: health of {len(response.devices)} devices from "
                f"{plugin.endpoint}"
            )

    def _health_clock(self, generation: int) -> None:
        """Wakes the waiters when a device's health times out, which nothing else notifies."""
        with self._cond:
            while self._generation == generation:
                now = time.monotonic()
                while self._expiries and self._expiries[0][0] < now:
                    when, driver, pool, device = heapq.heappop(self._expiries)
                    kept = self._health.get(driver, {}).get((pool, device))
                    if kept is not None and kept.received + kept.timeout == when:
                        self._changed(f"DRA driver {driver}: health of {pool}/{device} timed out")
                # Just past the moment: the view reads Unknown only after more than the timeout.
                wait = self._expiries[0][0] - now + 0.001 if self._expiries else None
                self._cond.wait(wait)

    # --- calls ----------------------------------------------------------------------------

    def call(
        self, name: str, driver: str, claims: Sequence[tuple[str, str, str]], timeout: float
    ) -> CallResult:
        """NodePrepareResources or NodeUnprepareResources, as the kubelet's manager does."""
        with self._cond:
            plugins = self._plugins.get(driver, [])
            connected = [p for p in plugins if p.connected]
            chosen = connected or plugins
        if not chosen:
            return self._record(
                name, driver, "", claims, CallResult(error=f"DRA driver {driver} is not registered")
            )
        plugin = chosen[-1]
        prepare = name == "NodePrepareResources"
        request_type = (
            pb.NodePrepareResourcesRequest if prepare else pb.NodeUnprepareResourcesRequest
        )
        response_type = (
            pb.NodePrepareResourcesResponse if prepare else pb.NodeUnprepareResourcesResponse
        )
        request = request_type(
            claims=[pb.Claim(namespace=ns, uid=uid, name=claim) for ns, uid, claim in claims]
        )
        rpc = plugin.channel.unary_unary(
            method(plugin.version, name), request_type.SerializeToString, response_type.FromString
        )
        try:
            response = rpc(request, timeout=timeout)
        except grpc.RpcError as failure:
            failed = CallResult(error=f"{name}: {_rpc_error(failure)}")
            return self._record(name, driver, plugin.endpoint, claims, failed)
        results: dict[str, ClaimResult] = {}
        error: str | None = None
        names = {uid: claim for _, uid, claim in claims}
        for uid, answer in response.claims.items():
            devices = tuple(
                (tuple(d.request_names), d.pool_name, d.device_name, tuple(d.cdi_device_ids))
                for d in getattr(answer, "devices", ())
            )
            results[uid] = ClaimResult(devices, answer.error)
            if uid not in names:
                error = error or f"{name} returned result for unknown claim UID {uid}"
                self._violate(f"{driver}: {name} answered for unknown claim UID {uid}")
            elif answer.error:
                error = error or f"{name} failed for ResourceClaim {names[uid]}: {answer.error}"
        missing = [uid for uid in names if uid not in response.claims]
        if missing and error is None:
            error = f"{name} skipped {len(missing)} ResourceClaims"
        if missing:
            self._violate(f"{driver}: {name} left out claims {missing}")
        return self._record(name, driver, plugin.endpoint, claims, CallResult(results, error))

    def _record(
        self,
        name: str,
        driver: str,
        endpoint: str,
        claims: Sequence[tuple[str, str, str]],
        result: CallResult,
    ) -> CallResult:
        call = DraCall(endpoint, tuple(claims), result.error)
        with self._cond:
            view = self._drivers.get(driver, DriverView(driver))
            if name == "NodePrepareResources":
                self._drivers[driver] = replace(view, prepares=(*view.prepares, call))
            else:
                self._drivers[driver] = replace(view, unprepares=(*view.unprepares, call))
            self._changed(f"DRA driver {driver}: {name} {list(claims)} -> {result.error or 'ok'}")
        return result

    def _violate(self, text: str) -> None:
        with self._cond:
            self._violation(text)

    # --- state (caller holds the lock) ------------------------------------------------------

    def _update(self, driver: str, **changes: Any) -> None:
        view = self._drivers.get(driver, DriverView(driver))
        plugins = tuple(
            PluginView(
                p.endpoint,
                str(p.socket),
                p.version,
                p.connected,
                p.health_service,
                p.health_stopped,
            )
            for p in self._plugins.get(driver, [])
        )
        self._drivers[driver] = replace(view, plugins=plugins, **changes)

    def snapshot(self) -> DraView:
        """With each device's effective health as of now (getHealthInfo)."""
        now = time.monotonic()
        drivers = {}
        for name, view in self._drivers.items():
            health = tuple(
                replace(
                    kept, effective="Unknown" if now - kept.received > kept.timeout else kept.health
                )
                for _, kept in sorted(self._health.get(name, {}).items())
            )
            drivers[name] = replace(view, health=health)
        return DraView(drivers, self._start_wipes)


def _go_list(items: Sequence[str]) -> str:
    """Go's %q of a []string: ["a" "b"]."""
    return "[" + " ".join(json.dumps(item) for item in items) + "]"


def _close_channels(plugins: Sequence[_Plugin]) -> None:
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


def _cancel(plugin: _Plugin) -> None:
    """Caller holds the lock: end the plugin's health stream, if one is open."""
    if plugin.health_call is not None:
        plugin.health_call.cancel()  # type: ignore[no-untyped-call]  # grpc-stubs: untyped


def _rpc_error(error: grpc.RpcError) -> str:
    """As grpc-go prints a status."""
    code = "".join(word.capitalize() for word in error.code().name.split("_"))
    return f"rpc error: code = {code} desc = {error.details()}"
