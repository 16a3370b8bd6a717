"""What the kubelet stand-in's DRA manager keeps, and the views a test reads of it.

Per driver (pkg/kubelet/cm/dra): its registered plugins (plugin/plugins_store.go; several at
once from 1.33), the counts of its registrations, wipes and calls, and its devices' health as
the kubelet keeps it (healthinfo.go). The manager (kubelet_dra.py) is made of parts that share
this state under the kubelet stand-in's lock: the slice wipes (kubelet_dra_wipes.py), the health
watch (kubelet_dra_health.py) and the calls (kubelet_dra_calls.py).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import grpc

from token_resource.protocol import dra_health_v1alpha1_pb2 as health_pb


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
class Plugin:
    """A registered plugin of a driver, as the DRA manager holds it."""

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


class DraState:
    """What every part of the DRA manager shares; DraManager.__init__ sets it."""

    _cond: threading.Condition  # the kubelet stand-in's
    _changed: Callable[[str], None]  # the kubelet stand-in's, after every change
    # Guarded by _cond:
    _plugins: dict[str, list[Plugin]]  # driver -> its registered plugins, oldest first
    _drivers: dict[str, DriverView]
    _start_wipes: int  # node-wide wipes done at kubelet starts
    _generation: int  # bumped by stop(): background work of an old run ends
    _health: dict[str, dict[tuple[str, str], DeviceHealthView]]  # driver's devices

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
