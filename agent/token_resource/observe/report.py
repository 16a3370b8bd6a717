"""What ``token-resource status`` shows: per resource its tokens, registration and holders.

The agent builds it and sends it as JSON over the control socket; the command prints that
JSON or renders it as text. The command imports only the standard library, so this does too.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from token_resource import PACKAGE_DIR, __version__


@dataclass(frozen=True)
class Holder:
    """One container and the device IDs of one resource that the kubelet allocated to it; for
    DRA, the pods of one prepared claim (the container is not known: empty)."""

    namespace: str
    pod: str
    container: str
    device_ids: tuple[str, ...]
    claim: str | None = None  # DRA: the ResourceClaim's name


@dataclass(frozen=True)
class SliceReport:
    """A DRA resource's pool as published: its name, generation (None until published) and
    number of ResourceSlices."""

    pool: str
    generation: int | None
    slices: int


@dataclass(frozen=True)
class ClaimReport:
    """A claim the DRA driver prepared on the node and the pods it is reserved for (their
    names, in its namespace). Listed whatever its resource: one taken out of the files keeps
    its claims until the kubelet unprepares them, and has no resource report to hold them."""

    namespace: str
    name: str
    pods: tuple[str, ...]


@dataclass(frozen=True)
class DraReport:
    driver: str
    node: str
    # The kubelet's answer to the registration; None before it asked.
    registered: bool | None
    registration_error: str | None
    slices_state: str  # pending, accepted or failing (the API server)
    slices_error: str | None
    claims: tuple[ClaimReport, ...]
    # False when the API server drops device taints: unhealthy tokens are left out instead.
    taints: bool = True


@dataclass(frozen=True)
class UnhealthyToken:
    token: str
    reason: str


@dataclass(frozen=True)
class HealthReport:
    """A resource's probe and what it last said."""

    probe: str  # e.g. "tcp 127.0.0.1:27000 every 10 s"
    unhealthy: tuple[UnhealthyToken, ...]
    last_result: str | None  # "passed" or "failed"; None before the first check
    last_message: str | None
    last_time: float | None  # unix time
    last_seconds: float | None  # how long the check took


@dataclass(frozen=True)
class ResourceReport:
    name: str
    count: int
    advertise: str
    # None for node-status resources, which do not register.
    registered: bool | None
    # None when the kubelet could not tell (and always for node-status resources, whose
    # holders the kubelet does not list).
    holders: tuple[Holder, ...] | None
    # Devices the kubelet counts as allocatable; None when it does not say.
    kubelet_allocatable: int | None = None
    # DRA resources only.
    slices: SliceReport | None = None
    # Resources with a probe only.
    health: HealthReport | None = None

    @property
    def healthy(self) -> int:
        """Tokens a new pod may get: all of them, but those the probe found unusable."""
        if self.health is None:
            return self.count
        return self.count - len(self.health.unhealthy)

    @property
    def held(self) -> frozenset[str] | None:
        """The token IDs held by pods; None when the kubelet could not tell."""
        if self.holders is None:
            return None
        return frozenset(device_id for holder in self.holders for device_id in holder.device_ids)

    @property
    def in_use(self) -> int | None:
        """Distinct tokens held; above ``count`` after a resize below what pods hold."""
        held = self.held
        return None if held is None else len(held)

    @property
    def free(self) -> int | None:
        """Healthy tokens no pod holds: what new pods may still get. (The scheduler admits no
        new pod while the held tokens reach the count, so the excess of a lowered count, held,
        counts against the healthy ones.)"""
        held = self.held
        if held is None:
            return None
        unhealthy = set() if self.health is None else {t.token for t in self.health.unhealthy}
        return max(self.healthy - len(held - unhealthy), 0)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data.update(in_use=self.in_use, free=self.free, healthy=self.healthy)
        return data


@dataclass(frozen=True)
class PluginSockets:
    """Where the device-plugin sockets are: the agent's own directory, which kubelet restarts
    leave alone, or beside kubelet.sock (the fallback for a kubelet that will not take it)."""

    directory: str
    layout: str  # "subdirectory" or "top-level"


