"""The ``DRAPlugin`` service: the kubelet's NodePrepareResources and NodeUnprepareResources.

Preparing a claim reads it from the API server (the request names only the claim), checks
that each of the driver's devices allocated to it is a token of a pool this node serves (its
own pools, and the cluster pools of cluster-scoped resources), writes the
CDI spec that tells its containers their tokens, and records it on disk; the answer names the
devices and their CDI IDs. Both calls are idempotent, keyed by claim UID: a claim prepared
before is answered from the record (its spec written again: /var/run is empty after a reboot),
and unpreparing a claim the agent does not know, or one deleted meanwhile, succeeds. At start
every recorded claim's spec is written anew: a kubelet prepares a claim once (again only after
its own restart) and retries a failed container with the CDI IDs it has, so a spec lost in a
reboot, or one an earlier version wrote that the runtime refuses, is repaired only that way.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import grpc
import grpc.aio

from token_resource.apiserver.connection.client import KubeError
from token_resource.apiserver.objects.claims import Claim
from token_resource.config.model import ResourceSpec
from token_resource.config.names import token_index
from token_resource.dra.cdi import remove_spec, write_spec
from token_resource.dra.prepared import PreparedClaim, PreparedClaims, PreparedDevice
from token_resource.observe.observer import Observer
from token_resource.protocol import dra_v1_pb2 as pb

log = logging.getLogger(__name__)

Context = grpc.aio.ServicerContext[Any, Any]
# (namespace, name, uid) -> the claim, read from the API server.
ClaimReader = Callable[[str, str, str], Awaitable[Claim]]


class PrepareError(Exception):
    """The claim's allocation does not fit what this node publishes; the text says why."""


