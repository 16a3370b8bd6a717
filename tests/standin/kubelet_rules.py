"""What a kubelet's device manager holds for a plugin, and the rules by which it judges one.

The views a test reads of the kubelet stand-in (:class:`KubeletView`), and the real kubelet's
rules it applies (resource names, Register requests, device lists, the directory's clean-up at
start). Pure: kubelet.py applies them.
"""

from __future__ import annotations

import json
import re
import stat
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from token_resource.protocol import deviceplugin_pb2 as pb
from token_resource.protocol.deviceplugin import HEALTHY, UNHEALTHY, VERSION

if TYPE_CHECKING:
    import grpc

    from tests.standin.admission import PodStatus
    from tests.standin.kubelet_dra_state import DraView
    from tests.standin.kubelet_pods import PodSyncView


# The longest name part of a resource name, and the longest device ID the protocol allows.
MAX_NAME_LENGTH = 63


MAX_DEVICE_ID_LENGTH = 63


# Kubernetes' DNS-1123 subdomain and qualified-name rules (k8s.io/apimachinery validation).
_MAX_SUBDOMAIN_LENGTH = 253


_DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


_QUALIFIED_NAME_PART = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")


# Log lines and assertion messages stay readable for plugins that advertise many devices.
_SHOWN_DEVICES = 8


_SHOWN_PROBLEMS = 5


_PRETTY_DEVICES = 20


# The device manager's checkpoint: the one file a starting kubelet leaves in its directory.
CHECKPOINT = "kubelet_internal_checkpoint"


Devices = tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Options:
    """DevicePluginOptions as the kubelet acts on them."""

    pre_start_required: bool
    get_preferred_allocation_available: bool

    @classmethod
    def of(cls, message: pb.DevicePluginOptions) -> Options:
        return cls(message.pre_start_required, message.get_preferred_allocation_available)


@dataclass(frozen=True)
class ResourceView:
    """What the kubelet knows about one resource name."""

    name: str
    # The endpoint as a Register named it that calls go to: the latest successful Register's
    # (1.37: or the one promoted when that one disconnected).
    endpoint: str
    register_options: Options  # RegisterRequest.options (all a 1.24-era kubelet looks at)
    options: Options | None  # GetDevicePluginOptions' answer; None if never asked (register_first)
    registrations: int  # successful Register calls since the stand-in was created
    devices: Devices = ()  # (ID, health) from the latest ListAndWatch message, in its order
    lists_received: int = 0  # ListAndWatch messages received from the current registration
    # The kubelet holds a live connection: its ListAndWatch stream is open (or being opened).
    stream_open: bool = False
    registered_at: float = 0.0  # time.monotonic() of the latest successful Register
    listed_at: float | None = None  # ... and of its stream's first list, once one came
    # The endpoints the kubelet holds connected, oldest first (several only in a 1.37 device
    # manager), and those of them whose stream ended while the kubelet had forgotten their
    # client: stale, kept (and allocatable) until the kubelet restarts (kubelet_endpoints.py).
    endpoints: tuple[str, ...] = ()
    stale_endpoints: tuple[str, ...] = ()

    # Cached: a view never changes, and predicates ask again at every state change.
    @cached_property
    def capacity(self) -> int:
        """The kubelet keeps the last list after a stream ends (it keys devices by ID)."""
        return len({device_id for device_id, _ in self.devices})

    @cached_property
    def allocatable(self) -> int:
        """Healthy devices, but none once the stream has ended."""
        if not self.stream_open:
            return 0
        return len({device_id for device_id, health in self.devices if health == HEALTHY})

    def to_dict(self, max_devices: int | None = None) -> dict[str, Any]:
        """JSON-ready; ``max_devices`` cuts the device list short for human readers."""
        shown = self.devices if max_devices is None else self.devices[:max_devices]
        data: dict[str, Any] = {
            "endpoint": self.endpoint,
            "register_options": asdict(self.register_options),
            "options": None if self.options is None else asdict(self.options),
            "registrations": self.registrations,
            "lists_received": self.lists_received,
            "stream_open": self.stream_open,
            "registered_at": self.registered_at,
            "listed_at": self.listed_at,
            "endpoints": list(self.endpoints),
            "stale_endpoints": list(self.stale_endpoints),
            "capacity": self.capacity,
            "allocatable": self.allocatable,
            "devices": dict(shown),
        }
        if len(shown) < len(self.devices):
            data["devices_not_shown"] = len(self.devices) - len(shown)
        return data


