"""The Node object and its ``status`` subresource (see the package's docstring for the rules).

A mixin of :class:`~tests.standin.apiserver.server.ApiServerStandin`: its state lives there,
under its lock.
"""

from __future__ import annotations

import copy
import datetime
import json
import re
import uuid
from collections.abc import Mapping
from typing import Any
from urllib.parse import parse_qsl, unquote

from tests.standin.apiserver.authz import Authorizer, node_identity
from tests.standin.apiserver.core import StandinCore
from tests.standin.apiserver.patches import apply_patch, patch_type_of
from tests.standin.apiserver.quantities import canonical_quantity
from tests.standin.apiserver.watch import (
    Change,
    exact_name,
    matches,
    parse_field_selector,
    watch_from_params,
)
from tests.standin.apiserver.wire import Fail, Identity, Reply, fail
from tests.standin.kubelet import is_extended_resource_name

DEFAULT_CAPACITY: Mapping[str, str] = {"cpu": "4", "memory": "8Gi", "pods": "110"}
# What a node of the Kubernetes release the project was last checked against reports.
KUBELET_VERSION = "v1.36.2"
NODE_PATH = re.compile(r"/api/v1/nodes/(?P<name>[^/]+)(?P<status>/status)?")
NODES_PATH = "/api/v1/nodes"
# What NodeRestriction lets a node set among the kubernetes.io and k8s.io labels of its Node:
# the kubelet's own labels and those under its namespaces (k8s.io/kubelet/pkg/apis).
_KUBELET_LABELS = frozenset(
    {
        "kubernetes.io/hostname",
        "kubernetes.io/os",
        "kubernetes.io/arch",
        "beta.kubernetes.io/os",
        "beta.kubernetes.io/arch",
        "beta.kubernetes.io/instance-type",
        "node.kubernetes.io/instance-type",
        "topology.kubernetes.io/zone",
        "topology.kubernetes.io/region",
        "failure-domain.beta.kubernetes.io/zone",
        "failure-domain.beta.kubernetes.io/region",
    }
)
_KUBELET_LABEL_NAMESPACES = ("kubelet.kubernetes.io", "node.kubernetes.io")
_NODE_RESTRICTION_NAMESPACE = "node-restriction.kubernetes.io"


