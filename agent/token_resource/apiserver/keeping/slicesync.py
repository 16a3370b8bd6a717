"""One sync of a publisher's ResourceSlices: list them, write each pool that is not exactly as
wanted as a new generation (updated in place, made, or deleted slice by slice), remove the
pools no longer wanted, and list again until a list shows them so. Blocking, for a worker
thread; the scope (a node's slices, or a driver's cluster pools) says which slices are its own.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlencode

from token_resource.apiserver.connection.client import ApiClient, ApiError, KubeError
from token_resource.apiserver.objects.slices import (
    API_VERSION,
    SLICES_PATH,
    Pool,
    cluster_scoped,
    generation_of,
    matches,
    taints_kept,
)

log = logging.getLogger(__name__)

NOT_FOUND = 404
# Said when the API server has no resource.k8s.io/v1: DRA went GA in 1.34, and unchanged pods
# (a DeviceClass's extendedResourceName) are served from it since 1.36.
NO_DRA = (
    f"the API server does not serve {API_VERSION}: DRA resources need Kubernetes 1.34 or newer "
    "(and 1.36 or newer for unchanged pods asking for the resource by its name)"
)


class TaintsDropped(Exception):
    """The API server dropped the taints of a slice it was sent."""


class NotPublishing(KubeError):
    """This publisher may no longer write (another publishes in its place) halfway through."""

    def __init__(self) -> None:
        # What the keeper's "not applied" warning quotes.
        super().__init__("no longer leading: the rest is left to the publisher that leads")


# Each write is checked by a new list; a node whose slices keep changing under the agent
# (another writer) is a failure, retried with backoff, not a busy loop.
_MAX_ROUNDS = 3


@dataclass(frozen=True)
class SliceScope:
    """The slices one publisher keeps: those its list by ``field_selector`` finds with a
    placement of the scope (``cluster`` or a node's); ``where`` names them in messages,
    ``owner`` reads the owner reference its slices get (None: none)."""

    field_selector: str
    where: str
    cluster: bool
    owner: Callable[[ApiClient], Mapping[str, Any] | None]


def sync_slices(
    client: ApiClient,
    scope: SliceScope,
    driver: str,
    pools: Sequence[Pool],
    generations: dict[str, int],
    rewrite: set[str] | None = None,
    may_write: Callable[[], bool] = lambda: True,
) -> str:
    """Make the scope's slices of ``driver`` exactly ``pools``; the resourceVersion of a list
    that showed them so, to watch from. Blocking; KubeError when the API server cannot or will
    not. A slice deleted between a write and that list is seen by that list, and anything
    later by the watch: nothing falls between the two. The pools named in ``rewrite`` get a
    new generation even when they hold what they should (a new publisher takes them over);
    each is taken out of it once written. ``may_write()`` is asked before each write: once it
    says no, nothing more is written (NotPublishing)."""
    owner: Mapping[str, Any] | None = None
    owner_read = False
    rewrite = rewrite if rewrite is not None else set()
    for _ in range(_MAX_ROUNDS):
        items, version = list_slices(client, scope)
        stored: dict[str, list[dict[str, Any]]] = {}
        for item in items:
            spec = item.get("spec") or {}
            if of_scope(spec, driver, scope.cluster):
                stored.setdefault(str((spec.get("pool") or {}).get("name")), []).append(item)
        stale = [
            pool
            for pool in pools
            if pool.name in rewrite or not _published(stored.get(pool.name, []), pool, generations)
        ]
        if not stale and stored.keys() <= {pool.name for pool in pools}:
            return version
        if not owner_read:
            owner, owner_read = scope.owner(client), True
        for pool in stale:
            present = stored.get(pool.name, [])
            generation = max(generation_of(present), generations.get(pool.name, 0)) + 1
            _write(client, present, pool.slices(generation, owner), may_write)
            generations[pool.name] = generation
            rewrite.discard(pool.name)
            log.info(
                "resource slices: pool %s: %d token(s), generation %d",
                pool.name,
                pool.count,
                generation,
            )
        for name in stored.keys() - {pool.name for pool in pools}:
            _write(client, stored[name], [], may_write)
            generations.pop(name, None)
            log.info("resource slices: pool %s removed (no longer configured)", name)
    raise KubeError(f"the resource slices of {scope.where} kept changing while being written")


def of_scope(spec: Mapping[str, Any], driver: str, cluster: bool) -> bool:
    """Whether a slice's spec is of ``driver`` and of a cluster pool (``cluster``) or not."""
    return spec.get("driver") == driver and cluster_scoped(spec) == cluster


def _published(
    present: Sequence[Mapping[str, Any]], pool: Pool, generations: dict[str, int]
) -> bool:
    """Whether ``present`` are exactly the pool's slices at their generation (noted, so that
    a rewrite gets a newer one)."""
    generation = max(generation_of(present), generations.get(pool.name, 0))
    if present and matches(present, pool.slices(generation)):
        generations[pool.name] = generation
        return True
    return False


def list_slices(client: ApiClient, scope: SliceScope) -> tuple[list[dict[str, Any]], str]:
    query = urlencode({"fieldSelector": scope.field_selector})
    try:
        listing = client.get(f"{SLICES_PATH}?{query}")
    except ApiError as error:
        if error.status == NOT_FOUND:
            raise KubeError(NO_DRA) from None
        raise
    items = [item for item in listing.get("items") or [] if isinstance(item, dict)]
    return items, str((listing.get("metadata") or {}).get("resourceVersion", ""))


def _write(
    client: ApiClient,
    present: Sequence[Mapping[str, Any]],
    wanted: Sequence[Mapping[str, Any]],
    may_write: Callable[[], bool],
) -> None:
    """Replace the slices ``present`` by ``wanted``: update those of the same name, create the
    others, delete what is left. TaintsDropped if the API server did not keep the taints,
    NotPublishing as soon as ``may_write()`` says no."""
    by_name = {str((item.get("metadata") or {}).get("name")): item for item in present}
    for item in wanted:
        if not may_write():
            raise NotPublishing()
        name = item["metadata"]["name"]
        old = by_name.pop(name, None)
        if old is None:
            stored = client.create(SLICES_PATH, item)
        else:
            version = (old.get("metadata") or {}).get("resourceVersion")
            replacement = {**item, "metadata": {**item["metadata"], "resourceVersion": version}}
            stored = client.replace(f"{SLICES_PATH}/{quote(name, safe='')}", replacement)
        if not taints_kept(item, stored):
            raise TaintsDropped(name)
    for name in by_name:
        if not may_write():
            raise NotPublishing()
        try:
            client.delete(f"{SLICES_PATH}/{quote(name, safe='')}")
        except ApiError as error:
            if error.status != NOT_FOUND:  # gone meanwhile is as good as deleted
                raise
