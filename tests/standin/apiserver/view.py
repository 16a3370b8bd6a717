"""What a test sees of the API server stand-in: an immutable copy of its state."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tests.standin.apiserver.nodes import node_of
from tests.standin.apiserver.partition import HeldRequest
from tests.standin.apiserver.wire import LoggedRequest
from tests.standin.kubelet import is_extended_resource_name

_SHOWN_REQUESTS = 12


@dataclass(frozen=True)
class PoolView:
    """One pool of a driver on a node, as a consumer reads it: the slices of the highest
    generation only (the scheduler ignores older ones)."""

    name: str
    generation: int
    resource_slice_count: int  # as the slices of that generation say (the first one's)
    slices: tuple[str, ...]  # their names
    devices: tuple[str, ...]  # device names in slice and device order
    stale_slices: tuple[str, ...] = ()  # slices of older generations still stored

    @property
    def complete(self) -> bool:
        """Every slice of the generation is there, and they agree on the count."""
        return len(self.slices) == self.resource_slice_count


@dataclass(frozen=True)
class SliceWrite:
    """One write of a ResourceSlice by a client, from the request log: who wrote which slice
    of which pool generation. A test hook's writes (``delete_slices``) are no client's and
    not listed."""

    author: str  # the user the request authenticated as
    type: str  # ADDED, MODIFIED or DELETED
    name: str
    driver: str
    pool: str
    generation: int  # the pool generation it wrote (for a deletion: the deleted slice's)
    node: str | None  # spec.nodeName, None for a slice not bound to one node
    revision: int  # its place among all writes
    at: float = 0.0  # when the stand-in served it (LoggedRequest.at)


@dataclass(frozen=True)
class ApiServerView:
    """A copy of the stand-in's state (objects are deep copies: change them freely)."""

    generation: int  # incremented at every start
    running: bool
    nodes: Mapping[str, dict[str, Any]]
    requests: tuple[LoggedRequest, ...]
    tls_failures: tuple[str, ...]  # handshakes the server saw fail, oldest first
    slices: Mapping[str, dict[str, Any]] = field(default_factory=dict)  # name -> slice
    claims: Mapping[str, dict[str, Any]] = field(default_factory=dict)  # "<ns>/<name>" -> claim
    device_classes: Mapping[str, dict[str, Any]] = field(default_factory=dict)
    pods: Mapping[str, dict[str, Any]] = field(default_factory=dict)  # "<ns>/<name>" -> Pod
    connections: int = 0  # connections whose TLS handshake completed, across restarts
    leases: Mapping[str, dict[str, Any]] = field(default_factory=dict)  # "<ns>/<name>" -> Lease
    held: tuple[HeldRequest, ...] = ()  # requests of cut-off clients, waiting (partition.py)
    dropped: tuple[HeldRequest, ...] = ()  # held requests never served: their clients gave up

    def annotations(self, node: str) -> dict[str, str]:
        return dict(self.nodes[node]["metadata"].get("annotations") or {})

    def capacity(self, node: str) -> dict[str, str]:
        return dict(self.nodes[node]["status"].get("capacity") or {})

    def allocatable(self, node: str) -> dict[str, str]:
        return dict(self.nodes[node]["status"].get("allocatable") or {})

    def extended(self, node: str, field_name: str = "capacity") -> dict[str, str]:
        """The extended resources in ``status.<field_name>`` only, for terse asserts."""
        resources = self.nodes[node]["status"].get(field_name) or {}
        return {k: v for k, v in resources.items() if is_extended_resource_name(k)}

    def resource_version(self, node: str) -> int:
        return int(self.nodes[node]["metadata"]["resourceVersion"])

    def patches(self, node: str | None = None) -> list[LoggedRequest]:
        """The PATCH requests, of one node's URLs if named."""
        return [
            r
            for r in self.requests
            if r.method == "PATCH" and (node is None or node_of(r.path) == node)
        ]

    def slices_of(self, node: str | None = None, driver: str | None = None) -> list[dict[str, Any]]:
        """The stored slices of a node and/or driver, by name."""
        return [
            obj
            for _, obj in sorted(self.slices.items())
            if (node is None or obj["spec"].get("nodeName") == node)
            and (driver is None or obj["spec"].get("driver") == driver)
        ]

    def slice_writes(self, driver: str | None = None, pool: str | None = None) -> list[SliceWrite]:
        """Every write of a slice (of that driver, that pool) through the API, oldest first."""
        writes = []
        for request in self.requests:
            for change in request.changes:
                spec = change.obj.get("spec") or {}
                pool_of = spec.get("pool") or {}
                if (
                    change.collection != "resourceslices"
                    or (driver is not None and spec.get("driver") != driver)
                    or (pool is not None and pool_of.get("name") != pool)
                ):
                    continue
                writes.append(
                    SliceWrite(
                        request.identity or "",
                        change.type,
                        change.obj["metadata"]["name"],
                        spec.get("driver") or "",
                        pool_of.get("name") or "",
                        int(pool_of.get("generation", 0)),
                        spec.get("nodeName"),
                        change.revision,
                        request.at,
                    )
                )
        return writes

    def pools(self, node: str, driver: str) -> dict[str, PoolView]:
        """The pools of a driver on a node, by pool name."""
        grouped: dict[str, list[dict[str, Any]]] = {}
        for obj in self.slices_of(node, driver):
            grouped.setdefault(obj["spec"]["pool"]["name"], []).append(obj)
        pools = {}
        for name, members in grouped.items():
            generation = max(int(obj["spec"]["pool"].get("generation", 0)) for obj in members)
            current = [
                o for o in members if int(o["spec"]["pool"].get("generation", 0)) == generation
            ]
            stale = [o["metadata"]["name"] for o in members if o not in current]
            pools[name] = PoolView(
                name,
                generation,
                int(current[0]["spec"]["pool"].get("resourceSliceCount", 0)),
                tuple(o["metadata"]["name"] for o in current),
                tuple(d["name"] for o in current for d in o["spec"].get("devices") or []),
                tuple(stale),
            )
        return pools

    def claim(self, namespace: str, name: str) -> dict[str, Any]:
        return self.claims[f"{namespace}/{name}"]

    def pretty(self) -> str:
        lines = [f"API server {'running' if self.running else 'stopped'}:"]
        for name, node in self.nodes.items():
            rv = node["metadata"]["resourceVersion"]
            lines.append(
                f"  node {name} (resourceVersion {rv}): capacity {self.capacity(name)}, "
                f"allocatable {self.allocatable(name)}"
            )
        for name, obj in sorted(self.slices.items()):
            spec = obj["spec"]
            pool = spec.get("pool", {})
            lines.append(
                f"  slice {name}: {spec.get('driver')} on {spec.get('nodeName')}, pool "
                f"{pool.get('name')} generation {pool.get('generation')} "
                f"({pool.get('resourceSliceCount')} slices), "
                f"{len(spec.get('devices') or [])} devices"
            )
        lines.extend(f"  claim {key}" for key in sorted(self.claims))
        shown = self.requests[-_SHOWN_REQUESTS:]
        lines.append(f"  last {len(shown)} of {len(self.requests)} requests:")
        lines.extend(f"    {request}" for request in shown)
        lines.extend(f"  TLS failure: {failure}" for failure in self.tls_failures[-3:])
        return "\n".join(lines)