@dataclass(frozen=True)
class InstanceReport:
    """Whether the agent may serve beside another instance of itself (a rollout), and why."""

    instance: str | None
    beside: bool
    reason: str
    # The holder of the node's lock that this agent waits for; None once it is alone.
    waiting_for: str | None


@dataclass(frozen=True)
class ClusterPoolReport:
    """One cluster pool, as its publisher sees it."""

    resource: str
    pool: str
    count: int
    nodes: str | None  # the label selector of the nodes it is for; None: all
    generation: int | None
    healthy: int  # tokens offered untainted
    allocated: int | None  # tokens allocated cluster-wide; None when the claims are unknown


@dataclass(frozen=True)
class ClusterPoolsReport:
    """A publisher of cluster pools: the Lease it runs for, and the pools."""

    driver: str
    lease: str  # namespace/name
    identity: str
    holder: str | None
    leading: bool
    transitions: int | None
    lease_error: str | None
    state: str  # the slices': pending, accepted or failing
    reason: str | None
    pools: tuple[ClusterPoolReport, ...]


@dataclass(frozen=True)
class StatusReport:
    summary: str  # the STATUS= line
    pod_resources_socket: str
    # Why the kubelet could not tell who holds the tokens; None when it did.
    pod_resources_error: str | None
    resources: tuple[ResourceReport, ...]
    plugin_sockets: PluginSockets | None = None
    dra: DraReport | None = None
    instance: InstanceReport | None = None
    cluster_pools: ClusterPoolsReport | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "summary": self.summary,
            # Which code answers: after an upgrade, the new installation's (its version, from
            # the metadata beside the package it imported, and that package's directory).
            "agent": {"version": __version__, "package": str(PACKAGE_DIR), "pid": os.getpid()},
            "cluster_pools": None if self.cluster_pools is None else asdict(self.cluster_pools),
            "instance": None if self.instance is None else asdict(self.instance),
            "plugin_sockets": None if self.plugin_sockets is None else asdict(self.plugin_sockets),
            "dra": None if self.dra is None else asdict(self.dra),
            "pod_resources": {
                "socket": self.pod_resources_socket,
                "error": self.pod_resources_error,
            },
            "resources": [resource.to_json() for resource in self.resources],
        }


def _cluster_lines(cluster: Mapping[str, Any] | None) -> list[str]:
    if cluster is None:
        return []
    if cluster["leading"]:
        role = "publishing: holds the lease"
    else:
        role = f"standing by: the lease is held by {cluster['holder'] or 'nobody'}"
    lines = [f"cluster pools of driver {cluster['driver']} (lease {cluster['lease']}): {role}"]
    if cluster["lease_error"]:
        lines.append(f"  lease: {cluster['lease_error']}")
    if cluster["reason"]:
        lines.append(f"  slices {cluster['state']}: {cluster['reason']}")
    for pool in cluster["pools"]:
        nodes = "all nodes" if pool["nodes"] is None else f"nodes {pool['nodes']}"
        allocated = "unknown" if pool["allocated"] is None else pool["allocated"]
        generation = "unpublished" if pool["generation"] is None else pool["generation"]
        lines.append(
            f"{pool['resource']}: {pool['count']} for {nodes}, {pool['healthy']} offered, "
            f"{allocated} allocated (pool {pool['pool']}, generation {generation})"
        )
    return lines


