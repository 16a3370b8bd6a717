"""Node-status resources: extended resources written into the Node's status, kept true.

Each sync reads the Node and JSON-patches ``status.capacity`` wherever it differs from the
configuration (the kubelet or a re-created Node object may have dropped the values). Between
syncs the agent watches its Node (connection.watching, by ``metadata.name``, the one watch of
Nodes a node identity may make) and syncs again only when a change leaves it differing. The
Node's own annotation (objects.node.OWNED_ANNOTATION) lists the resources the agent put there,
so a resource taken out of the configuration is removed even if that happened while the agent was
stopped, and an extended resource the agent never listed (another tool's) is never touched.
A sync runs at start, after every config change and whenever the watch shows the Node
differing (or gone, or its watch's version gone); an unreachable API server is retried with
backoff, in its own task, so device-plugin resources never wait for it. An account that may
not watch Nodes (an older ClusterRole) gets one warning and the Node read every
``resync_seconds`` instead. Stopping the agent leaves the capacity in place: an upgrade or restart
must not take tokens away from a node.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from token_resource.apiserver.connection.client import ApiError
from token_resource.apiserver.connection.credentials import load_credentials, node_name
from token_resource.apiserver.connection.watching import Cursor, watch_until
from token_resource.apiserver.keeping.keeper import Keeper
from token_resource.apiserver.objects.node import (
    NODES_PATH,
    NodeClient,
    Ownership,
    capacity_path,
    quantity_value,
)
from token_resource.config.model import KubernetesSettings

log = logging.getLogger(__name__)

FORBIDDEN = 403


@dataclass(frozen=True)
class NodeStatusState:
    node: str
    desired: Mapping[str, int]
    state: str  # pending, accepted or failing
    reason: str | None = None


_Wanted = tuple[KubernetesSettings, Mapping[str, int]]


class NodeStatusAdvertiser(Keeper[_Wanted]):
    def __init__(self, settings: KubernetesSettings, on_change: Callable[[], None]) -> None:
        super().__init__("node status", (settings, {}), on_change)
        # Where the watch of the Node goes on: the last sync's Node, then each event.
        self._cursor = Cursor()
        self._watch_refused = False

    def apply(self, settings: KubernetesSettings, desired: Mapping[str, int]) -> None:
        """Make the Node hold ``desired``, and remove the agent's other resources from it.

        The first call syncs even with nothing desired: the Node may list resources taken
        out of the configuration while the agent was stopped.
        """
        self.want((settings, dict(desired)))

    def state_of_node(self) -> NodeStatusState:
        settings, desired = self.wanted
        return NodeStatusState(node_name(settings), dict(desired), self.state, self.reason)

    def _sync(self, wanted: _Wanted) -> None:
        self._cursor.version = sync_node(*wanted)

    async def _quiet(self, wanted: _Wanted) -> None:
        settings, desired = wanted
        if not desired:  # the Node lists nothing of the agent's any more
            await self._wait_for_wake(None)
            return
        if self._watch_refused:
            await self._wait_for_wake(settings.resync_seconds)
            return
        node = node_name(settings)
        try:
            reason = await watch_until(
                settings,
                NODES_PATH,
                f"metadata.name={node}",
                self._cursor,
                lambda event: _difference(event, desired),
                self._wake,
            )
        except ApiError as error:
            self._watch_refused = True
            log.warning(
                "node %s: cannot watch it (%s): reading it every %g s instead; let the agent "
                "list and watch nodes",
                node,
                error,
                settings.resync_seconds,
            )
            return
        if reason:
            log.info("node %s: %s: putting it right", node, reason)


def _difference(event: Mapping[str, Any], desired: Mapping[str, int]) -> str | None:
    """Why the Node of a watch event needs a sync, if it does."""
    if event.get("type") == "DELETED":
        return "deleted"
    node = event.get("object") or {}
    ownership = Ownership.of(node)
    if not frozenset(desired) <= ownership.names:
        return "the annotation lacks some of the agent's resources"
    changes = _capacity_changes(node, desired, ownership)
    return f"{', '.join(name for name, _ in changes)} differ(s)" if changes else None


def sync_node(settings: KubernetesSettings, desired: Mapping[str, int]) -> str:
    """Read the Node, then patch what differs from ``desired``; the resourceVersion to watch
    it from (its last write's, else the list's). Blocking (the agent runs it in a worker
    thread); KubeError if the API server cannot be used or refuses.

    Up to three writes, in the order that never leaves the agent's capacity unlisted (see
    objects.node.Ownership): list the new names, patch the capacity, drop the names of what is gone.
    """
    with NodeClient(load_credentials(settings)) as client:
        return _sync_node(client, node_name(settings), desired)


def _sync_node(client: NodeClient, node: str, desired: Mapping[str, int]) -> str:
    try:
        current, listed = client.list_node(node)
    except ApiError as error:
        if error.status != FORBIDDEN:
            raise
        # An older ClusterRole (get, no list or watch): read it, and be read again each resync.
        current = client.get_node(node)
        listed = str((current.get("metadata") or {}).get("resourceVersion", ""))
    wrote = False
    ownership = Ownership.of(current)
    wanted = frozenset(desired)
    if not wanted <= ownership.names:
        current = client.list_as_owned(node, ownership, ownership.names | wanted)
        ownership, wrote = Ownership.of(current), True
    changes = _capacity_changes(current, desired, ownership)
    capacity = current.get("status", {}).get("capacity", {})
    for name, operation in changes:
        if operation["op"] == "add":
            log.info("node %s: %s %s → %s", node, name, capacity.get(name, "absent"), desired[name])
        else:
            log.info("node %s: %s removed (no longer configured)", node, name)
    if changes:
        current = client.patch_node_status(node, [operation for _, operation in changes])
        wrote = True
    if ownership.names - wanted:
        current = client.list_as_owned(node, ownership, wanted)
        wrote = True
    # Watched from the last write (the Node's newest version) or from the list.
    return str((current.get("metadata") or {}).get("resourceVersion", "")) if wrote else listed


def _capacity_changes(
    node: Mapping[str, Any], desired: Mapping[str, int], ownership: Ownership
) -> list[tuple[str, dict[str, str]]]:
    """The resources whose capacity differs, each with the JSON patch operation that makes the
    Node hold ``desired`` and none of the agent's other resources."""
    capacity = (node.get("status") or {}).get("capacity") or {}
    changes = [
        # "add" replaces an existing member (RFC 6902).
        (name, {"op": "add", "path": capacity_path(name), "value": str(count)})
        for name, count in sorted(desired.items())
        if quantity_value(capacity.get(name)) != count
    ]
    changes += [
        (name, {"op": "remove", "path": capacity_path(name)})
        for name in sorted(ownership.names - frozenset(desired))
        if name in capacity
    ]
    return changes