class NodesMixin(StandinCore):
    """Nodes: the test hooks, the routes under ``/api/v1/nodes`` and the kubelet's status sync."""

    _nodes: dict[str, dict[str, Any]]
    _kubelet_sync: bool
    authorizer: Authorizer

    # --- test hooks ------------------------------------------------------------------------

    def add_node(
        self,
        name: str,
        capacity: Mapping[str, str] | None = None,
        kubelet_version: str = KUBELET_VERSION,
    ) -> None:
        """Register a Node (or re-create it: a new uid, only the given capacity), as a kubelet
        of ``kubelet_version`` does."""
        with self._cond:
            self._store(new_node(name, capacity, kubelet_version))
            self._changed(f"node {name} created")

    def delete_node(self, name: str) -> None:
        with self._cond:
            node = self._nodes.pop(name)
            revision = self._next_revision()
            node["metadata"]["resourceVersion"] = revision
            self._history.add(Change(int(revision), "nodes", "DELETED", node, None))
            self._changed(f"node {name} deleted")

    def reset_capacity(self, name: str, *, to_zero: bool = False) -> None:
        """Drop (or set to "0") every extended resource in capacity and allocatable, behind
        the agent's back, as a kubelet restart or a re-created Node may."""
        with self._cond:
            node = self._node(name)
            for field_name in ("capacity", "allocatable"):
                resources = node["status"].setdefault(field_name, {})
                for resource in [r for r in resources if is_extended_resource_name(r)]:
                    if to_zero:
                        resources[resource] = "0"
                    else:
                        del resources[resource]
            self._store(node)
            self._changed(f"node {name}: extended resources reset")

    def set_capacity(self, name: str, resource: str, value: str | None) -> None:
        """Set (None: remove) one capacity entry behind the agent's back; allocatable
        follows at the kubelet's sync."""
        with self._cond:
            node = self._node(name)
            capacity = node["status"].setdefault("capacity", {})
            if value is None:
                capacity.pop(resource, None)
            else:
                capacity[resource] = value
            self._store(node)
            self._changed(f"node {name}: capacity {resource} set to {value}")
            if self._kubelet_sync:
                self._sync(name)

    def sync(self, name: str | None = None) -> None:
        """The kubelet's node-status sync for one node (every node if None)."""
        with self._cond:
            for node in [name] if name is not None else list(self._nodes):
                self._sync(node)

    def node(self, name: str) -> dict[str, Any]:
        """A deep copy of the Node; KeyError if there is none."""
        with self._cond:
            return copy.deepcopy(self._nodes[name])

    # --- serving (caller holds the lock) ----------------------------------------------------

    def _route_nodes(self, method: str, query: str, identity: Identity) -> Reply:
        """``GET /api/v1/nodes``: a list, or with ``watch=true`` a watch (watch.py); a node
        identity only of its own Node, by the ``metadata.name`` field selector (the Node
        authorizer takes the name from it, as the request info does)."""
        if method != "GET":
            raise fail(405, "MethodNotAllowed", "the server does not allow this method", {})
        params = dict(parse_qsl(query))
        verb = "watch" if params.get("watch") in ("true", "1") else "list"
        selector = parse_field_selector("nodes", params.get("fieldSelector", ""))
        self.authorizer.authorize_node(identity, verb, "nodes", exact_name(selector))

        def current() -> list[dict[str, Any]]:
            return [copy.deepcopy(n) for n in self._nodes.values() if matches(n, selector)]

        if verb == "watch":
            stream = watch_from_params(
                params,
                self._cond,
                self._history,
                "nodes",
                current,
                self._current_revision,
                self._serving,
                selector,
            )
            return Reply(200, {}, stream=stream)
        items = current()
        for item in items:
            item.pop("apiVersion", None)
            item.pop("kind", None)
        listing = {
            "kind": "NodeList",
            "apiVersion": "v1",
            "metadata": {"resourceVersion": str(self._current_revision())},
            "items": items,
        }
        return Reply(200, listing)

    def _route_node(
        self,
        method: str,
        path: str,
        content_type: str | None,
        body: bytes,
        identity: Identity,
    ) -> Reply:
        match = NODE_PATH.fullmatch(path)
        assert match is not None  # routed here by the path
        name, status = unquote(match["name"]), bool(match["status"])
        resource = "nodes/status" if status else "nodes"
        if method not in ("GET", "PATCH"):
            raise fail(
                405,
                "MethodNotAllowed",
                "the server does not allow this method on the requested resource",
                {},
            )
        self.authorizer.authorize_node(identity, method.lower(), resource, name)
        if method == "GET":
            return Reply(200, copy.deepcopy(self._node(name)))
        patch_type = patch_type_of(content_type)
        current = self._node(name)
        patched = apply_patch(patch_type, current, body)
        updated = copy.deepcopy(current)
        metadata = patched.get("metadata")
        metadata = metadata if isinstance(metadata, dict) else {}
        if status:
            updated["status"] = _validated_status(name, patched.get("status"))
        else:
            for key in ("labels", "annotations"):
                _set_or_drop(updated["metadata"], key, _string_map(name, key, metadata.get(key)))
            updated["spec"] = patched.get("spec") if isinstance(patched.get("spec"), dict) else {}
            if node_identity(identity) == name:
                _admit_own_node_update(name, current, updated)
        wanted_version = metadata.get("resourceVersion")
        if wanted_version not in (None, current["metadata"]["resourceVersion"]):
            raise fail(
                409,
                "Conflict",
                f'Operation cannot be fulfilled on nodes "{name}": the object has been '
                "modified; please apply your changes to the latest version and try again",
                {"name": name, "kind": "nodes"},
            )
        if updated == current:  # a no-op: no new resourceVersion, as on the real server
            return Reply(200, current)
        self._store(updated)
        self._changed(f"node {name}: {resource} patched")
        if status and self._kubelet_sync:
            self._sync(name)
        return Reply(200, copy.deepcopy(updated))

    # --- state (caller holds the lock) -----------------------------------------------------

    def _node(self, name: str) -> dict[str, Any]:
        """A deep copy of the stored Node; 404 if there is none."""
        try:
            return copy.deepcopy(self._nodes[name])
        except KeyError:
            raise _not_found(name) from None

    def _store(self, node: dict[str, Any]) -> None:
        revision = node["metadata"]["resourceVersion"] = self._next_revision()
        name = node["metadata"]["name"]
        old = self._nodes.get(name)
        change = "ADDED" if old is None else "MODIFIED"
        self._history.add(Change(int(revision), "nodes", change, copy.deepcopy(node), old))
        self._nodes[name] = node

    def _sync(self, name: str) -> None:
        """The kubelet's MachineInfo setter: allocatable follows capacity for extended
        resources; extended resources no longer in capacity leave allocatable."""
        node = self._node(name)
        capacity = node["status"].get("capacity") or {}
        allocatable = node["status"].setdefault("allocatable", {})
        for resource in list(allocatable):
            if resource not in capacity and is_extended_resource_name(resource):
                del allocatable[resource]
        for resource, value in capacity.items():
            if is_extended_resource_name(resource):
                allocatable[resource] = value
        if node != self._nodes[name]:
            self._store(node)
            self._changed(f"node {name}: kubelet synced allocatable {allocatable}")


