"""Authorization of resource.k8s.io requests, and NodeRestriction's admission of slices (a
mixin of :class:`~tests.standin.apiserver.resources.ResourcesMixin`, whose objects and pods
make the Node authorizer's graph).

Authorization, after authentication, before anything else (so a node asking for a slice that
does not exist gets 403, not 404):

- A node identity, as the Node authorizer (node_authorizer.go, ``authorizeResourceSlice``,
  ``authorizeGet``; graph.go ``AddPod``, ``AddResourceSlice``) and NodeRestriction
  (admission.go, ``admitResourceSlice``) decide: create any slice, but NodeRestriction refuses
  one whose ``spec.nodeName`` is not the node, a cluster-scoped one (``allNodes``,
  ``nodeSelector``) included ("can only create ResourceSlice with the same NodeName as the
  requesting node"; "can only delete ..." for each object a deletecollection would delete;
  updates are the Node authorizer's alone); get, update, patch, delete a slice only if the
  stored one has ``spec.nodeName`` = the node ("no relationship found between node '<n>' and
  this object"); list, watch, deletecollection only with a field selector requirement
  ``spec.nodeName=<node>`` ("can only list/watch/deletecollection resourceslices with nodeName
  field selector", AuthorizeNodeWithSelectors, on by default since 1.32); no subresources. A
  slice cannot move to another node: ``spec.nodeName`` (like ``driver`` and ``pool.name``) is
  immutable (422). Claims: get only, and only those referenced by a pod bound to the node,
  through ``spec.resourceClaims[].resourceClaimName`` or ``status.extendedResourceClaimStatus``
  (the graph does not require the claim to exist: such a get is 404). DeviceClasses: nothing
  (the node's static rules have none).
- Anyone else: RBAC (authz.py).
"""

from __future__ import annotations

from typing import Any

from tests.standin.apiserver.authz import RESOURCE_GROUP, Authorizer, forbidden, node_identity
from tests.standin.apiserver.watch import Requirement
from tests.standin.apiserver.wire import Identity, fail

_NO_RELATIONSHIP = "no relationship found between node '{}' and this object"


class ResourceAuthorizationMixin:
    """The Node authorizer over the objects' graph, then RBAC; NodeRestriction for slices."""

    authorizer: Authorizer
    _objects: dict[str, dict[str, dict[str, Any]]]  # collection -> key -> object
    _pods: dict[str, dict[str, Any]]  # "<namespace>/<name>" -> Pod

    def _authorize_resource(
        self,
        identity: Identity,
        verb: str,
        resource: str,
        name: str,
        namespace: str,
        selector: tuple[Requirement, ...],
    ) -> None:
        node = node_identity(identity)
        reason = ""
        if node is not None and resource.startswith("resourceslices"):
            reason = self._node_slice_decision(node, verb, resource, name, selector)
            if not reason:
                return
        elif node is not None and resource.startswith("resourceclaims"):
            reason = self._node_claim_decision(node, verb, resource, name, namespace)
            if not reason:
                return
        if self.authorizer.rbac_allows(identity, verb, RESOURCE_GROUP, resource, name):
            return
        raise forbidden(identity, verb, RESOURCE_GROUP, resource, name, namespace, reason)

    def _node_slice_decision(
        self,
        node: str,
        verb: str,
        resource: str,
        name: str,
        selector: tuple[Requirement, ...],
    ) -> str:
        """authorizeResourceSlice: "" to allow, else the Node authorizer's reason."""
        if "/" in resource:
            return "cannot authorize ResourceSlice subresources"
        if verb == "create":  # NodeRestriction checks the object (_admit_slice)
            return ""
        if verb in ("get", "update", "patch", "delete"):
            stored = self._objects["resourceslices"].get(name)
            if stored is not None and (stored.get("spec") or {}).get("nodeName") == node:
                return ""
            return _NO_RELATIONSHIP.format(node)
        if ("spec.nodeName", "=", node) in selector:
            return ""
        return "can only list/watch/deletecollection resourceslices with nodeName field selector"

    def _node_claim_decision(
        self, node: str, verb: str, resource: str, name: str, namespace: str
    ) -> str:
        """authorizeGet over the graph pod -> claim: "" to allow, else the reason."""
        if verb != "get":
            return "can only get individual resources of this type"
        if "/" in resource:
            return "cannot get subresource"
        for pod in self._pods.values():
            bound = pod["spec"].get("nodeName") == node
            if bound and pod["metadata"]["namespace"] == namespace and name in _claims_of(pod):
                return ""
        return _NO_RELATIONSHIP.format(node)

    def _admit_slice(
        self, identity: Identity, operation: str, collection: str, obj: dict[str, Any]
    ) -> None:
        """NodeRestriction's admitResourceSlice (create and each deleted object)."""
        node = node_identity(identity)
        if node is None or collection != "resourceslices":
            return
        if ((obj.get("spec") or {}).get("nodeName") or "") != node:
            name = (obj.get("metadata") or {}).get("name") or ""
            subject = f"resourceslices.{RESOURCE_GROUP}" + (f' "{name}"' if name else "")
            message = (
                f"{subject} is forbidden: can only {operation} ResourceSlice with the same "
                "NodeName as the requesting node"
            )
            details = {"name": name, "group": RESOURCE_GROUP, "kind": "resourceslices"}
            raise fail(403, "Forbidden", message, details)


def _claims_of(pod: dict[str, Any]) -> set[str]:
    """The claim names the Node authorizer's graph links to a pod (graph.go, AddPod)."""
    names = {
        claim["resourceClaimName"]
        for claim in pod["spec"].get("resourceClaims") or []
        if claim.get("resourceClaimName")
    }
    for status in pod.get("status", {}).get("resourceClaimStatuses") or []:
        if status.get("resourceClaimName"):
            names.add(status["resourceClaimName"])
    extended = pod.get("status", {}).get("extendedResourceClaimStatus") or {}
    if extended.get("resourceClaimName"):
        names.add(extended["resourceClaimName"])
    return names
