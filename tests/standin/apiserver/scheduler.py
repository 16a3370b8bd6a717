"""Test hooks that do what other components do to resource.k8s.io objects: the scheduler and
the resource-claim controller (claims allocated and reserved for a pod bound to a node), an
admin (DeviceClasses), the kubelet (slices deleted behind the agent's back) and etcd
(compaction). A mixin of :class:`~tests.standin.apiserver.server.ApiServerStandin`.

An allocated claim looks as the 1.36 scheduler leaves it: ``spec.devices.requests[]`` with an
``exactly`` ExactCount request of its DeviceClass, ``status.allocation.devices.results[]``
``{request, driver, pool, device}``, ``status.allocation.nodeSelector`` naming the node (none
for devices of a cluster pool, a slice with ``allNodes``; its selector for a slice with
``nodeSelector``) and ``status.reservedFor`` the pod. Its pod is bound to the node and
references it through ``spec.resourceClaims[].resourceClaimName``, or, for the
extended-resource bridge (KEP-5004, ``extended_resource``), the claim is named
``<pod>-extended-resources-<5 characters>``, carries the annotation
``resource.kubernetes.io/extended-resource-claim: "true"`` and an owner reference to the pod,
and the pod asks for the resource in ``resources.limits`` and names the claim in
``status.extendedResourceClaimStatus`` (``resourceClaimName``, ``requestMappings``).
"""

from __future__ import annotations

import copy
import random
import uuid
from collections.abc import Sequence
from typing import Any

from tests.standin.apiserver.core import StandinCore
from tests.standin.apiserver.resources import _NAME_CHARACTERS, API_VERSION, claim_key, now

EXTENDED_CLAIM_ANNOTATION = "resource.kubernetes.io/extended-resource-claim"