def node_of(path: str) -> str | None:
    match = NODE_PATH.fullmatch(path)
    return unquote(match["name"]) if match else None


def _admit_own_node_update(
    name: str, current: Mapping[str, Any], updated: Mapping[str, Any]
) -> None:
    """NodeRestriction's rules for a node updating its own Node (``admitNode``, Update)."""
    if current["spec"].get("taints") != updated["spec"].get("taints"):
        raise _forbidden(name, f'node "{name}" is not allowed to modify taints')
    before = current["metadata"].get("labels") or {}
    after = updated["metadata"].get("labels") or {}
    modified = {key for key in before.keys() | after.keys() if before.get(key) != after.get(key)}
    forbidden = sorted(key for key in modified if _is_forbidden_node_label(key))
    if forbidden:
        raise _forbidden(name, f"is not allowed to modify labels: {', '.join(forbidden)}")


def _is_forbidden_node_label(key: str) -> bool:
    namespace = key.partition("/")[0] if "/" in key else ""

    def within(domain: str) -> bool:
        return namespace == domain or namespace.endswith(f".{domain}")

    if within(_NODE_RESTRICTION_NAMESPACE):
        return True
    kubelet_label = key in _KUBELET_LABELS or any(map(within, _KUBELET_LABEL_NAMESPACES))
    return (within("kubernetes.io") or within("k8s.io")) and not kubelet_label


def _forbidden(name: str, reason: str) -> Fail:
    """admission.NewForbidden's answer for a Node."""
    return fail(
        403, "Forbidden", f'nodes "{name}" is forbidden: {reason}', {"name": name, "kind": "nodes"}
    )


def new_node(
    name: str, capacity: Mapping[str, str] | None = None, kubelet_version: str = KUBELET_VERSION
) -> dict[str, Any]:
    """A Node as a freshly registered kubelet leaves it (allocatable = capacity)."""
    capacity = dict(DEFAULT_CAPACITY if capacity is None else capacity)
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "kind": "Node",
        "apiVersion": "v1",
        "metadata": {
            "name": name,
            "uid": str(uuid.uuid4()),
            "resourceVersion": "0",
            "creationTimestamp": now,
            "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux"},
        },
        "spec": {},
        "status": {
            "capacity": capacity,
            "allocatable": dict(capacity),
            "nodeInfo": {"kubeletVersion": kubelet_version, "operatingSystem": "linux"},
        },
    }


def _not_found(name: str) -> Fail:
    return fail(404, "NotFound", f'nodes "{name}" not found', {"name": name, "kind": "nodes"})


def _invalid(name: str, path: str, value: object, detail: str) -> Fail:
    """What field validation answers (``Node "a" is invalid: ...``)."""
    shown = value if isinstance(value, str) else json.dumps(value)
    cause = f"Invalid value: {json.dumps(shown)}: {detail}"
    return fail(
        422,
        "Invalid",
        f'Node "{name}" is invalid: {path}: {cause}',
        {
            "name": name,
            "kind": "Node",
            "causes": [{"reason": "FieldValueInvalid", "message": cause, "field": path}],
        },
    )


def _validated_status(name: str, status: Any) -> dict[str, Any]:
    """Decode and validate ``status`` as the server would, quantities made canonical."""
    if status is None:
        return {}
    if not isinstance(status, dict):
        raise _invalid(name, "status", status, "must be an object")
    result: dict[str, Any] = copy.deepcopy(status)
    for field_name in ("capacity", "allocatable"):
        resources = result.get(field_name)
        if resources is None:
            result.pop(field_name, None)
            continue
        if not isinstance(resources, dict):
            raise _invalid(name, f"status.{field_name}", resources, "must be a map")
        for resource, value in resources.items():
            where = f"status.{field_name}[{resource}]"
            quantity = canonical_quantity(value)
            if quantity is None:
                raise _invalid(
                    name,
                    where,
                    value,
                    "quantities must match the regular expression "
                    "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'",
                )
            if quantity.startswith("-"):
                raise _invalid(name, where, quantity, "must be greater than or equal to 0")
            if is_extended_resource_name(resource) and not _is_whole(quantity):
                raise _invalid(name, where, quantity, "must be an integer")
            resources[resource] = quantity
    return result


def _is_whole(quantity: str) -> bool:
    """Canonical quantities end in n, u or m exactly when they have a fraction."""
    return not quantity.endswith(("n", "u", "m")) and "e-" not in quantity


def _string_map(name: str, key: str, value: Any) -> dict[str, str] | None:
    if value is None:
        return None
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise _invalid(name, f"metadata.{key}", value, "must be a map of strings")
    return dict(value)


def _set_or_drop(target: dict[str, Any], key: str, value: object) -> None:
    if value is None:
        target.pop(key, None)
    else:
        target[key] = value
