"""The kubelet stand-in's DRA manager: its watch of the plugins' device health.

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
import json
import time
from collections.abc import Sequence

import grpc

from tests.standin.kubelet_dra_state import DeviceHealthView, DraState, Plugin
from tests.standin.kubelet_rules import rpc_error
from token_resource.protocol import dra_health_v1alpha1_pb2 as health_pb
from token_resource.protocol.dra import HEALTH_SERVICES, HEALTH_VERSION, health_method

HEALTH_RETRY = 5.0  # the period of the health stream's wait.UntilWithContext
HEALTH_TIMEOUT = 30.0  # DefaultHealthTimeout, for a health_check_timeout_seconds of 0 or less
RESOURCE_HEALTH = ("1.36", "1.37")  # the kubelets whose choice of health service is modelled
_V1ALPHA1_HEALTH = HEALTH_SERVICES[0]  # "v1alpha1.DRAResourceHealth"
_HEALTH = {health_pb.HEALTHY: "Healthy", health_pb.UNHEALTHY: "Unhealthy"}  # else "Unknown"


class HealthWatch(DraState):
    """One health thread per registered plugin, and the clock of the devices' timeouts."""

    resource_health: str | None  # "1.36", "1.37" or None (RESOURCE_HEALTH)
    health_retry: float
    _expiries: list[tuple[float, str, str, str]]  # heap: (when, driver, pool, dev), guarded

    def health_service(self, versions: Sequence[str]) -> str | None:
        """The health service the kubelet watches on a plugin that lists ``versions``."""
        if self.resource_health == "1.36":
            return _V1ALPHA1_HEALTH
        if self.resource_health == "1.37":
            return next((s for s in (HEALTH_VERSION, _V1ALPHA1_HEALTH) if s in versions), None)
        return None

    def _gone(self, plugin: Plugin) -> bool:
        """Caller holds the lock: deregistered, or the kubelet stopped."""
        return plugin not in self._plugins.get(plugin.driver, [])

    def _watch_health(self, plugin: Plugin) -> None:
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
                error = rpc_error(failure)
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
        self, plugin: Plugin, response: health_pb.NodeWatchResourcesResponse
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