def render_text(report: Mapping[str, Any]) -> str:
    """The report (as ``to_json`` gives it) for people: the status line, then per resource."""
    lines = [report["summary"]]
    instance = report.get("instance")  # absent in the answers of older agents
    if instance is not None and instance["instance"] is not None:
        lines.append(f"instance {instance['instance']}: {instance['reason']}")
        if instance["waiting_for"] is not None:
            lines.append(f"  waiting to serve until it is alone: {instance['waiting_for']}")
    lines.extend(_cluster_lines(report.get("cluster_pools")))
    error = report["pod_resources"]["error"]
    if error is not None:
        lines.append(f"who holds the tokens: unknown: {error}")
    for resource in report["resources"]:
        lines.append(f"{resource['name']}: {_describe(resource)}")
        lines.extend(_health_lines(resource.get("health"), resource["count"]))
        lines.extend(
            f"  {_holder(holder)}: " + ", ".join(holder["device_ids"])
            for holder in resource["holders"] or ()
        )
    sockets = report.get("plugin_sockets")  # absent in the answers of older agents
    if sockets is not None:
        kept = (
            "kept across kubelet restarts"
            if sockets["layout"] == "subdirectory"
            else "beside kubelet.sock: the kubelet did not take the agent's own directory"
        )
        lines.append(f"device-plugin sockets: {sockets['directory']} ({kept})")
    dra = report.get("dra")
    if dra is not None:
        lines.append(_describe_dra(dra))
    return "\n".join(lines)


def render_prepared_claims(report: Mapping[str, Any]) -> str:
    """One line per claim the DRA driver prepared, its pods first: ``default/web-1 (claim
    web-1-tokens)``. Empty without any (or without a DRA driver)."""
    dra = report.get("dra")
    lines = []
    for claim in dra["claims"] if dra is not None else ():
        namespace = claim["namespace"]
        pods = ", ".join(f"{namespace}/{pod}" for pod in claim["pods"]) or f"{namespace}/-"
        lines.append(f"{pods} (claim {claim['name']})")
    return "\n".join(lines)


def _health_lines(health: Mapping[str, Any] | None, count: int) -> list[str]:
    if health is None:
        return []
    healthy = count - len(health["unhealthy"])
    if health["last_result"] is None:
        last = "not checked yet"
    else:
        last = f"last check {health['last_result']}: {health['last_message']}"
        if health["last_time"] is not None:
            moment = time.strftime("%H:%M:%S", time.localtime(health["last_time"]))
            last += f" (at {moment}, {health['last_seconds']:.3f} s)"
    lines = [f"  probe {health['probe']}: {healthy} of {count} healthy; {last}"]
    lines += [f"  {token['token']} unhealthy: {token['reason']}" for token in health["unhealthy"]]
    return lines


def _holder(holder: Mapping[str, Any]) -> str:
    if holder.get("claim") is not None:
        return f"{holder['namespace']}/{holder['pod'] or '-'} (claim {holder['claim']})"
    return f"{holder['namespace']}/{holder['pod']}/{holder['container']}"


def _describe_dra(dra: Mapping[str, Any]) -> str:
    if dra["registered"] is None:
        kubelet = "not registered yet (waiting for the kubelet)"
    elif dra["registered"]:
        kubelet = "registered with the kubelet"
    else:
        kubelet = f"refused by the kubelet: {dra['registration_error']}"
    slices = dra["slices_state"]
    if dra["slices_error"]:
        slices += f": {dra['slices_error']}"
    if not dra.get("taints", True):
        slices += " (the API server drops device taints: unhealthy tokens are left out)"
    return f"DRA driver {dra['driver']} on node {dra['node']}: {kubelet}; resource slices {slices}"


def _describe(resource: Mapping[str, Any]) -> str:
    parts = [f"{resource['count']} token(s)"]
    if resource["registered"] is None:
        parts.append("node status (the kubelet lists no holders for these)")
    else:
        parts.append("registered" if resource["registered"] else "not registered")
    slices = resource.get("slices")
    if slices is not None:
        published = (
            f"pool {slices['pool']} generation {slices['generation']} in {slices['slices']} "
            "slice(s)"
            if slices["generation"] is not None
            else f"pool {slices['pool']} not published yet"
        )
        parts.append(f"DRA, {published}")
    in_use, count = resource["in_use"], resource["count"]
    if in_use is not None:
        over = in_use - count
        held = f"{in_use} in use"
        if over > 0:
            held += f" ({over} more than the count: held since before it was lowered)"
        parts += [held, f"{resource['free']} free"]
    elif resource["registered"] is not None:
        parts.append("in use unknown")
    allocatable = resource["kubelet_allocatable"]
    if allocatable is not None and allocatable != count:
        parts.append(f"the kubelet counts {allocatable} allocatable")
    return ", ".join(parts)
