"""Which tokens of a driver's pools ResourceClaims hold allocated, kept from a watch.

ResourceClaims have no field selector that finds a driver's, so the cluster's claims are
listed once (in pages) at start and after a ``410 Gone``, then followed by a watch
(apiserver.connection.watching): a claim change costs one event, not a list of every claim. Only the
claims with a result of the driver are kept, each as its (pool, token index) pairs, so memory
grows with the driver's allocations, not with the cluster's claims.

The cache lives on the event loop; a sync reads it from its worker thread, under a lock.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any
from urllib.parse import urlencode

from token_resource.apiserver.connection.client import ApiClient, ApiError, KubeError
from token_resource.apiserver.connection.credentials import load_credentials
from token_resource.apiserver.connection.watching import (
    FIRST_RETRY_DELAY,
    MAX_RETRY_DELAY,
    Cursor,
    watch_until,
)
from token_resource.apiserver.objects.slices import API_VERSION
from token_resource.config.model import KubernetesSettings
from token_resource.config.names import token_index

log = logging.getLogger(__name__)

CLAIMS_PATH = f"/apis/{API_VERSION}/resourceclaims"
# Claims per page of the list (client-go's informers list 500 at a time).
PAGE_SIZE = 500

Held = frozenset[tuple[str, int]]  # (pool, token index) pairs


def held_by(claim: Mapping[str, Any], driver: str) -> Held:
    """The driver's tokens a claim holds allocated."""
    allocation = (claim.get("status") or {}).get("allocation") or {}
    held = set()
    for result in (allocation.get("devices") or {}).get("results") or []:
        if not isinstance(result, dict) or result.get("driver") != driver:
            continue
        index = token_index(str(result.get("device")))
        if index is not None:
            held.add((str(result.get("pool")), index))
    return frozenset(held)


def _key(claim: Mapping[str, Any]) -> str:
    metadata = claim.get("metadata") or {}
    return f"{metadata.get('namespace')}/{metadata.get('name')}"


class Allocations:
    """The driver's allocated tokens, from a list and a watch of ResourceClaims."""

    def __init__(self, settings: Callable[[], KubernetesSettings], driver: str) -> None:
        """``settings()``: the API access to use at each list and watch."""
        self._settings = settings
        self._driver = driver
        self._lock = threading.Lock()
        self._held: dict[str, Held] = {}  # claim (namespace/name) -> its tokens of the driver
        self._listed = threading.Event()  # set once a list has been read
        self._cursor = Cursor()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.ensure_future(self._keep())

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    def allocated(self, pools: Iterable[str]) -> dict[str, frozenset[int]] | None:
        """Pool -> its allocated tokens; None until the claims have been listed."""
        if not self._listed.is_set():
            return None
        wanted = set(pools)
        indices: dict[str, set[int]] = {pool: set() for pool in wanted}
        with self._lock:
            for held in self._held.values():
                for pool, index in held:
                    if pool in wanted:
                        indices[pool].add(index)
        return {pool: frozenset(found) for pool, found in indices.items()}

    def wait_listed(self, timeout: float) -> bool:
        """Blocking, for a worker thread: whether the claims were listed within ``timeout``."""
        return self._listed.wait(timeout)

    async def _keep(self) -> None:
        delay = FIRST_RETRY_DELAY
        never = asyncio.Event()  # the watch ends by close() only
        while True:
            try:
                held, self._cursor.version = await asyncio.to_thread(self._list)
                with self._lock:
                    self._held = held
                self._listed.set()
                reason = await watch_until(
                    self._settings(), CLAIMS_PATH, "", self._cursor, self._apply, never
                )
            except KubeError as error:
                self._failed(error, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, MAX_RETRY_DELAY)
                continue
            delay = FIRST_RETRY_DELAY
            log.info("resource claims: %s: listing them again", reason)

    def _failed(self, error: KubeError, delay: float) -> None:
        level = logging.WARNING if isinstance(error, ApiError) else logging.INFO
        log.log(level, "resource claims: cannot follow them, again in %g s: %s", delay, error)

    def _list(self) -> tuple[dict[str, Held], str]:
        """Every claim of the driver, page by page; the list's resourceVersion."""
        held: dict[str, Held] = {}
        page = {"limit": str(PAGE_SIZE)}
        with ApiClient(load_credentials(self._settings())) as client:
            while True:
                listing = client.get(f"{CLAIMS_PATH}?{urlencode(page)}")
                for claim in listing.get("items") or []:
                    tokens = held_by(claim, self._driver) if isinstance(claim, dict) else None
                    if tokens:
                        held[_key(claim)] = tokens
                metadata = listing.get("metadata") or {}
                if not metadata.get("continue"):
                    return held, str(metadata.get("resourceVersion", ""))
                page["continue"] = str(metadata["continue"])

    def _apply(self, event: Mapping[str, Any]) -> None:
        claim = event.get("object") or {}
        tokens = frozenset() if event.get("type") == "DELETED" else held_by(claim, self._driver)
        with self._lock:
            if tokens:
                self._held[_key(claim)] = tokens
            else:
                self._held.pop(_key(claim), None)