class SchedulerMixin(StandinCore):
    """Hooks for tests; each takes the lock and wakes :meth:`wait_for`."""

    _objects: dict[str, dict[str, dict[str, Any]]]
    _pods: dict[str, dict[str, Any]]

    def _put(self, collection: str, key: str, obj: dict[str, Any], change: str) -> dict[str, Any]:
        raise NotImplementedError

    def _remove(self, collection: str, key: str) -> dict[str, Any]:
        raise NotImplementedError

    def _put_pod(self, pod: dict[str, Any], change: str) -> dict[str, Any]:
        raise NotImplementedError

    def allocate_claim(
        self,
        namespace: str,
        name: str | None,
        *,
        pod: str,
        node: str,
        driver: str,
        results: Sequence[tuple[str, str, str]],
        device_class: str | None = None,
        extended_resource: str | None = None,
        uid: str | None = None,
    ) -> dict[str, Any]:
        """Create a claim allocated to ``results`` ((request, pool, device) each) and reserved
        for ``pod``, and that pod bound to ``node``; returns the claim (with its uid).
        ``extended_resource`` (e.g. ``example.com/token``) makes it the bridge's claim, named
        by the scheduler (``name`` is then ignored). ``uid``: the claim's, else a random one
        (a test that depends on its first character names it)."""
        with self._cond:
            pod_uid = str(uuid.uuid4())
            requests = sorted({request for request, _, _ in results})
            if extended_resource is not None:
                suffix = "".join(random.choice(_NAME_CHARACTERS) for _ in range(5))
                name = f"{pod}-extended-resources-{suffix}"
            if not name:
                raise ValueError("a claim needs a name unless extended_resource is given")
            metadata: dict[str, Any] = {
                "name": name,
                "namespace": namespace,
                "uid": uid or str(uuid.uuid4()),
                "generation": 1,
                "creationTimestamp": now(),
            }
            if extended_resource is not None:
                metadata["annotations"] = {EXTENDED_CLAIM_ANNOTATION: "true"}
                metadata["ownerReferences"] = [
                    {
                        "apiVersion": "v1",
                        "kind": "Pod",
                        "name": pod,
                        "uid": pod_uid,
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ]
            count = {r: sum(1 for q, _, _ in results if q == r) for r in requests}
            claim = {
                "apiVersion": API_VERSION,
                "kind": "ResourceClaim",
                "metadata": metadata,
                "spec": {
                    "devices": {
                        "requests": [
                            {
                                "name": request,
                                "exactly": {
                                    "deviceClassName": device_class or driver,
                                    "allocationMode": "ExactCount",
                                    "count": count[request],
                                },
                            }
                            for request in requests
                        ]
                    }
                },
                "status": {
                    "allocation": {
                        "devices": {
                            "results": [
                                {
                                    "request": request,
                                    "driver": driver,
                                    "pool": pool,
                                    "device": device,
                                }
                                for request, pool, device in results
                            ]
                        },
                        **self._node_selector(node, driver, results),
                    },
                    "reservedFor": [{"resource": "pods", "name": pod, "uid": pod_uid}],
                },
            }
            stored = self._put("resourceclaims", claim_key(namespace, name), claim, "ADDED")
            self._put_pod(
                _pod(namespace, pod, pod_uid, node, name, count, extended_resource), "ADDED"
            )
            self._changed(f"pod {namespace}/{pod} bound to {node} with claim {name}")
            return stored

    def _node_selector(
        self, node: str, driver: str, results: Sequence[tuple[str, str, str]]
    ) -> dict[str, Any]:
        """``{"nodeSelector": ...}`` as the allocator's createNodeSelector makes it
        (dynamic-resource-allocation structured/internal/stable/allocator_stable.go), from the
        stored slices that hold the allocated devices: a device of a slice with ``nodeName``
        restricts the claim to its node; the one term of slices with ``nodeSelector`` is
        merged; devices of ``allNodes`` slices restrict nothing, and a claim of those only has
        no nodeSelector at all. The node is always ``node``, the pod's (a test may bind a pod
        to another node than its devices', to see the Node authorizer refuse), and so is that
        of a device of no stored slice (tests that allocate without slices)."""
        fields: list[dict[str, Any]] = []
        expressions: list[dict[str, Any]] = []
        for _, pool, device in results:
            spec = self._slice_holding(driver, pool, device)
            if spec is None or spec.get("nodeName"):
                match = {"key": "metadata.name", "operator": "In", "values": [node]}
                return {"nodeSelector": {"nodeSelectorTerms": [{"matchFields": [match]}]}}
            for term in (spec.get("nodeSelector") or {}).get("nodeSelectorTerms") or []:
                fields += [r for r in term.get("matchFields") or [] if r not in fields]
                expressions += [
                    r for r in term.get("matchExpressions") or [] if r not in expressions
                ]
        merged: dict[str, Any] = {}
        if fields:
            merged["matchFields"] = fields
        if expressions:
            merged["matchExpressions"] = expressions
        return {"nodeSelector": {"nodeSelectorTerms": [merged]}} if merged else {}

    def _slice_holding(self, driver: str, pool: str, device: str) -> dict[str, Any] | None:
        """The spec of a stored slice of ``driver``'s ``pool`` listing ``device``."""
        for obj in self._objects["resourceslices"].values():
            spec: dict[str, Any] = obj["spec"]
            if (
                spec.get("driver") == driver
                and (spec.get("pool") or {}).get("name") == pool
                and any(listed.get("name") == device for listed in spec.get("devices") or [])
            ):
                return spec
        return None

    def delete_claim(self, namespace: str, name: str) -> None:
        """The claim goes (its pod stays: the graph edge too, as in the real authorizer)."""
        with self._cond:
            self._remove("resourceclaims", claim_key(namespace, name))

    def deallocate(self, namespace: str, name: str) -> dict[str, Any]:
        """The claim loses its allocation and reservations, as when its pods are gone."""
        with self._cond:
            key = claim_key(namespace, name)
            claim = copy.deepcopy(self._objects["resourceclaims"][key])
            claim["status"] = {}
            return self._put("resourceclaims", key, claim, "MODIFIED")

    def delete_pod(self, namespace: str, name: str) -> None:
        """The pod goes, and with it the node's access to its claims."""
        with self._cond:
            self._put_pod(copy.deepcopy(self._pods[claim_key(namespace, name)]), "DELETED")

    def add_device_class(
        self, name: str, driver: str, *, extended_resource_name: str | None = None
    ) -> dict[str, Any]:
        """An admin's DeviceClass selecting the driver's devices by CEL."""
        with self._cond:
            spec: dict[str, Any] = {
                "selectors": [{"cel": {"expression": f'device.driver == "{driver}"'}}]
            }
            if extended_resource_name is not None:
                spec["extendedResourceName"] = extended_resource_name
            obj = {
                "apiVersion": API_VERSION,
                "kind": "DeviceClass",
                "metadata": {
                    "name": name,
                    "uid": str(uuid.uuid4()),
                    "generation": 1,
                    "creationTimestamp": now(),
                },
                "spec": spec,
            }
            return self._put("deviceclasses", name, obj, "ADDED")

    def delete_slices(self, *, node: str | None = None, driver: str | None = None) -> list[str]:
        """Delete the slices of a node and/or driver behind the agent's back (as a starting
        kubelet does); returns their names."""
        with self._cond:
            names = [
                name
                for name, obj in self._objects["resourceslices"].items()
                if (node is None or obj["spec"].get("nodeName") == node)
                and (driver is None or obj["spec"].get("driver") == driver)
            ]
            for name in names:
                self._remove("resourceslices", name)
            return names

    def compact(self) -> int:
        """Forget the change history up to now, as an etcd compaction does: a watch from an
        older resourceVersion gets 410 Expired. Returns the compacted revision."""
        with self._cond:
            revision = self._current_revision()
            self._history.compact(revision)
            self._changed(f"history compacted at {revision}")
            return revision


def _pod(
    namespace: str,
    name: str,
    uid: str,
    node: str,
    claim: str,
    count: dict[str, int],
    extended_resource: str | None,
) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "app", "image": "registry.k8s.io/pause:3.10"}
    pod: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": uid,
            "generation": 1,
            "creationTimestamp": now(),
        },
        "spec": {"nodeName": node, "containers": [container]},
        "status": {"phase": "Pending"},
    }
    if extended_resource is None:
        pod["spec"]["resourceClaims"] = [{"name": "tokens", "resourceClaimName": claim}]
        container["resources"] = {"claims": [{"name": "tokens"}]}
    else:
        total = str(sum(count.values()))
        container["resources"] = {"limits": {extended_resource: total}}
        pod["status"]["extendedResourceClaimStatus"] = {
            "resourceClaimName": claim,
            "requestMappings": [
                {"containerName": "app", "resourceName": extended_resource, "requestName": r}
                for r in count
            ],
        }
    return pod
