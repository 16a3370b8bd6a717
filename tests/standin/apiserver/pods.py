"""Pods over REST, as a 1.36 API server serves the core group's ``pods`` (a mixin of
:class:`~tests.standin.apiserver.server.ApiServerStandin`): what a node agent that nudges its
kubelet and the kubelet stand-in's pod source need.

Routes: ``GET /api/v1/pods`` (every namespace) and ``GET /api/v1/namespaces/<ns>/pods``, a list
(``kind: PodList``) or, with ``?watch=true``, a watch (watch.py); ``GET`` and ``PATCH``
``/api/v1/namespaces/<ns>/pods/<name>``. Field selectors take the pod's selectable fields
(pkg/registry/core/pod/strategy.go, ``ToSelectableFields``). Other methods are 405, subresources
(``/status``, ``/eviction``, ...) 404 after authorization: nothing here writes a pod's status
over HTTP (:meth:`set_pod_status` is the hook that plays the kubelet's status manager).

A PATCH takes the three patch types of the Node (patches.py) against the whole pod, then the
pod strategy (pkg/registry/core/pod/strategy.go, ``PrepareForUpdate``): ``status`` is kept from
the stored pod (the main resource never writes it), ``metadata.generation`` goes up only when
``spec`` changes (``updatePodGeneration``), and the rest of ``metadata`` but labels,
annotations, finalizers and ownerReferences is the stored one's; a changed
``metadata.resourceVersion`` is a precondition (409 when stale). Validation is
``ValidatePodUpdate`` (pkg/apis/core/validation/validation.go) for its ``spec``: only
containers' and init containers' images may change (422 ``Forbidden: pod updates may not
change fields other than ...``; activeDeadlineSeconds, tolerations and the grace period,
which the real one also lets change, are refused here too); annotations must be a map of
strings. Then the ValidatingAdmissionPolicies a test applied (admission.py) as an ``UPDATE``
of ``pods``; a patch that changes nothing keeps the resourceVersion. Every stored change of a
pod, including the hooks', gets the next resourceVersion and a watch event.

Authorization (plugin/pkg/auth/authorizer/node/node_authorizer.go, ``authorizePod``): a node
identity may get a pod bound to it (the graph's pod -> node edge; else "no relationship found
between node '<n>' and this object"), list and watch pods only with the field selector
``spec.nodeName=<node>`` ("can only list/watch pods with spec.nodeName field selector"); its
create, delete (mirror pods, held by NodeRestriction) and ``pods/status`` writes are not
served here; it may not patch a pod (no opinion, and nodes have no RBAC rules: the plain 403).
Anyone else: RBAC rules on ``pods`` in the core group (authz.py).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from typing import Any

from tests.standin.apiserver import validation
from tests.standin.apiserver.admission import AdmissionPolicies
from tests.standin.apiserver.authz import Authorizer, forbidden, node_identity
from tests.standin.apiserver.core import StandinCore
from tests.standin.apiserver.patches import apply_patch, patch_type_of
from tests.standin.apiserver.resources import _namespaced, claim_key
from tests.standin.apiserver.watch import (
    Change,
    Requirement,
    matches,
    parse_field_selector,
    watch_from_params,
)
from tests.standin.apiserver.wire import Identity, Reply, fail, namespaced_request

POD_PATH = re.compile(
    r"/api/v1/(?:namespaces/(?P<namespace>[^/]+)/)?pods(?:/(?P<name>[^/]+))?"
    r"(?:/(?P<subresource>[^/]+))?"
)
_KEPT_METADATA = ("labels", "annotations", "finalizers", "ownerReferences")
_UPDATABLE = (
    "`spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,"
    "`spec.tolerations` (only additions to existing tolerations),"
    "`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)"
)


class PodsMixin(StandinCore):
    """The pods' routes and storage (caller holds the lock unless a method says otherwise)."""

    authorizer: Authorizer
    _pods: dict[str, dict[str, Any]]  # "<namespace>/<name>" -> Pod
    _admission: AdmissionPolicies

    # --- test hooks ---------------------------------------------------------------------------

    def set_pod_status(self, namespace: str, name: str, status: Mapping[str, Any]) -> None:
        """Merge ``status`` into the pod's status, as the kubelet's status manager does through
        ``pods/status``: a change the kubelet's pod config does not sync the pod for."""
        with self._cond:
            pod = copy.deepcopy(self._pods[claim_key(namespace, name)])
            pod.setdefault("status", {}).update(copy.deepcopy(dict(status)))
            self._put_pod(pod, "MODIFIED")

    # --- storage ------------------------------------------------------------------------------

    def _put_pod(self, pod: dict[str, Any], change: str) -> dict[str, Any]:
        metadata = pod["metadata"]
        key = claim_key(metadata["namespace"], metadata["name"])
        old = self._pods.get(key)
        metadata["resourceVersion"] = revision = self._next_revision()
        if change == "DELETED":
            del self._pods[key]
        else:
            self._pods[key] = pod
        self._history.add(Change(int(revision), "pods", change, copy.deepcopy(pod), old))
        self._changed(f"pod {key}: {change}")
        return copy.deepcopy(pod)

    # --- serving ------------------------------------------------------------------------------

    def _route_pods(
        self,
        method: str,
        path: str,
        query: str,
        content_type: str | None,
        body: bytes,
        identity: Identity,
    ) -> Reply:
        namespace, name, subresource, params = namespaced_request(POD_PATH, path, query)
        watching = params.get("watch") in ("true", "1")
        verb = {
            ("GET", True): "get",
            ("GET", False): "watch" if watching else "list",
            ("PATCH", True): "patch",
        }.get((method, bool(name)))
        if verb is None:
            message = "the server does not allow this method on the requested resource"
            raise fail(405, "MethodNotAllowed", message, {})
        selector = parse_field_selector("pods", params.get("fieldSelector", ""))
        resource = "pods" + (f"/{subresource}" if subresource else "")
        self._authorize_pod(identity, verb, resource, name, namespace, selector)
        if subresource:
            raise fail(404, "NotFound", "the server could not find the requested resource", {})
        if verb in ("list", "watch"):
            return self._pod_collection(verb, namespace, selector, params)
        current = self._existing_pod(namespace, name)
        if verb == "get":
            return Reply(200, current)
        patched = apply_patch(patch_type_of(content_type), current, body)
        return self._update_pod(current, patched, identity)

    def _authorize_pod(
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
        if node is not None and resource == "pods":
            if verb == "get":
                pod = self._pods.get(claim_key(namespace, name))
                if pod is not None and pod["spec"].get("nodeName") == node:
                    return
                reason = f"no relationship found between node '{node}' and this object"
            elif verb in ("list", "watch"):
                if ("spec.nodeName", "=", node) in selector:
                    return
                reason = "can only list/watch pods with spec.nodeName field selector"
        if self.authorizer.rbac_allows(identity, verb, "", resource, name):
            return
        raise forbidden(identity, verb, "", resource, name, namespace, reason)

    def _existing_pod(self, namespace: str, name: str) -> dict[str, Any]:
        try:
            return copy.deepcopy(self._pods[claim_key(namespace, name)])
        except KeyError:
            details = {"name": name, "kind": "pods"}
            raise fail(404, "NotFound", f'pods "{name}" not found', details) from None

    def _pod_collection(
        self, verb: str, namespace: str, selector: tuple[Requirement, ...], params: dict[str, str]
    ) -> Reply:
        def current() -> list[dict[str, Any]]:
            return [
                copy.deepcopy(pod)
                for pod in self._pods.values()
                if matches(pod, selector)
                and (not namespace or pod["metadata"]["namespace"] == namespace)
            ]

        if verb == "watch":
            stream = watch_from_params(
                params,
                self._cond,
                self._history,
                "pods",
                current,
                self._current_revision,
                self._serving,
                selector,
            )
            return Reply(200, {}, stream=_namespaced(stream, namespace))
        items = current()
        for item in items:
            item.pop("apiVersion", None)
            item.pop("kind", None)
        listing = {
            "kind": "PodList",
            "apiVersion": "v1",
            "metadata": {"resourceVersion": str(self._current_revision())},
            "items": items,
        }
        return Reply(200, listing)

    def _update_pod(
        self, current: dict[str, Any], patched: dict[str, Any], identity: Identity
    ) -> Reply:
        name = current["metadata"]["name"]
        given = patched.get("metadata")
        metadata: dict[str, Any] = given if isinstance(given, dict) else {}
        if metadata.get("name", name) != name:
            message = (
                f"the name of the object ({metadata.get('name')}) does not match the name on "
                f"the URL ({name})"
            )
            raise fail(400, "BadRequest", message)
        if metadata.get("resourceVersion") not in (
            None,
            "",
            current["metadata"]["resourceVersion"],
        ):
            message = (
                f'Operation cannot be fulfilled on pods "{name}": the object has been modified; '
                "please apply your changes to the latest version and try again"
            )
            raise fail(409, "Conflict", message, {"name": name, "kind": "pods"})
        updated = copy.deepcopy(current)
        for field in _KEPT_METADATA:
            if metadata.get(field) is None:
                updated["metadata"].pop(field, None)
            else:
                updated["metadata"][field] = metadata[field]
        updated["spec"] = copy.deepcopy(patched.get("spec"))
        errors = _pod_update_errors(updated, current)
        if errors:
            raise validation.invalid_object("Pod", "", name, errors)
        if updated["spec"] != current["spec"]:  # updatePodGeneration
            updated["metadata"]["generation"] = current["metadata"].get("generation", 1) + 1
        self._admission.admit(identity, "UPDATE", "pods", name, updated, current, group="")
        if updated == current:
            return Reply(200, current)
        return Reply(200, self._put_pod(updated, "MODIFIED"))


def _pod_update_errors(new: dict[str, Any], old: dict[str, Any]) -> list[validation.FieldError]:
    """The part of ValidatePodUpdate (and ValidateObjectMetaUpdate) modelled here."""
    errors = []
    annotations = new["metadata"].get("annotations")
    if annotations is not None and (
        not isinstance(annotations, dict)
        or not all(isinstance(v, str) for v in annotations.values())
    ):
        errors.append(
            validation.invalid("metadata.annotations", annotations, "must be a map of strings")
        )
    if _without_images(new.get("spec")) != _without_images(old.get("spec")):
        detail = f"pod updates may not change fields other than {_UPDATABLE}"
        errors.append(validation.FieldError("spec", "Forbidden", detail=detail, show_value=False))
    return errors


def _without_images(spec: Any) -> Any:
    if not isinstance(spec, dict):
        return spec
    spec = copy.deepcopy(spec)
    for containers in ("containers", "initContainers"):
        for container in spec.get(containers) or ():
            if isinstance(container, dict):
                container.pop("image", None)
    return spec
