"""The agent as a DRA driver: its servers for the kubelet, and its pools on the API server.

Started when the configuration first has a DRA resource, or at start while claims prepared
before are on record (their pods' unprepare needs it), and kept until the agent stops: the
DRA service socket (``<plugins_dir>/<driver>/dra-<id>.sock``) serves NodePrepareResources, the
registration socket tells the kubelet where it is, and the publisher keeps one pool per
node-scoped DRA resource in ResourceSlices. A cluster-scoped resource's pool (one for the whole
cluster) is published by the elected publisher, never here: the node only prepares the claims
allocated from it, as those of its own pools. The prepared claims are read from disk, and
their CDI specs written, before either socket exists, so a restarted agent answers for them as
before.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import grpc
import grpc.aio

from token_resource.apiserver.connection.credentials import node_name
from token_resource.apiserver.keeping.node_slices import PoolWanted, PublisherState, SlicePublisher
from token_resource.apiserver.keeping.nudge import (
    RECHECK_SECONDS,
    Nudged,
    WaitingPod,
    describe,
    nudge_waiting_pods,
)
from token_resource.apiserver.objects.claims import Claim, ClaimClient
from token_resource.apiserver.objects.slices import cluster_pool_name, pool_name
from token_resource.config.model import DraSettings, KubernetesSettings, ResourceSpec
from token_resource.dra.health import HealthService
from token_resource.dra.prepared import PreparedClaim, PreparedClaims
from token_resource.dra.registration import (
    Registration,
    RegistrationServer,
    newer_instance,
    remove_dead_sockets,
    socket_paths,
    start_id,
)
from token_resource.dra.service import DraService
from token_resource.health.state import ALL_HEALTHY, TokenHealth
from token_resource.observe.observer import Observer
from token_resource.protocol.dra import dra_health_handlers, dra_plugin_handlers

log = logging.getLogger(__name__)

_STOP_GRACE_SECONDS = 1.0


@dataclass(frozen=True)
class DraState:
    driver: str
    # None until the kubelet answered the registration.
    registered: bool | None
    registration_error: str | None
    slices: PublisherState
    prepared: tuple[PreparedClaim, ...]


class DraDriver:
    def __init__(
        self,
        settings: DraSettings,
        kubernetes: KubernetesSettings,
        observer: Observer,
        on_change: Callable[[], None],
        instance: str | None = None,
    ) -> None:
        """``instance``: the ID to name the sockets after when another instance of the agent
        may serve the driver at the same time (see dra.registration); None when alone."""
        self._settings = settings
        self._kubernetes = kubernetes
        self._on_change = on_change
        self._resources: Mapping[str, ResourceSpec] = {}
        self._prepared = PreparedClaims(settings.driver_dir)
        registration_socket, self._service_socket = socket_paths(settings, instance, start_id())
        self._publisher = SlicePublisher(
            kubernetes,
            settings.driver,
            on_change,
            lambda: None if instance is None else self._newer_instance(registration_socket),
        )
        self._claims = ClaimClient()
        self._observer = observer
        self._nudging: asyncio.Task[None] | None = None
        self._told_forbidden = False
        self._registration = RegistrationServer(
            registration_socket,
            Registration(
                settings.driver,
                self._service_socket,
                self._publisher.resync,
                on_change,
                self._registered,
            ),
        )
        self._service = DraService(
            settings.driver,
            settings.cdi_dir,
            self._prepared,
            self.served_pools,
            self._read_claim,
            observer,
            on_change,
        )
        self._health = HealthService(self.pools)
        self._server: grpc.aio.Server | None = None

    @classmethod
    async def started(
        cls,
        settings: DraSettings,
        kubernetes: KubernetesSettings,
        observer: Observer,
        on_change: Callable[[], None],
        instance: str | None = None,
    ) -> DraDriver:
        """A driver serving; OSError or RuntimeError once what it began is closed again."""
        driver = cls(settings, kubernetes, observer, on_change, instance)
        try:
            await driver.start()
        except (OSError, RuntimeError):
            await driver.close()
            raise
        return driver

    async def start(self) -> None:
        """Serve the DRA service, then register it with the kubelet. The sockets an earlier
        start left behind go once the kubelet has these (``_registered``)."""
        self._prepared.load()
        if self._prepared:
            log.info("DRA: %d claim(s) prepared by an earlier run", len(self._prepared))
            await self._service.restore_specs()
        self._service_socket.parent.mkdir(parents=True, exist_ok=True)
        server = grpc.aio.server()
        server.add_generic_rpc_handlers(
            (*dra_plugin_handlers(self._service), *dra_health_handlers(self._health))
        )
        server.add_insecure_port(f"unix:{self._service_socket}")
        await server.start()
        self._server = server
        await self._registration.start()
        log.info(
            "DRA driver %s: serving on %s, registration socket %s",
            self._settings.driver,
            self._service_socket,
            self._registration.path,
        )

    def apply(
        self,
        kubernetes: KubernetesSettings,
        resources: Mapping[str, ResourceSpec],
        health: Mapping[str, TokenHealth],
    ) -> None:
        """Serve the claims of ``resources`` (the DRA ones); publish a pool for each of the
        node-scoped ones, and nothing else, its unhealthy tokens tainted; tell the kubelet's
        health stream."""
        self._kubernetes, self._resources = kubernetes, dict(resources)
        pools = {
            name: PoolWanted(
                spec.count,
                frozenset(health.get(name, ALL_HEALTHY).within(spec.count).unhealthy),
                spec.probe.effect if spec.probe is not None else PoolWanted.effect,
            )
            for name, spec in resources.items()
            if not spec.cluster_scoped
        }
        self._publisher.apply(kubernetes, self._settings.driver, pools)
        self._health.set_health(health)

    def _registered(self) -> None:
        """The kubelet has the driver now: the sockets of earlier starts may go (the kubelet
        drops their plugins and keeps this one), and it is asked for the prepares it could not
        make before (apiserver.keeping.nudge), once per registration."""
        remove_dead_sockets(self._settings)
        if self._nudging is None or self._nudging.done():
            self._nudging = asyncio.ensure_future(self._nudge_waiting_pods())

    async def _nudge_waiting_pods(self) -> None:
        """Once now, and once more after nudge.RECHECK_SECONDS for pods whose status still
        said they ran (a status older than the kubelet's restart)."""
        done: frozenset[WaitingPod] = frozenset()
        for wait in (0.0, RECHECK_SECONDS):
            await asyncio.sleep(wait)
            nudged = await asyncio.to_thread(
                nudge_waiting_pods,
                self._kubernetes,
                node_name(self._kubernetes),
                self._settings.driver,
                frozenset(self._prepared),
                done,
            )
            self._report_nudged(nudged)
            if nudged.problem is not None:
                return
            done |= frozenset(nudged.pods)

    def _report_nudged(self, nudged: Nudged) -> None:
        if nudged.pods:
            log.info(
                "asked the kubelet to prepare %d pod(s) it could not while the driver was away: %s",
                len(nudged.pods),
                describe(nudged.pods),
            )
            self._observer.prepares_retried(len(nudged.pods))
        elif nudged.problem is not None and not (nudged.forbidden and self._told_forbidden):
            self._told_forbidden = nudged.forbidden
            # The host's service (the kubelet's credentials) may not, and needs not: its
            # driver registers before the kubelet starts.
            log.log(
                logging.WARNING if self._kubernetes.in_cluster else logging.INFO,
                "cannot ask the kubelet to retry the prepares it could not make before the "
                "driver registered (%s): such pods wait for its resync, about a minute",
                nudged.problem,
            )

    def _newer_instance(self, own: Path) -> str | None:
        newer = newer_instance(self._settings, own)
        return None if newer is None else f"the newer instance at {newer}"

    def pools(self) -> dict[str, ResourceSpec]:
        """The node's own pools, as configured now: pool name -> the node-scoped resource it
        publishes. The health stream keeps to these: a cluster pool's health is its
        publisher's (taints)."""
        node = node_name(self._kubernetes)
        return {
            pool_name(node, name): spec
            for name, spec in self._resources.items()
            if not spec.cluster_scoped
        }

    def served_pools(self) -> dict[str, ResourceSpec]:
        """The pools whose claims this node prepares: its own, and the cluster pool of each
        cluster-scoped resource (the two kinds of names never meet: slices.cluster_pool_name)."""
        cluster = {
            cluster_pool_name(name): spec
            for name, spec in self._resources.items()
            if spec.cluster_scoped
        }
        return {**self.pools(), **cluster}

    def state(self) -> DraState:
        registration = self._registration.registration
        return DraState(
            self._settings.driver,
            registration.registered,
            registration.error,
            self._publisher.publisher_state(),
            tuple(self._prepared[uid] for uid in sorted(self._prepared)),
        )

    async def close(self) -> None:
        """Stop publishing, deregister (the kubelet stops calling), then stop serving. The
        slices stay: the kubelet removes them 30 s after the driver is gone, unless it comes
        back. The publisher goes first: without its registration socket an instance no longer
        sees the newer one of a rollout, and its last syncs wrote its own count over that one's
        pool (a watch event while it stopped)."""
        await self._publisher.close()
        await self._registration.stop()
        if self._nudging is not None:
            self._nudging.cancel()
        if self._server is not None:
            server, self._server = self._server, None
            self._health.close()
            await server.stop(_STOP_GRACE_SECONDS)
            self._service_socket.unlink(missing_ok=True)
        # In a thread: it waits for a read still under way (stopping the server cancels the
        # call, not the worker thread that reads).
        await asyncio.to_thread(self._claims.close)

    async def _read_claim(self, namespace: str, name: str, uid: str) -> Claim:
        return await asyncio.to_thread(
            self._claims.read, self._kubernetes, namespace, name, uid, self._settings.driver
        )
