"""Keeps the node's DRA pools published as ResourceSlices, and republishes them at once when
they vanish.

A sync lists the node's slices (the one list a node identity may make: by ``spec.nodeName``),
writes each pool whose stored slices are not exactly the wanted ones as a new generation, and
deletes the slices of the driver's pools no longer wanted on the node (a resource taken out of
the files, also while the agent was stopped, or made cluster-scoped); the slices of a cluster
pool, which name no node, are never its own. Then it watches the node's slices from the listed
``resourceVersion`` on (connection.watching: one watch after another, each resumed where the
last stopped, with no list between them): anything that happens to the driver's slices (a
starting kubelet deletes every slice of its node, a person edits one) is a reason to sync
again, and so is a version the API server no longer has (410). Stopping the agent leaves the
slices: the kubelet removes a driver's slices itself 30 s after its plugin is gone for good,
so a restart (an upgrade) takes no tokens away.

Unhealthy tokens are tainted; the first write whose answer comes back without the taints it
sent (an API server with DRADeviceTaints off) makes the publisher leave unhealthy tokens out
of the pools instead, for as long as it runs, said once in the log and in its state.

One sync is slicesync's; cluster_slices keeps a driver's cluster pools the same way,
with a scope of its own.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from token_resource.apiserver.connection.client import ApiClient, KubeError
from token_resource.apiserver.connection.credentials import load_credentials, node_name
from token_resource.apiserver.connection.watching import Cursor, watch_until
from token_resource.apiserver.keeping.keeper import Keeper
from token_resource.apiserver.keeping.slicesync import (
    SliceScope,
    TaintsDropped,
    list_slices,
    of_scope,
    sync_slices,
)
from token_resource.apiserver.objects.slices import (
    SLICES_PATH,
    Pool,
    node_owner,
    node_placement,
    pool_name,
)
from token_resource.config.model import NO_SCHEDULE, KubernetesSettings, NodeSelection

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PoolWanted:
    """A resource's pool as wanted: its tokens, the unhealthy ones and their taint's effect;
    for a cluster pool, the nodes it is for (None: all)."""

    count: int
    unhealthy: frozenset[int] = frozenset()
    effect: str = NO_SCHEDULE
    nodes: NodeSelection | None = None


@dataclass(frozen=True)
class Wanted:
    settings: KubernetesSettings
    driver: str
    pools: Mapping[str, PoolWanted]  # by resource name


@dataclass(frozen=True)
class PoolState:
    resource: str
    pool: str
    count: int
    generation: int | None  # None until published
    slices: int
    unhealthy: int = 0  # tokens tainted, or left out where taints are dropped


@dataclass(frozen=True)
class PublisherState:
    node: str
    driver: str
    pools: tuple[PoolState, ...]
    state: str  # pending, accepted or failing
    reason: str | None
    # False once the API server was seen dropping device taints: unhealthy tokens are left out.
    taints: bool = True


class SlicePublisher(Keeper[Wanted]):
    def __init__(
        self,
        settings: KubernetesSettings,
        driver: str,
        on_change: Callable[[], None],
        superseded: Callable[[], str | None] = lambda: None,
        time_left: Callable[[], float | None] = lambda: None,
    ):
        """``superseded()``: what publishes in this one's place (a newer instance of the agent,
        during a rollout), or None; meanwhile this one only watches, so that two instances
        with different counts do not rewrite each other's pools. ``time_left()``: how long
        this one may still write (a lease holder: until its renew deadline), None for no end;
        each write must be answered within it or is given up, so that a write held up in the
        network cannot land later, when another may hold the Lease."""
        super().__init__("resource slices", Wanted(settings, driver, {}), on_change)
        self._superseded = superseded
        self._time_left = time_left
        self._yielded_to: str | None = None
        # Set once, from the sync's thread, when the API server is seen dropping taints.
        self._taints = True
        # pool name -> the generation last written or found, so generations only grow.
        self._generations: dict[str, int] = {}
        # Where the watch goes on: the last sync's list, then each event and bookmark.
        self._cursor = Cursor()
        # Pools to write as a new generation even if they hold what they should.
        self._rewrite: set[str] = set()
        # Set by close(): a sync still running in its thread writes nothing more.
        self._closed = False

    def apply(
        self, settings: KubernetesSettings, driver: str, pools: Mapping[str, PoolWanted]
    ) -> None:
        """Publish a pool per resource of ``pools``, and nothing else of the driver's."""
        self.want(Wanted(settings, driver, dict(pools)))

    async def close(self) -> None:
        """Write nothing more (the slices stay), then stop keeping them."""
        self._closed = True
        await super().close()

    def resync(self) -> None:
        """Look again now (the kubelet registered the plugin: it may have wiped the slices)."""
        self._wake.set()

    def publisher_state(self) -> PublisherState:
        wanted = self.wanted
        node = node_name(wanted.settings)
        states = []
        for pool in self._pools(wanted):
            generation = self._generations.get(pool.name)
            slices = len(pool.slices(0)) if generation is not None else 0
            unhealthy = sum(index < pool.count for index in pool.unhealthy)
            state = PoolState(pool.resource, pool.name, pool.count, generation, slices, unhealthy)
            states.append(state)
        return PublisherState(
            node, wanted.driver, tuple(states), self.state, self.reason, self._taints
        )

    def _pools(self, wanted: Wanted) -> list[Pool]:
        node = node_name(wanted.settings)
        return [
            Pool(
                wanted.driver,
                pool_name(node, resource),
                node_placement(node),
                resource,
                pool.count,
                pool.unhealthy,
                pool.effect,
                self._taints,
            )
            for resource, pool in sorted(wanted.pools.items())
        ]

    def _scope(self, wanted: Wanted) -> SliceScope:
        """Which slices are this publisher's to keep: its node's."""
        node = node_name(wanted.settings)

        def owner(client: ApiClient) -> dict[str, Any]:
            return node_owner(client.get(f"/api/v1/nodes/{quote(node, safe='')}"))

        return SliceScope(f"spec.nodeName={node}", f"node {node}", cluster=False, owner=owner)

    def _before_writing(self, client: ApiClient, wanted: Wanted) -> None:
        """What a publisher reads, on the sync's connection, before it writes its pools."""

    def _sync(self, wanted: Wanted) -> None:
        scope = self._scope(wanted)
        with ApiClient(load_credentials(wanted.settings)) as client:
            other = self._superseded()
            if other != self._yielded_to:
                self._yielded_to = other
                if other is not None:
                    log.info("resource slices: left to %s", other)
            if other is not None:
                self._cursor.version = list_slices(client, scope)[1]
                return
            self._before_writing(client, wanted)
            try:
                self._cursor.version = sync_slices(
                    client,
                    scope,
                    wanted.driver,
                    self._pools(wanted),
                    self._generations,
                    self._rewrite,
                    may_write=lambda: self._may_write(client),
                )
            except TaintsDropped:
                self._taints = False
                log.warning(
                    "resource slices: the API server drops device taints (DRADeviceTaints is "
                    "off: Kubernetes before 1.36?): unhealthy tokens are left out of the "
                    "pools instead"
                )
                raise KubeError("the API server dropped device taints: publishing again") from None

    def _may_write(self, client: ApiClient) -> bool:
        """Whether the next write may be sent, with ``client``'s timeout cut to the time left."""
        if self._closed or self._superseded() is not None:
            return False
        left = self._time_left()
        if left is None:
            return True
        if left <= 0:
            return False
        client.timeout = min(client.timeout, left)
        return True

    async def _quiet(self, wanted: Wanted) -> None:
        """Watch the scope's slices until one of the driver's changes, the watch's version is
        gone, or something else is wanted."""
        scope = self._scope(wanted)
        reason = await watch_until(
            wanted.settings,
            SLICES_PATH,
            scope.field_selector,
            self._cursor,
            lambda event: _slice_changed(event, wanted.driver, scope.cluster),
            self._wake,
        )
        if reason:
            log.info("resource slices: %s: publishing again", reason)


def _slice_changed(event: Mapping[str, Any], driver: str, cluster: bool) -> str | None:
    """What happened, if the event concerns the driver's slices of the scope (cluster or
    node)."""
    item = event.get("object") or {}
    if of_scope(item.get("spec") or {}, driver, cluster):
        return f"slice {(item.get('metadata') or {}).get('name')} {str(event.get('type')).lower()}"
    return None
