"""What the agent says about itself: the one-line STATUS= and the report behind ``status``,
made from the wings' states.

Below the composition root and above the wings, whose states it reads; pure: the agent hands
it everything, it asks nobody.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, replace

from token_resource.apiserver.keeping.cluster_slices import ClusterPoolsState
from token_resource.apiserver.keeping.keeper import ACCEPTED
from token_resource.apiserver.keeping.node_capacity import NodeStatusState
from token_resource.config.model import DEVICE_PLUGIN, DRA, NODE_STATUS, Config, ResourceSpec
from token_resource.config.names import token_id
from token_resource.dra.driver import DraState
from token_resource.health.monitor import ProbeReport
from token_resource.kubelet.allocation import Allocation, AllocationUnknown, read_allocation
from token_resource.kubelet.reconciler import PluginState, PluginSummary, Reconciler
from token_resource.observe.report import (
    ClaimReport,
    ClusterPoolReport,
    ClusterPoolsReport,
    DraReport,
    HealthReport,
    Holder,
    PluginSockets,
    ResourceReport,
    SliceReport,
    StatusReport,
    UnhealthyToken,
)

STATUS_LISTED = 5
_STATUS_ERROR_CHARS = 300


def status_line(
    plugins: PluginSummary,
    kubelet_present: bool,
    in_use: Mapping[str, int] | None,
    node_status: NodeStatusState | None,
    dra: DraState | None,
    last_error: str | None,
) -> str:
    """One line for ``systemctl status``: resources, registration, the last config error."""
    dra_pools = dra.slices.pools if dra is not None else ()
    if not plugins.total and not (node_status and node_status.desired) and not dra_pools:
        text = "no resources configured"
    elif not plugins.total:
        text = "no device-plugin resources"
    else:
        listed = ", ".join(
            f"{state.name}={state.count}{_in_use(in_use, state.name)}" for state in plugins.first
        )
        if plugins.total > len(plugins.first):
            listed += f", and {plugins.total - len(plugins.first)} more"
        if kubelet_present:
            where = f"{plugins.registered}/{plugins.total} registered"
        else:
            where = "waiting for the kubelet"
        text = f"{plugins.total} resource(s), {where}: {listed}"
    if node_status is not None and (node_status.desired or node_status.state != ACCEPTED):
        listed = ", ".join(f"{name}={count}" for name, count in node_status.desired.items())
        text += f"; node status of {node_status.node}: {node_status.state}"
        detail = node_status.reason or listed
        text += f" ({detail})" if detail else ""
    if dra is not None and (dra_pools or dra.slices.state != ACCEPTED):
        text += f"; {_dra_summary(dra, in_use)}"
    if last_error:
        text += f"; last reload rejected: {last_error[:_STATUS_ERROR_CHARS]}"
    return text


def _in_use(in_use: Mapping[str, int] | None, name: str) -> str:
    count = None if in_use is None else in_use.get(name)
    return "" if count is None else f" ({count} in use)"


def _dra_summary(dra: DraState, in_use: Mapping[str, int] | None) -> str:
    if dra.registered is None:
        kubelet = "waiting for the kubelet"
    elif dra.registered:
        kubelet = "registered"
    else:
        kubelet = f"refused by the kubelet ({dra.registration_error})"
    listed = ", ".join(
        f"{pool.resource}={pool.count}{_in_use(in_use, pool.resource)}"
        for pool in dra.slices.pools[:STATUS_LISTED]
    )
    slices = (
        dra.slices.state
        if dra.slices.reason is None
        else f"{dra.slices.state} ({dra.slices.reason})"
    )
    return f"DRA driver {dra.driver}: {kubelet}, slices {slices}" + (
        f": {listed}" if listed else ""
    )


async def status_report(
    status: str,
    reconciler: Reconciler,
    config: Config,
    dra: DraState | None,
    probes: Mapping[str, ProbeReport],
) -> tuple[StatusReport, dict[str, int] | None]:
    """A node agent's report, with a fresh read of who holds the tokens; and the tokens in use
    per resource (None when the kubelet could not tell)."""
    socket = config.agent.pod_resources_socket
    states = reconciler.states()
    allocation: Allocation | None = None
    problem = None
    try:
        allocation = await read_allocation(socket, [state.name for state in states])
    except AllocationUnknown as error:
        problem = str(error)
    resources = resource_reports(states, allocation, config.resources, dra, probes)
    in_use = {r.name: r.in_use for r in resources if r.in_use is not None}
    layout = reconciler.layout
    sockets = PluginSockets(
        str(layout.directory), "subdirectory" if layout.subdirectory else "top-level"
    )
    report = StatusReport(status, str(socket), problem, tuple(resources), sockets, dra_report(dra))
    return report, None if allocation is None else in_use


def resource_reports(
    plugins: Sequence[PluginState],
    allocation: Allocation | None,
    resources: Mapping[str, ResourceSpec],
    dra: DraState | None,
    probes: Mapping[str, ProbeReport],
) -> list[ResourceReport]:
    """A report per configured resource, whichever way it is advertised, ordered by name."""
    return sorted(
        (
            replace(report, health=_health_report(probes.get(report.name), report.count))
            for report in _reports(plugins, allocation, resources, dra)
        ),
        key=lambda report: report.name,
    )


def _reports(
    plugins: Sequence[PluginState],
    allocation: Allocation | None,
    resources: Mapping[str, ResourceSpec],
    dra: DraState | None,
) -> list[ResourceReport]:
    reports = [
        ResourceReport(
            state.name,
            state.count,
            DEVICE_PLUGIN,
            state.registered,
            None if allocation is None else allocation.holders.get(state.name, ()),
            None
            if allocation is None or allocation.allocatable is None
            else allocation.allocatable.get(state.name, 0),
        )
        for state in plugins
    ]
    reports += [
        ResourceReport(spec.name, spec.count, NODE_STATUS, None, None)
        for spec in resources.values()
        if spec.advertise == NODE_STATUS
    ]
    if dra is not None:
        reports += _dra_reports(dra, resources)
    return reports


def _health_report(probe: ProbeReport | None, count: int) -> HealthReport | None:
    if probe is None:
        return None
    unhealthy = tuple(
        UnhealthyToken(token_id(index), reason)
        for index, reason in probe.health.within(count).unhealthy.items()
    )
    return HealthReport(
        probe.probe,
        unhealthy,
        probe.last_result,
        probe.last_message,
        probe.last_time,
        probe.last_seconds,
    )


def _dra_reports(dra: DraState, resources: Mapping[str, ResourceSpec]) -> list[ResourceReport]:
    """The node's pools, and the cluster pools whose claims this node prepares (their counts
    are the cluster's, their holders this node's)."""
    holders: dict[str, list[Holder]] = {}
    for claim in dra.prepared:
        tokens: dict[str, list[str]] = {}
        for device in claim.devices:
            tokens.setdefault(device.resource, []).append(device.device)
        for resource, device_ids in tokens.items():
            holders.setdefault(resource, []).append(
                Holder(claim.namespace, ", ".join(claim.pods), "", tuple(device_ids), claim.name)
            )
    return [
        ResourceReport(
            pool.resource,
            pool.count,
            DRA,
            dra.registered is True,
            tuple(holders.get(pool.resource, ())),
            slices=SliceReport(pool.pool, pool.generation, pool.slices),
        )
        for pool in dra.slices.pools
    ] + [
        ResourceReport(
            spec.name, spec.count, DRA, dra.registered is True, tuple(holders.get(spec.name, ()))
        )
        for spec in resources.values()
        if spec.advertise == DRA and spec.cluster_scoped
    ]


def dra_report(dra: DraState | None) -> DraReport | None:
    if dra is None:
        return None
    return DraReport(
        dra.driver,
        dra.slices.node,
        dra.registered,
        dra.registration_error,
        dra.slices.state,
        dra.slices.reason,
        tuple(ClaimReport(claim.namespace, claim.name, claim.pods) for claim in dra.prepared),
        dra.slices.taints,
    )


def cluster_status_line(state: ClusterPoolsState | None, last_error: str | None) -> str:
    """STATUS= of a publisher of cluster pools: whether it writes them, and what they hold."""
    if state is None:
        text = "no cluster pools configured"
    else:
        lease = state.lease
        if lease.leading:
            role = "publishing (holds the lease)"
        else:
            role = f"standing by (lease held by {lease.holder or 'nobody'})"
        listed = ", ".join(f"{pool.resource}={pool.count}" for pool in state.pools[:STATUS_LISTED])
        slices = state.state if state.reason is None else f"{state.state} ({state.reason})"
        text = f"cluster pools of driver {state.driver}: {role}, slices {slices}"
        text += f": {listed}" if listed else ""
    if last_error:
        text += f"; last reload rejected: {last_error[:_STATUS_ERROR_CHARS]}"
    return text


def cluster_pools_report(state: ClusterPoolsState | None) -> ClusterPoolsReport | None:
    if state is None:
        return None
    lease = state.lease
    return ClusterPoolsReport(
        state.driver,
        f"{lease.namespace}/{lease.name}",
        lease.identity,
        lease.holder,
        lease.leading,
        lease.transitions,
        lease.error,
        state.state,
        state.reason,
        tuple(ClusterPoolReport(**asdict(pool)) for pool in state.pools),
    )


def cluster_resource_reports(
    resources: Mapping[str, ResourceSpec], probes: Mapping[str, ProbeReport]
) -> list[ResourceReport]:
    """A report per cluster-scoped resource, with its probe's health (the tokens' holders are
    in the pools' report: allocated, cluster-wide)."""
    return [
        ResourceReport(
            spec.name,
            spec.count,
            DRA,
            None,
            None,
            health=_health_report(probes.get(spec.name), spec.count),
        )
        for spec in resources.values()
        if spec.cluster_scoped
    ]
