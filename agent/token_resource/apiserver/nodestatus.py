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

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from token_resource.apiserver.credentials import load_credentials, node_name
from token_resource.apiserver.keeper import Keeper
from token_resource.apiserver.node import NodeClient, Ownership, capacity_path, quantity_value
from token_resource.config.model import KubernetesSettings

log = logging.getLogger(__name__)


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
        sync_node(*wanted)

    async def _quiet(self, wanted: _Wanted) -> None:
        settings, desired = wanted
        # With nothing desired, the Node lists nothing of the agent's any more.
        await self._wait_for_wake(settings.resync_seconds if desired else None)


def sync_node(settings: KubernetesSettings, desired: Mapping[str, int]) -> None:
    """Read the Node, then patch what differs from ``desired``. Blocking (the agent runs it
    in a worker thread); KubeError if the API server cannot be used or refuses.

    Up to three writes, in the order that never leaves the agent's capacity unlisted (see
    kube.Ownership): list the new names, patch the capacity, drop the names of what is gone.
    """
    with NodeClient(load_credentials(settings)) as client:
        _sync_node(client, node_name(settings), desired)


def _sync_node(client: NodeClient, node: str, desired: Mapping[str, int]) -> None:
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