class DraService:
    def __init__(
        self,
        driver: str,
        cdi_dir: Path,
        prepared: PreparedClaims,
        pools: Callable[[], Mapping[str, ResourceSpec]],
        read_claim: ClaimReader,
        observer: Observer,
        on_change: Callable[[], None],
    ) -> None:
        """``pools()``: pool name -> the resource of each pool whose claims the node
        prepares, as configured now."""
        self._driver = driver
        self._cdi_dir = cdi_dir
        self._prepared = prepared
        self._pools = pools
        self._read_claim = read_claim
        self._observer = observer
        self._on_change = on_change
        # A claim being prepared: a second call for it (the kubelet retrying) waits for it.
        self._preparing: dict[str, asyncio.Future[PreparedClaim]] = {}

    async def restore_specs(self) -> None:
        """Write the CDI spec of every claim prepared by an earlier run, as this version writes
        it; a spec that cannot be written is logged, and written again if the kubelet asks."""
        async with self._prepared.changing():
            for uid, claim in self._prepared.items():
                try:
                    self._write_spec(uid, claim.devices)
                except OSError as error:
                    log.error(
                        "claim %s/%s: cannot write its CDI spec: %s",
                        claim.namespace,
                        claim.name,
                        error,
                    )

    async def NodePrepareResources(
        self, request: pb.NodePrepareResourcesRequest, context: Context
    ) -> pb.NodePrepareResourcesResponse:
        claims = list(request.claims)
        outcomes = await asyncio.gather(
            *(self._prepare_once(claim.namespace, claim.name, claim.uid) for claim in claims),
            return_exceptions=True,
        )
        response = pb.NodePrepareResourcesResponse()
        for claim, outcome in zip(claims, outcomes):
            answer = response.claims[claim.uid]
            if isinstance(outcome, (PrepareError, KubeError, OSError)):
                log.warning("claim %s/%s: not prepared: %s", claim.namespace, claim.name, outcome)
                self._observer.claim_prepared(ok=False)
                answer.error = str(outcome)
            elif isinstance(outcome, BaseException):
                raise outcome
            else:
                self._observer.claim_prepared(ok=True)
                for device in outcome.devices:
                    answer.devices.add(
                        request_names=[device.request],
                        pool_name=device.pool,
                        device_name=device.device,
                        cdi_device_ids=list(device.cdi_device_ids),
                    )
        return response

    async def NodeUnprepareResources(
        self, request: pb.NodeUnprepareResourcesRequest, context: Context
    ) -> pb.NodeUnprepareResourcesResponse:
        response = pb.NodeUnprepareResourcesResponse()
        async with self._prepared.changing():
            for claim in request.claims:
                answer = response.claims[claim.uid]
                try:
                    remove_spec(self._cdi_dir, self._driver, claim.uid)
                    released = self._prepared.remove(claim.uid)
                except OSError as error:
                    answer.error = f"cannot release claim {claim.namespace}/{claim.name}: {error}"
                    self._observer.claim_unprepared(ok=False)
                    continue
                self._observer.claim_unprepared(ok=True)
                if released is not None:
                    tokens = ", ".join(device.device for device in released.devices)
                    log.info("claim %s/%s released: %s", claim.namespace, claim.name, tokens or "-")
                    self._on_change()
        return response

    async def _prepare_once(self, namespace: str, name: str, uid: str) -> PreparedClaim:
        running = self._preparing.get(uid)
        if running is not None:
            return await asyncio.shield(running)
        task = asyncio.ensure_future(self._prepare(namespace, name, uid))
        self._preparing[uid] = task
        try:
            return await asyncio.shield(task)
        finally:
            if task.done():
                del self._preparing[uid]
            else:
                task.add_done_callback(lambda _: self._preparing.pop(uid, None))

    async def _prepare(self, namespace: str, name: str, uid: str) -> PreparedClaim:
        async with self._prepared.changing():
            known = self._known(uid)
        if known is not None:
            return known
        claim = await self._read_claim(namespace, name, uid)
        devices = self._devices(claim)
        async with self._prepared.changing():
            # The other instance of a rollout may have prepared it meanwhile.
            known = self._known(uid)
            if known is not None:
                return known
            cdi_ids = self._write_spec(uid, devices)
            prepared = PreparedClaim(
                namespace, name, uid, claim.pods, tuple(_with_cdi(devices, cdi_ids))
            )
            self._prepared.add(prepared)
        tokens = ", ".join(f"{device.resource} {device.device}" for device in devices)
        log.info("claim %s/%s prepared: %s", namespace, name, tokens or "no devices of ours")
        self._on_change()
        return prepared

    def _known(self, uid: str) -> PreparedClaim | None:
        """The claim as prepared before, its spec written again (/var/run empties at a reboot)."""
        known = self._prepared.get(uid)
        if known is not None:
            self._write_spec(known.uid, known.devices)
        return known

    def _devices(self, claim: Claim) -> list[PreparedDevice]:
        pools = self._pools()
        devices = []
        for allocated in claim.devices:
            spec = pools.get(allocated.pool)
            if spec is None:
                raise PrepareError(
                    f"claim {claim.namespace}/{claim.name}: pool {json.dumps(allocated.pool)} "
                    f"of driver {json.dumps(self._driver)} is not served by this agent "
                    f"({_served(pools)}; is its resource configured for DRA here?)"
                )
            index = token_index(allocated.device)
            if index is None or index >= spec.count:
                raise PrepareError(
                    f"claim {claim.namespace}/{claim.name}: {allocated.device} is not one of "
                    f"the {spec.count} token(s) of {spec.name}"
                )
            devices.append(
                PreparedDevice(
                    allocated.request, allocated.pool, allocated.device, spec.name, spec.env, ()
                )
            )
        return devices

    def _write_spec(self, uid: str, devices: Sequence[PreparedDevice]) -> list[str]:
        """The claim's CDI spec: a device per request, setting each resource's variable to
        the request's tokens of it. Returns the CDI IDs, one per request in order."""
        requests: dict[str, dict[str, list[str]]] = {}
        for device in devices:
            variables = requests.setdefault(device.request, {})
            variables.setdefault(device.env, []).append(device.device)
        environments = [
            {env: ",".join(tokens) for env, tokens in variables.items()}
            for variables in requests.values()
        ]
        return write_spec(self._cdi_dir, self._driver, uid, environments)


def _served(pools: Mapping[str, ResourceSpec]) -> str:
    if not pools:
        return "it serves no pool: no DRA resource is configured"
    return "its pools: " + ", ".join(map(json.dumps, sorted(pools)))


def _with_cdi(devices: list[PreparedDevice], cdi_ids: list[str]) -> list[PreparedDevice]:
    """Each request's CDI ID on its first device: a container using the request gets every
    device of it, and the runtime needs each CDI device once."""
    requests = list(dict.fromkeys(device.request for device in devices))
    seen: set[str] = set()
    result = []
    for device in devices:
        first = device.request not in seen
        seen.add(device.request)
        ids = (cdi_ids[requests.index(device.request)],) if first else ()
        result.append(
            PreparedDevice(
                device.request, device.pool, device.device, device.resource, device.env, ids
            )
        )
    return result