@dataclass(frozen=True)
class KubeletView:
    """An immutable copy of what the kubelet sees."""

    generation: int  # incremented at every start, so a restart is visible
    resources: Mapping[str, ResourceView]
    rejected: tuple[str, ...]  # refused Register calls and protocol violations, oldest first
    # time.monotonic() of this generation's start (in script mode: the process's), of its
    # kubelet.sock, and of the end of its pod admission (None before, or without pods).
    started_at: float = 0.0
    socket_at: float = 0.0
    admitted_at: float | None = None
    # Every pod this stand-in admitted or rejected, its latest decision.
    pods: Mapping[str, PodStatus] = field(default_factory=dict)
    dra: DraView | None = None  # the DRA side, when the stand-in has a plugins_registry_dir
    # Its pods with claims, by "<namespace>/<name>", when it has a pod_source (kubelet_pods.py).
    pod_syncs: Mapping[str, PodSyncView] = field(default_factory=dict)

    def counts(self) -> dict[str, int]:
        """Resource name -> allocatable, for terse asserts."""
        return {name: view.allocatable for name, view in self.resources.items()}

    def to_dict(self, max_devices: int | None = None) -> dict[str, Any]:
        return {
            "generation": self.generation,
            "resources": {n: v.to_dict(max_devices) for n, v in self.resources.items()},
            "rejected": list(self.rejected),
            "started_at": self.started_at,
            "socket_at": self.socket_at,
            "admitted_at": self.admitted_at,
            "pods": {name: status.to_dict() for name, status in sorted(self.pods.items())},
            **({"dra": self.dra.to_dict()} if self.dra is not None else {}),
            **(
                {"pod_syncs": {k: asdict(v) for k, v in self.pod_syncs.items()}}
                if self.pod_syncs
                else {}
            ),
        }

    def pretty(self) -> str:
        return json.dumps(self.to_dict(_PRETTY_DEVICES), indent=2)


def serves_exactly(counts: Mapping[str, int]) -> Callable[[KubeletView], bool]:
    """A wait_for predicate: the kubelet holds an open stream with exactly ``count`` devices for
    each named resource, and no open stream for any other."""
    wanted = dict(counts)

    def holds(view: KubeletView) -> bool:
        open_streams = {
            name: view_.capacity for name, view_ in view.resources.items() if view_.stream_open
        }
        return open_streams == wanted

    holds.__qualname__ = f"serves exactly {wanted}"
    return holds


def is_extended_resource_name(name: str) -> bool:
    """Kubernetes' IsExtendedResourceName, the check the kubelet applies to Register.

    Not native (it has a domain that is not ``kubernetes.io``), not a quota name, and still
    a qualified name with the quota prefix ``requests.`` in front of it.
    """
    if "/" not in name or "kubernetes.io/" in name or name.startswith("requests."):
        return False
    prefix, _, short = f"requests.{name}".partition("/")
    return (
        "/" not in short
        and len(prefix) <= _MAX_SUBDOMAIN_LENGTH
        and _DNS1123_SUBDOMAIN.fullmatch(prefix) is not None
        and len(short) <= MAX_NAME_LENGTH
        and _QUALIFIED_NAME_PART.fullmatch(short) is not None
    )


# How a kubelet treats an endpoint with a "/" in it: joined onto its directory (every real one
# read), refused, or accepted and never dialled.
JOINED, REFUSED, NEVER_DIALLED = "joined", "refused", "never-dialled"


def registration_problem(
    request: pb.RegisterRequest, subdirectory_endpoints: str = JOINED
) -> str | None:
    """Why the kubelet refuses this Register before dialling the plugin, or None."""
    if request.version != VERSION:
        return (
            f"requested API version {_quote(request.version)} is not supported by kubelet. "
            f'Supported versions are ["{VERSION}"]'
        )
    if not is_extended_resource_name(request.resource_name):
        return f"the ResourceName {_quote(request.resource_name)} is invalid"
    if subdirectory_endpoints == REFUSED and "/" in request.endpoint:
        return (
            f"endpoint {_quote(request.endpoint)} is not the file name of a socket "
            "in the device-plugin directory"
        )
    return None


