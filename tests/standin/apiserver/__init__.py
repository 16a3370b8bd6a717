"""A Kubernetes API server stand-in over HTTPS: the Node object and its ``status`` subresource,
Pods (pods.py), resource.k8s.io/v1 (ResourceSlices, ResourceClaims, DeviceClasses;
resources.py, watch.py, validation.py, placement.py, scheduler.py, discovery.py) and
coordination.k8s.io/v1 Leases (leases.py).

For Nodes, it answers the requests a node agent makes when it advertises extended resources
through the Node status, the way a real API server (1.32 to 1.36) answers them:

- ``GET /api/v1/nodes/<name>`` and ``GET /api/v1/nodes/<name>/status``: the Node as JSON.
- ``PATCH /api/v1/nodes/<name>/status`` with ``application/json-patch+json`` (RFC 6902, applied
  by the ``jsonpatch`` library to the whole Node, so RFC 6901 escaping such as
  ``/status/capacity/example.com~1dongle`` works), ``application/merge-patch+json`` (RFC 7386)
  or ``application/strategic-merge-patch+json`` (maps only, see :func:`_strategic_merge`).
  As the real status subresource does, the patch is applied to the whole object but only
  ``status`` is kept: changes to ``metadata`` and ``spec`` are silently ignored. A changed
  ``metadata.resourceVersion`` is a precondition, as on the real server (409 if stale).
- ``PATCH /api/v1/nodes/<name>`` (the main resource): only ``metadata.labels``,
  ``metadata.annotations`` and ``spec`` are kept; status changes are silently ignored there,
  which is exactly the mistake of patching the wrong URL. A node identity patching its own
  Node is held to the NodeRestriction admission plugin's rules for an update
  (plugin/pkg/admission/noderestriction/admission.go, ``admitNode``): its annotations are
  free, its taints may not change, and of its labels it may not add, change or remove one
  under ``node-restriction.kubernetes.io/``, nor one under ``kubernetes.io`` or ``k8s.io``
  (or a subdomain of either) unless the kubelet sets it (k8s.io/kubelet/pkg/apis,
  ``IsKubeletLabel``): 403 with the plugin's words.
- ``GET /api/v1/nodes``: a list, or with ``watch=true`` a watch (watch.py: resumed from a
  ``resourceVersion``, bookmarks), field selectors ``metadata.name`` and ``spec.unschedulable``;
  a node identity only of its own Node, by ``fieldSelector=metadata.name=<node>`` (the Node
  authorizer: "node '<n>' cannot read all nodes, only its own Node object" otherwise).
- ``GET /version`` without credentials.

Quantities are validated and stored in Kubernetes' canonical form, as the real server
re-serialises them: ``"1000"`` is stored as ``"1k"``, ``"04"`` as ``"4"``, a JSON number ``4``
as ``"4"``. Extended resources must be non-negative integers (422 otherwise). A patch that
changes nothing leaves ``resourceVersion`` alone, as on the real server.

Errors are ``Status`` objects with the real server's status code, reason and message:
400 BadRequest (a JSON patch body that is not a JSON array of objects), 401 Unauthorized,
403 Forbidden, 404 NotFound, 405 MethodNotAllowed, 409 Conflict, 413, 415
UnsupportedMediaType, 422 Invalid (a patch that cannot be applied: a ``remove`` of a
missing path, a failing ``test``, an unknown op; or a result that does not validate).
For a patch that cannot be applied the real server's message is the uninformative
"the server rejected our request due to an error in our request"; the library's reason is
kept in the request log (:attr:`LoggedRequest.error`), never sent.

Authentication and authorization: authz.py. A node identity (CN ``system:node:<name>``, O
``system:nodes``) may get and patch its own Node only (the Node authorizer with
NodeRestriction; authorization comes before the lookup, so another, missing node is 403 and
not 404); a token is allowed everything, nothing, or what its RBAC rules say
(:meth:`ApiServerStandin.add_token`, with ``node=`` a service account's token bound to a pod on
that node). ValidatingAdmissionPolicies a test applies
(:meth:`ApiServerStandin.apply_admission_policies`) hold writes of resource.k8s.io objects
(admission.py).

The kubelet's part: at its status sync the kubelet copies capacity to allocatable for
extended resources and drops allocatable entries no longer in capacity. By default
(``kubelet_sync=True``) the stand-in does that right after every status change, as its own
change (a second ``resourceVersion``), so a PATCH response still shows the old allocatable,
as a real one does; with ``kubelet_sync=False`` the test calls :meth:`ApiServerStandin.sync`.
Test hooks: :meth:`~ApiServerStandin.reset_capacity` (the kubelet or a node re-creation
dropping extended resources behind the agent's back), :meth:`~ApiServerStandin.set_capacity`,
:meth:`~ApiServerStandin.fail_requests` (500 for one method and path),
``add_node``/``delete_node``, ``stop``/``start`` on the same port, ``cut_off``/``reconnect``
(a client's requests hang as in a network partition: partition.py), the request log (with
each request's changes: ``ApiServerView.slice_writes`` says who wrote which slice),
:meth:`~ApiServerStandin.wait_for` and :meth:`~ApiServerStandin.write_kubeconfig`; for
resource.k8s.io (scheduler.py): ``allocate_claim``, ``deallocate``, ``delete_claim``,
``delete_pod``, ``add_device_class``, ``delete_slices``, ``compact``.

Not implemented: PUT of Nodes, server-side apply
(``application/apply-patch+yaml`` is 415 here), list pagination (``limit``/``continue`` are
ignored), label selectors, aggregated discovery, objects of resource.k8s.io's beta versions,
writes of Pods but PATCH of the main resource (pods.py: get, list, watch, patch).
"""

from __future__ import annotations

from tests.standin.apiserver.authz import (
    DAEMONSET_RULES,
    DEFAULT_TOKEN_USER,
    MASTERS_GROUP,
    RESOURCE_GROUP,
    Rule,
)
from tests.standin.apiserver.certificates import (
    NODE_USER_PREFIX,
    NODES_GROUP,
    CertificateAuthority,
    ClientCertificate,
    KeyPair,
    client_context,
)
from tests.standin.apiserver.nodes import DEFAULT_CAPACITY, new_node
from tests.standin.apiserver.partition import HeldRequest
from tests.standin.apiserver.patches import (
    JSON_PATCH,
    MERGE_PATCH,
    PATCH_TYPES,
    STRATEGIC_MERGE_PATCH,
)
from tests.standin.apiserver.quantities import canonical_quantity
from tests.standin.apiserver.scheduler import EXTENDED_CLAIM_ANNOTATION
from tests.standin.apiserver.server import ApiServerStandin
from tests.standin.apiserver.view import ApiServerView, PoolView, SliceWrite
from tests.standin.apiserver.wire import LoggedRequest, status_object

__all__ = [
    "DAEMONSET_RULES",
    "DEFAULT_CAPACITY",
    "DEFAULT_TOKEN_USER",
    "EXTENDED_CLAIM_ANNOTATION",
    "JSON_PATCH",
    "MASTERS_GROUP",
    "MERGE_PATCH",
    "NODES_GROUP",
    "NODE_USER_PREFIX",
    "PATCH_TYPES",
    "RESOURCE_GROUP",
    "STRATEGIC_MERGE_PATCH",
    "ApiServerStandin",
    "ApiServerView",
    "CertificateAuthority",
    "ClientCertificate",
    "HeldRequest",
    "KeyPair",
    "LoggedRequest",
    "PoolView",
    "Rule",
    "SliceWrite",
    "canonical_quantity",
    "client_context",
    "new_node",
    "status_object",
]
