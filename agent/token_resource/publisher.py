"""The agent as the publisher of the cluster pools (``token-resource run --role publisher``).

It reads the same files as the nodes' agents, serves only their cluster-scoped resources, and
needs no kubelet and no node: no sockets, no node lock, no node name. Every publisher of a
driver runs for its Lease; the one that holds it writes the pools
(apiserver.keeping.cluster_slices).
It runs the cluster resources' probes (a license server's free seats), which the nodes'
agents leave to it. Stopped cleanly, it gives the Lease up, so another takes over at once.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path

from token_resource.agent import Agent, StartError
from token_resource.apiserver.connection.client import KubeError
from token_resource.apiserver.election.elector import default_identity, lease_namespace
from token_resource.apiserver.keeping.cluster_slices import ClusterPools, lease_name
from token_resource.apiserver.keeping.node_slices import PoolWanted
from token_resource.config.model import CLUSTER_SCOPE, NO_SCHEDULE, Config, ResourceSpec
from token_resource.host.notify import SystemdNotifier
from token_resource.observe.report import StatusReport
from token_resource.summary import (
    cluster_pools_report,
    cluster_resource_reports,
    cluster_status_line,
)

log = logging.getLogger(__name__)


class PublisherAgent(Agent):
    HANDS_OVER = False

    def __init__(
        self,
        config: Config,
        config_path: Path,
        control_socket: Path,
        notifier: SystemdNotifier,
        identity: str | None = None,
    ) -> None:
        super().__init__(config, config_path, control_socket, notifier)
        self._identity = identity or default_identity()
        self._pools: ClusterPools | None = None
        self._stopping = "giving up the lease"

    async def _take_place(self) -> bool:
        if not self._initial.scoped(CLUSTER_SCOPE).resources:
            raise StartError(
                'no resource with scope = "cluster" in the files: a publisher has nothing to '
                "publish (the nodes' agents serve the others)"
            )
        return True

    def _admit(self, config: Config) -> str | None:
        return None

    def _probed(self, config: Config) -> Mapping[str, ResourceSpec]:
        return config.scoped(CLUSTER_SCOPE).resources

    async def _advertise(self, config: Config) -> list[str]:
        cluster = config.scoped(CLUSTER_SCOPE).resources
        if self._pools is not None and self._pools.driver != config.dra.driver:
            log.info(
                "cluster pools: the driver is now %s: giving up the lease of %s",
                config.dra.driver,
                self._pools.driver,
            )
            await self._pools.close()
            self._pools = None
        if self._pools is None:
            try:
                namespace = lease_namespace(config.kubernetes)
            except KubeError as error:
                return [f"cluster pools of driver {config.dra.driver}: {error}"]
            log.info(
                "cluster pools of driver %s: running for the lease %s/%s as %s",
                config.dra.driver,
                namespace,
                lease_name(config.dra.driver),
                self._identity,
            )
            self._pools = ClusterPools(
                config.kubernetes,
                config.dra.driver,
                namespace,
                self._identity,
                self._publish_status,
            )
            self._pools.start()
        wanted = {
            name: PoolWanted(
                spec.count,
                frozenset(self._monitor.health(name).within(spec.count).unhealthy),
                spec.probe.effect if spec.probe is not None else NO_SCHEDULE,
                spec.nodes,
            )
            for name, spec in cluster.items()
        }
        self._pools.apply(config.kubernetes, wanted)
        return []

    async def report(self) -> StatusReport:
        allocated = None
        if self._pools is not None:
            allocated = self._pools.allocated()
        cluster = None if self._pools is None else self._pools.state(allocated)
        resources = cluster_resource_reports(self._config.resources, self._monitor.reports())
        return StatusReport(
            self._status(),
            "",
            None,
            tuple(resources),
            cluster_pools=cluster_pools_report(cluster),
        )

    def _status(self) -> str:
        state = None if self._pools is None else self._pools.state()
        return cluster_status_line(state, self._last_error)

    async def _close_servers(self) -> None:
        if self._pools is not None:
            await self._pools.close()