def device_problems(devices: Devices) -> list[str]:
    """Where a device list breaks the protocol's rules (the kubelet would mis-count it)."""
    problems: list[str] = []
    seen: set[str] = set()
    for device_id, health in devices:
        if len(device_id) > MAX_DEVICE_ID_LENGTH:
            problems.append(f"device ID {_quote(device_id)} is longer than 63 characters")
        if health not in (HEALTHY, UNHEALTHY):
            problems.append(f"device {_quote(device_id)} has health {_quote(health)}")
        if device_id in seen:
            problems.append(f"device ID {_quote(device_id)} appears more than once")
        seen.add(device_id)
    return problems


def clean_directory(directory: Path, *, sockets_only: bool = False) -> list[str]:
    """What a starting kubelet does to its directory (devicemanager/manager.go
    ``CleanupPluginDirectory``), its checkpoint aside; subdirectories are not entered.

    1.24 to 1.32: delete every entry that is not a directory (sockets, regular files,
    symlinks), looked at with ``os.Lstat``: a symlink goes even if it points to a directory.
    From 1.33 (``sockets_only``; read in 1.33.0, 1.36.3 and 1.37.2): only sockets, looked at
    with ``os.Stat``, which follows symlinks: a symlink to a socket goes, a dangling one (the
    stat fails, logged) and one to a file or directory stay, as regular files do."""
    removed = []
    for entry in sorted(directory.iterdir()):
        if entry.name == CHECKPOINT:
            continue
        try:
            mode = (entry.stat() if sockets_only else entry.lstat()).st_mode
        except OSError:  # gone meanwhile, or a dangling link: the kubelet skips what it
            continue  # cannot stat
        if stat.S_ISDIR(mode) or (sockets_only and not stat.S_ISSOCK(mode)):
            continue
        entry.unlink(missing_ok=True)
        removed.append(entry.name)
    return removed


class _View(Protocol):
    def pretty(self) -> str: ...


_ViewT = TypeVar("_ViewT", bound=_View)


def wait_for_view(
    cond: threading.Condition,
    snapshot: Callable[[], _ViewT],
    predicate: Callable[[_ViewT], bool],
    timeout: float,
    who: str,
    what: str,
) -> _ViewT:
    """Wait on ``cond`` (notified at every change) until ``predicate`` holds for a snapshot
    taken under it; on timeout, AssertionError with the last snapshot, ``who``: ``what``.
    A predicate that raises LookupError counts as not satisfied yet."""
    deadline = time.monotonic() + timeout
    with cond:
        while True:
            view = snapshot()
            try:
                if predicate(view):
                    return view
            except LookupError:
                pass
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            cond.wait(remaining)
    name = getattr(predicate, "__qualname__", repr(predicate))
    raise AssertionError(f"{who}: {name} still false after {timeout:g} s; {what}:\n{view.pretty()}")


def rpc_error(error: grpc.RpcError) -> str:
    """As grpc-go prints a status, e.g. ``rpc error: code = Unavailable desc = ...``: the
    text of the kubelet's errors from a call on a plugin."""
    code = "".join(word.capitalize() for word in error.code().name.split("_"))
    return f"rpc error: code = {code} desc = {error.details()}"


def _quote(text: str) -> str:
    """Like Go's %q, which the kubelet's messages use."""
    return json.dumps(text)


def _describe(devices: Devices) -> str:
    shown = ", ".join(f"{device_id} {health}" for device_id, health in devices[:_SHOWN_DEVICES])
    if len(devices) > _SHOWN_DEVICES:
        shown += f", ... {len(devices) - _SHOWN_DEVICES} more"
    return f"{len(devices)} devices [{shown}]"


def _abridged(problems: list[str]) -> Iterable[str]:
    """A plugin with thousands of bad devices must not flood the log and the state."""
    yield from problems[:_SHOWN_PROBLEMS]
    if len(problems) > _SHOWN_PROBLEMS:
        yield f"... and {len(problems) - _SHOWN_PROBLEMS} more problems in the same list"
