"""Node-status resources: extended resources written into the Node's status, kept true.

Each sync reads the Node and JSON-patches ``status.capacity`` wherever it differs from the
configuration (the kubelet or a re-created Node object may have dropped the values). The
Node's own annotation (kube.OWNED_ANNOTATION) lists the resources the agent put there, so a
resource taken out of the configuration is removed even if that happened while the agent was
stopped, and an extended resource the agent never listed (another tool's) is never touched.
A sync runs at start, after every config change and every ``resync_seconds``; an
unreachable API server is retried with backoff, in its own task, so device-plugin resources
never wait for it. Stopping the agent leaves the capacity in place: an upgrade or restart
must not take tokens away from a node.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from token_resource.apiserver.client import KubeError
from token_resource.apiserver.credentials import load_credentials, node_name
from token_resource.apiserver.node import NodeClient, Ownership, capacity_path, quantity_value
from token_resource.config.model import KubernetesSettings

log = logging.getLogger(__name__)

FIRST_RETRY_DELAY = 1.0
MAX_RETRY_DELAY = 60.0

PENDING, ACCEPTED, FAILING = "pending", "accepted", "failing"


@dataclass(frozen=True)
class NodeStatusState:
    node: str
    desired: Mapping[str, int]
    state: str  # pending, accepted or failing
    reason: str | None = None


class NodeStatusAdvertiser:
    def __init__(self, settings: KubernetesSettings, on_change: Callable[[], None]) -> None:
        self._settings = settings
        self._on_change = on_change
        self._desired: dict[str, int] = {}
        self._state = PENDING
        self._reason: str | None = None
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def apply(self, settings: KubernetesSettings, desired: Mapping[str, int]) -> None:
        """Make the Node hold ``desired``, and remove the agent's other resources from it.

        The first call syncs even with nothing desired: the Node may list resources taken
        out of the configuration while the agent was stopped.
        """
        if self._task is not None and (settings, desired) == (self._settings, self._desired):
            return
        self._settings, self._desired = settings, dict(desired)
        self._state, self._reason = PENDING, None
        if self._task is None:
            self._task = asyncio.ensure_future(self._keep_true())
        self._wake.set()

    def state(self) -> NodeStatusState:
        return NodeStatusState(
            node_name(self._settings), dict(self._desired), self._state, self._reason
        )

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _keep_true(self) -> None:
        delay = FIRST_RETRY_DELAY
        while True:
            self._wake.clear()
            # A snapshot: apply() may change the advertiser's own copies meanwhile.
            settings, desired = self._settings, dict(self._desired)
            wait: float | None
            try:
                await asyncio.to_thread(sync_node, settings, desired)
            except KubeError as error:
                self._failed(str(error), delay)
                wait, delay = delay, min(delay * 2, MAX_RETRY_DELAY)
            else:
                self._succeeded()
                delay = FIRST_RETRY_DELAY
                # With nothing desired, the Node lists nothing of the agent's any more.
                wait = settings.resync_seconds if desired else None
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._wake.wait(), wait)

    def _failed(self, reason: str, retry_in: float) -> None:
        if (self._state, self._reason) != (FAILING, reason):
            log.warning("node status not applied, retrying in %g s and later: %s", retry_in, reason)
        self._state, self._reason = FAILING, reason
        self._on_change()

    def _succeeded(self) -> None:
        if self._state != ACCEPTED:
            self._state, self._reason = ACCEPTED, None
            self._on_change()


def sync_node(settings: KubernetesSettings, desired: Mapping[str, int]) -> None:
    """Read the Node, then patch what differs from ``desired``. Blocking (the agent runs it
    in a worker thread); KubeError if the API server cannot be used or refuses.

    Up to three writes, in the order that never leaves the agent's capacity unlisted (see
    kube.Ownership): list the new names, patch the capacity, drop the names of what is gone.
    """
    node = node_name(settings)
    client = NodeClient(load_credentials(settings))
    current = client.get_node(node)
    ownership = Ownership.of(current)
    wanted = frozenset(desired)
    if not wanted <= ownership.names:
        current = client.list_as_owned(node, ownership, ownership.names | wanted)
        ownership = Ownership.of(current)
    capacity = current.get("status", {}).get("capacity", {})
    operations: list[dict[str, str]] = []
    for name, count in sorted(desired.items()):
        if quantity_value(capacity.get(name)) != count:
            # "add" replaces an existing member (RFC 6902).
            operations.append({"op": "add", "path": capacity_path(name), "value": str(count)})
            log.info("node %s: %s %s → %d", node, name, capacity.get(name, "absent"), count)
    for name in sorted(ownership.names - wanted):
        if name in capacity:
            operations.append({"op": "remove", "path": capacity_path(name)})
            log.info("node %s: %s removed (no longer configured)", node, name)
    if operations:
        client.patch_node_status(node, operations)
    if ownership.names - wanted:
        client.list_as_owned(node, ownership, wanted)
