"""The agent's calls on its Node: read it, patch its status capacity, and keep the annotation
that lists which extended resources are the agent's."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any
from urllib.parse import quote, urlencode

from token_resource.apiserver.connection.client import UNPROCESSABLE, ApiClient, ApiError, KubeError
from token_resource.config.names import resource_name_problem

# The extended resources the agent put on its Node, as node-feature-discovery keeps its own in
# nfd.node.kubernetes.io/extended-resources: comma-separated, sorted. An annotation because
# NodeRestriction lets a node identity change its own Node's annotations freely (it restricts
# only labels under kubernetes.io, k8s.io and node-restriction.kubernetes.io, and taints:
# plugin/pkg/admission/noderestriction/admission.go, admitNode), so the kubelet's credentials
# suffice.
OWNED_ANNOTATION = "token-resource/extended-resources"


_QUANTITY = re.compile(r"([+-]?(?:\d+\.?\d*|\.\d+))(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?\d+)?")
_SUFFIXES = {
    **{
        suffix: Decimal(1024) ** power
        for power, suffix in enumerate(("", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"))
    },
    **{"n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3")},
    **{suffix: Decimal(1000) ** power for power, suffix in enumerate("kMGTPE", start=1)},
}


def quantity_value(text: object) -> Decimal | None:
    """A Kubernetes quantity's value ("1k" and "1000" are equal), or None if it is not one.

    The API server stores quantities in canonical form, so "1000" written comes back as "1k":
    comparing strings would make the agent patch the same value forever.
    """
    match = _QUANTITY.fullmatch(text) if isinstance(text, str) else None
    if match is None:
        return None
    number, suffix = Decimal(match[1]), match[2] or ""
    if suffix[:1] in ("e", "E"):
        return number.scaleb(int(suffix[1:]))
    return number * _SUFFIXES[suffix]


def escape_json_pointer(name: str) -> str:
    """RFC 6901: "example.com/dongle" -> "example.com~1dongle"."""
    return name.replace("~", "~0").replace("/", "~1")


def capacity_path(name: str) -> str:
    return f"/status/capacity/{escape_json_pointer(name)}"


_OWNED_PATH = f"/metadata/annotations/{escape_json_pointer(OWNED_ANNOTATION)}"


@dataclass(frozen=True)
class Ownership:
    """The agent's annotation on a Node as read: which extended resources are the agent's.

    The annotation lives in the Node's metadata and the capacity in its status, two requests
    apart, so the agent orders them to never lose track of a resource: a name is added to the
    annotation before its capacity, and its capacity removed before the name. A crash between
    the two leaves a listed name without capacity, which the next sync adds or forgets.
    """

    names: frozenset[str]
    value: str | None  # the annotation as read; None if the Node has none
    has_annotations: bool  # whether metadata.annotations exists at all
    resource_version: str

    @classmethod
    def of(cls, node: Mapping[str, Any]) -> Ownership:
        metadata = node.get("metadata") or {}
        annotations = metadata.get("annotations")
        value = annotations.get(OWNED_ANNOTATION) if isinstance(annotations, dict) else None
        listed = value.split(",") if isinstance(value, str) else []
        # Only extended resource names: a hand-edited "cpu" here must never cost the Node its CPUs.
        names = frozenset(
            name for name in (n.strip() for n in listed) if resource_name_problem(name) is None
        )
        return cls(
            names,
            value if isinstance(value, str) else None,
            isinstance(annotations, dict),
            str(metadata.get("resourceVersion", "")),
        )

    def change_to(self, names: frozenset[str]) -> list[dict[str, Any]]:
        """A JSON patch of the Node (not its status) that lists exactly ``names``, or [].

        It applies only to the annotation as read (a "test" op; the resourceVersion where there
        was none), so a concurrent writer's list is never overwritten unseen: the API server
        refuses the patch and the next sync starts over from a fresh read.
        """
        value = ",".join(sorted(names))
        if self.value is not None:
            guard = {"op": "test", "path": _OWNED_PATH, "value": self.value}
            if not names:
                return [guard, {"op": "remove", "path": _OWNED_PATH}]
            return [guard, {"op": "replace", "path": _OWNED_PATH, "value": value}]
        if not names:
            return []
        guard = {"op": "test", "path": "/metadata/resourceVersion", "value": self.resource_version}
        if self.has_annotations:
            return [guard, {"op": "add", "path": _OWNED_PATH, "value": value}]
        return [
            guard,
            {"op": "add", "path": "/metadata/annotations", "value": {OWNED_ANNOTATION: value}},
        ]


class NodeClient(ApiClient):
    def get_node(self, name: str) -> dict[str, Any]:
        return self.get(_node_path(name))

    def list_node(self, name: str) -> tuple[dict[str, Any], str]:
        """The Node, listed by its name (the one list the Node authorizer allows a node), and
        the list's resourceVersion: the API server's now, which a watch can start from. The
        Node's own version may be older than the API server's watch cache keeps when other
        Nodes change often (a watch from it: 410 at once, seen at 300 Nodes)."""
        listing = self.get(f"{NODES_PATH}?{urlencode({'fieldSelector': f'metadata.name={name}'})}")
        items = [item for item in listing.get("items") or [] if isinstance(item, dict)]
        if not items:  # as a GET of it answers
            raise ApiError(404, "Not Found", f'nodes "{name}" not found')
        return items[0], str((listing.get("metadata") or {}).get("resourceVersion", ""))

    def patch_node(self, name: str, operations: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """Apply an RFC 6902 JSON patch to the Node: metadata and spec (status is ignored)."""
        return self.json_patch(_node_path(name), operations)

    def list_as_owned(
        self, name: str, ownership: Ownership, names: frozenset[str]
    ) -> dict[str, Any]:
        """Make the Node's annotation list ``names``, if it is still as read; the Node now."""
        try:
            return self.patch_node(name, ownership.change_to(names))
        except ApiError as error:
            if error.status != UNPROCESSABLE:
                raise
            # The API server keeps its reason for a failed "test" op to itself.
            raise KubeError(
                f"{OWNED_ANNOTATION} changed after it was read (another writer?): {error}"
            ) from None

    def patch_node_status(
        self, name: str, operations: Sequence[Mapping[str, Any]]
    ) -> dict[str, Any]:
        """Apply an RFC 6902 JSON patch to the Node's status subresource."""
        return self.json_patch(f"{_node_path(name)}/status", operations)


NODES_PATH = "/api/v1/nodes"


def _node_path(name: str) -> str:
    return f"{NODES_PATH}/{quote(name, safe='')}"


_KUBELET_VERSION = re.compile(r"v?(\d+)\.(\d+)(?:\.\d+)?(?:[-+].*)?")


def kubelet_version(client: ApiClient, name: str) -> tuple[str, tuple[int, int] | None]:
    """What the Node's kubelet says it is (``status.nodeInfo.kubeletVersion``, "v1.36.2") and
    its (major, minor), None when that is not a version. KubeError if the Node cannot be read."""
    node = client.get(_node_path(name))
    text = str(((node.get("status") or {}).get("nodeInfo") or {}).get("kubeletVersion") or "")
    match = _KUBELET_VERSION.fullmatch(text)
    return text, None if match is None else (int(match[1]), int(match[2]))
