"""A driver's cluster pools: one pool of tokens that every node (or every selected node) draws
from, written by the one publisher that holds the driver's Lease.

Every publisher of the driver runs for the Lease (:class:`LeaderElector`); the holder writes the
pools, the others list and watch them only. A new holder's first write makes each pool a new
generation even if it holds what it should: the slices are taken over where they are (updated,
never deleted and made again), so claims allocated from them keep their devices. A holder that
could not renew in time stops writing at once, halfway through a sync if need be, before any
other may take the Lease; a write it sent is given up unanswered by then (its client's timeout),
so that a write held up in the network cannot land once another holds the Lease.

A resource's probe says how many seats are free (a license server's count): its allocated
tokens stay schedulable-as-is (their pods run), and of the others as many as are free; the
rest are tainted. A probe that fails, or finds no seat free, taints them all.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from token_resource.apiserver.connection.client import ApiClient, KubeError
from token_resource.apiserver.election.elector import LeaderElector, LeaseState
from token_resource.apiserver.keeping.allocations import Allocations
from token_resource.apiserver.keeping.node_slices import PoolWanted, SlicePublisher, Wanted
from token_resource.apiserver.keeping.slicesync import SliceScope
from token_resource.apiserver.objects.slices import (
    Pool,
    cluster_placement,
    cluster_pool_name,
)
from token_resource.config.model import KubernetesSettings

log = logging.getLogger(__name__)

# How long a sync that needs the allocated tokens waits for the claims' first list.
CLAIMS_LISTED_SECONDS = 10.0


def lease_name(driver: str) -> str:
    """The Lease the publishers of ``driver`` run for (a DNS subdomain, as the driver is)."""
    return f"{driver}-cluster-pools"


@dataclass(frozen=True)
class ClusterPoolState:
    resource: str
    pool: str
    count: int
    # Whom the pool is for: None for every node, else the label selector as written.
    nodes: str | None
    generation: int | None  # None until seen or written
    healthy: int  # tokens the pool offers untainted
    allocated: int | None  # tokens allocated cluster-wide; None when the claims are unknown


@dataclass(frozen=True)
class ClusterPoolsState:
    driver: str
    lease: LeaseState
    pools: tuple[ClusterPoolState, ...]
    state: str  # the publisher's: pending, accepted or failing
    reason: str | None


def unoffered(count: int, free: int, allocated: frozenset[int]) -> frozenset[int]:
    """The tokens to taint when ``free`` seats are free: all but the allocated ones and the
    first ``free`` others; every token when none is free."""
    if free <= 0:
        return frozenset(range(count))
    others = [index for index in range(count) if index not in allocated]
    return frozenset(others[free:])


class ClusterSlicePublisher(SlicePublisher):
    """Keeps the driver's cluster pools (``pools`` by resource; a PoolWanted's ``unhealthy``
    is read as seats not free: ``count - len(unhealthy)`` are) while ``holder()`` says this one
    leads."""

    def __init__(
        self,
        settings: KubernetesSettings,
        driver: str,
        on_change: Callable[[], None],
        holder: Callable[[], str | None],
        time_left: Callable[[], float],
        allocations: Allocations,
    ) -> None:
        """``holder()``: None while this one leads, else who does; ``time_left()``: how long
        it still leads (each write must be answered by then); ``allocations``: the claims'
        allocated tokens, kept from their watch."""
        super().__init__(settings, driver, on_change, holder, time_left)
        self._allocations = allocations
        # Pool -> its allocated tokens at the last sync that needed them.
        self._allocated: dict[str, frozenset[int]] = {}

    def take_over(self) -> None:
        """This one leads now: its next sync writes every pool as a new generation."""
        self._rewrite = {cluster_pool_name(resource) for resource in self.wanted.pools}
        self.resync()

    def _scope(self, wanted: Wanted) -> SliceScope:
        # No node's slices: there is one per node (spec.nodeName is "" without one, as the real
        # API server's field set has it), and their changes are none of the publisher's.
        return SliceScope(
            f"spec.driver={wanted.driver},spec.nodeName=",
            f"driver {wanted.driver}'s cluster pools",
            cluster=True,
            owner=lambda client: None,
        )

    def _before_writing(self, client: ApiClient, wanted: Wanted) -> None:
        if not any(pool.unhealthy for pool in wanted.pools.values()):
            return
        if not self._allocations.wait_listed(CLAIMS_LISTED_SECONDS):
            raise KubeError("the ResourceClaims are not listed yet (which tokens are allocated)")
        pools = [cluster_pool_name(resource) for resource in wanted.pools]
        self._allocated = self._allocations.allocated(pools) or {}

    def _pools(self, wanted: Wanted) -> list[Pool]:
        return [
            self._pool(wanted.driver, resource, pool)
            for resource, pool in sorted(wanted.pools.items())
        ]

    def _pool(self, driver: str, resource: str, wanted: PoolWanted) -> Pool:
        name = cluster_pool_name(resource)
        free = wanted.count - len(wanted.unhealthy)
        allocated = self._allocated.get(name, frozenset())
        unhealthy = unoffered(wanted.count, free, allocated) if wanted.unhealthy else frozenset()
        placement = cluster_placement(wanted.nodes)
        return Pool(
            driver, name, placement, resource, wanted.count, unhealthy, wanted.effect, self._taints
        )

    def pool_states(self, allocated: Mapping[str, frozenset[int]] | None) -> list[ClusterPoolState]:
        states = []
        for resource, wanted in sorted(self.wanted.pools.items()):
            pool = self._pool(self.wanted.driver, resource, wanted)
            nodes = wanted.nodes
            held = None if allocated is None else len(allocated.get(pool.name, frozenset()))
            states.append(
                ClusterPoolState(
                    resource,
                    pool.name,
                    pool.count,
                    None if nodes is None else nodes.text,
                    self._generations.get(pool.name),
                    pool.count - len(pool.unhealthy),
                    held,
                )
            )
        return states


class ClusterPools:
    """The driver's cluster pools and the Lease that says who writes them."""

    def __init__(
        self,
        settings: KubernetesSettings,
        driver: str,
        namespace: str,
        identity: str,
        on_change: Callable[[], None],
    ) -> None:
        self._driver = driver
        self._elector = LeaderElector(
            settings, lease_name(driver), namespace, identity, self._leadership_changed
        )
        self._allocations = Allocations(lambda: self._publisher.wanted.settings, driver)
        self._publisher = ClusterSlicePublisher(
            settings, driver, on_change, self._holder, self._elector.time_left, self._allocations
        )
        self._on_change = on_change
        self._was_leading = False

    @property
    def driver(self) -> str:
        return self._driver

    def start(self) -> None:
        self._allocations.start()
        self._elector.start()

    def apply(self, settings: KubernetesSettings, pools: Mapping[str, PoolWanted]) -> None:
        """Publish a pool per resource of ``pools`` (their ``nodes`` say for whom) while this
        one holds the Lease."""
        self._publisher.apply(settings, self._driver, pools)

    async def close(self) -> None:
        """Stop writing, then give the Lease up so that another takes over at once."""
        await self._publisher.close()
        await self._elector.close(release=True)
        await self._allocations.close()

    def _holder(self) -> str | None:
        if self._elector.leading:
            return None
        holder = self._elector.state.holder
        return f"the lease holder {holder}" if holder else "the lease holder (none yet)"

    def _leadership_changed(self) -> None:
        leading = self._elector.leading
        if leading and not self._was_leading:
            self._publisher.take_over()
        elif not leading:
            self._publisher.resync()
        self._was_leading = leading
        self._on_change()

    def allocated(self) -> dict[str, frozenset[int]] | None:
        """Pool -> its allocated tokens; None until the claims have been listed."""
        pools = [cluster_pool_name(resource) for resource in self._publisher.wanted.pools]
        return self._allocations.allocated(pools)

    def state(self, allocated: Mapping[str, frozenset[int]] | None = None) -> ClusterPoolsState:
        return ClusterPoolsState(
            self._driver,
            self._elector.state,
            tuple(self._publisher.pool_states(allocated)),
            self._publisher.state,
            self._publisher.reason,
        )
