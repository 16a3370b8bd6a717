"""coordination.k8s.io/v1 Leases as a 1.36 API server serves them (a mixin of
:class:`~tests.standin.apiserver.server.ApiServerStandin`): what leader election needs.

Routes: ``/apis/coordination.k8s.io/v1/namespaces/<ns>/leases[/<name>]``, and
``/apis/coordination.k8s.io/v1/leases`` (every namespace, list only). GET is get or list;
POST creates (409 AlreadyExists when the name is taken); PUT updates; PATCH takes the three
patch types of the Node (patches.py); DELETE deletes one (a ``Status`` of Success).

The registry's rules (pkg/registry/coordination/lease/strategy.go with the generic
registry.Store, k8s.io/apiserver pkg/registry/generic/registry/store.go ``Update``):

- ``AllowUnconditionalUpdate`` is false: a PUT without ``metadata.resourceVersion`` is 422
  (``metadata.resourceVersion: Invalid value: 0: must be specified for an update``: the
  version is a uint64, which ErrorBody in k8s.io/apimachinery pkg/util/validation/field/
  errors.go prints through json.Marshal), one
  with a stale version 409 Conflict (``Operation cannot be fulfilled on
  leases.coordination.k8s.io "<name>": the object has been modified; ...``). A PATCH is based on
  the stored object, so it only conflicts when it changes the version itself.
- ``AllowCreateOnUpdate`` is true: a PUT of a missing Lease creates it (201). A PATCH of a
  missing one is 404.
- A create with ``metadata.resourceVersion`` set is refused by the storage (etcd3 store.go,
  ``ErrResourceVersionSetOnCreate``), a 500.
- The CoordinatedLeaderElection feature gate is off (beta, off by default in 1.36):
  ``spec.strategy`` and ``spec.preferredHolder`` are dropped unless the stored Lease has them.
- Validation (pkg/apis/coordination/validation/validation.go, ``ValidateLease``,
  ``ValidateLeaseSpec``): the name a DNS subdomain, ``leaseDurationSeconds`` > 0,
  ``leaseTransitions`` >= 0; 422 Invalid with the real field errors.
- Decoding: ``holderIdentity`` a string, ``leaseDurationSeconds`` and ``leaseTransitions``
  int32, ``acquireTime`` and ``renewTime`` MicroTimes (microtime.py: exactly six digits of
  fraction; stored and returned in UTC); anything else is 400 ``Lease in version "v1" cannot be
  handled as a Lease: <the decoder's words>``. Unknown fields are dropped (the default field
  validation, ``Warn``; the warning header is not sent).
- A no-op update keeps the resourceVersion.

Authorization: the Node authorizer's lease rule (plugin/pkg/auth/authorizer/node/
node_authorizer.go, ``authorizeLease``): a node identity may get, create, update, patch and
delete the Lease of its own name in ``kube-node-lease``, and NodeRestriction (plugin/pkg/
admission/noderestriction/admission.go, ``admitLease``) holds its creates to that name; anyone
else RBAC on ``leases`` in ``coordination.k8s.io`` (authz.py: rules know no namespaces here, as
if every Role were a ClusterRole). :data:`LEASE_RULES` is what an elected publisher's service
account needs.

Not served: watches, deletecollection, ``generateName``, delete preconditions, managedFields,
the NamespaceLifecycle admission plugin (every namespace exists).
"""

from __future__ import annotations

import copy
import datetime
import json
import re
import uuid
from collections.abc import Mapping
from typing import Any

from tests.standin.apiserver import validation
from tests.standin.apiserver.authz import Authorizer, Rule, forbidden, node_identity
from tests.standin.apiserver.core import StandinCore
from tests.standin.apiserver.microtime import format_micro_time, parse_micro_time
from tests.standin.apiserver.patches import apply_patch, patch_type_of
from tests.standin.apiserver.wire import Fail, Identity, Reply, fail, namespaced_request

LEASE_GROUP = "coordination.k8s.io"
LEASE_API_VERSION = f"{LEASE_GROUP}/v1"
NODE_LEASE_NAMESPACE = "kube-node-lease"  # api.NamespaceNodeLease
LEASE_PATH = re.compile(
    rf"/apis/{re.escape(LEASE_API_VERSION)}/(?:namespaces/(?P<namespace>[^/]+)/)?leases"
    r"(?:/(?P<name>[^/]+))?(?:/(?P<subresource>[^/]+))?"
)
# What client-go's leader election does with its Lease (resourcelock/leaselock.go).
LEASE_RULES = (Rule((LEASE_GROUP,), ("leases",), ("get", "create", "update")),)
_INT32 = ("leaseDurationSeconds", "leaseTransitions")
_STRINGS = ("holderIdentity", "strategy", "preferredHolder")
_TIMES = ("acquireTime", "renewTime")
_GATED = ("strategy", "preferredHolder")  # CoordinatedLeaderElection
_NODE_VERBS = ("get", "create", "update", "patch", "delete")
_CONFLICT = (
    'Operation cannot be fulfilled on leases.coordination.k8s.io "{name}": the object has been '
    "modified; please apply your changes to the latest version and try again"
)


def lease_key(namespace: str, name: str) -> str:
    return f"{namespace}/{name}"


class LeasesMixin(StandinCore):
    """The Leases' routes and storage (caller holds the lock unless a method says otherwise)."""

    authorizer: Authorizer
    _leases: dict[str, dict[str, Any]]  # "<namespace>/<name>" -> Lease

    # --- test hooks ---------------------------------------------------------------------------

    def write_lease(self, namespace: str, name: str, spec: Mapping[str, Any]) -> dict[str, Any]:
        """Create or replace a Lease's spec, as another client's unconditional write would (a
        holder elsewhere renewing): decoded and validated as a request is, a new
        resourceVersion every time. Returns the stored Lease."""
        with self._cond:
            document = {"metadata": {"name": name}, "spec": dict(spec)}
            decoded = _decode(json.dumps(document).encode())
            current = self._leases.get(lease_key(namespace, name))
            if current is None:
                lease = _new_lease(decoded, namespace)
            else:
                lease = copy.deepcopy(current)
                lease["spec"] = decoded["spec"]
            _validate(lease)
            return self._put_lease(lease)

    def lease(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The stored Lease (a copy), or None."""
        with self._cond:
            return copy.deepcopy(self._leases.get(lease_key(namespace, name)))

    # --- storage ------------------------------------------------------------------------------

    def _put_lease(self, lease: dict[str, Any]) -> dict[str, Any]:
        metadata = lease["metadata"]
        key = lease_key(metadata["namespace"], metadata["name"])
        metadata["resourceVersion"] = self._next_revision()
        self._leases[key] = lease
        self._changed(f"lease {key}: {lease.get('spec')}")
        return copy.deepcopy(lease)

    # --- serving ------------------------------------------------------------------------------

    def _route_leases(
        self,
        method: str,
        path: str,
        query: str,
        content_type: str | None,
        body: bytes,
        identity: Identity,
    ) -> Reply:
        namespace, name, subresource, params = namespaced_request(LEASE_PATH, path, query)
        verb = {
            ("GET", True): "get",
            ("GET", False): "list",
            ("POST", False): "create",
            ("PUT", True): "update",
            ("PATCH", True): "patch",
            ("DELETE", True): "delete",
        }.get((method, bool(name)))
        if verb is None or (verb != "list" and not namespace):
            message = "the server does not allow this method on the requested resource"
            raise fail(405, "MethodNotAllowed", message, {})
        if params.get("watch") in ("true", "1"):
            raise fail(400, "BadRequest", "the stand-in does not serve watches of leases")
        resource = "leases" + (f"/{subresource}" if subresource else "")
        self._authorize_lease(identity, verb, resource, name, namespace)
        if subresource:
            raise fail(404, "NotFound", "the server could not find the requested resource", {})
        if verb == "list":
            return self._lease_list(namespace)
        if verb == "get":
            return Reply(200, self._existing_lease(namespace, name))
        if verb == "delete":
            deleted = self._existing_lease(namespace, name)
            _admit_node_lease(identity, namespace, name)
            del self._leases[lease_key(namespace, name)]
            self._next_revision()
            self._changed(f"lease {lease_key(namespace, name)}: deleted")
            details = {**_details(name), "uid": deleted["metadata"]["uid"]}
            status = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"}
            return Reply(200, {**status, "details": details})
        if verb == "patch":
            current = self._existing_lease(namespace, name)
            body = json.dumps(apply_patch(patch_type_of(content_type), current, body)).encode()
        document = _decode(body)
        given_namespace = document["metadata"].get("namespace")
        if given_namespace not in (None, "", namespace):
            message = (
                "the namespace of the provided object does not match the namespace sent on "
                "the request"
            )
            raise fail(400, "BadRequest", message)
        if verb == "create":
            return self._create_lease(namespace, document, identity)
        return self._update_lease(namespace, name, document, identity)

    def _authorize_lease(
        self, identity: Identity, verb: str, resource: str, name: str, namespace: str
    ) -> None:
        node = node_identity(identity)
        reason = ""
        if node is not None and resource == "leases":
            if verb not in _NODE_VERBS:
                reason = "can only get, create, update, patch, or delete a node lease"
            elif namespace != NODE_LEASE_NAMESPACE:
                reason = f'can only access leases in the "{NODE_LEASE_NAMESPACE}" system namespace'
            elif verb != "create" and name != node:
                reason = "can only access node lease with the same name as the requesting node"
            else:
                return
        if self.authorizer.rbac_allows(identity, verb, LEASE_GROUP, resource, name):
            return
        raise forbidden(identity, verb, LEASE_GROUP, resource, name, namespace, reason)

    def _existing_lease(self, namespace: str, name: str) -> dict[str, Any]:
        try:
            return copy.deepcopy(self._leases[lease_key(namespace, name)])
        except KeyError:
            message = f'leases.{LEASE_GROUP} "{name}" not found'
            raise fail(404, "NotFound", message, _details(name)) from None

    def _lease_list(self, namespace: str) -> Reply:
        items = [
            copy.deepcopy(lease)
            for lease in self._leases.values()
            if not namespace or lease["metadata"]["namespace"] == namespace
        ]
        for item in items:
            item.pop("apiVersion", None)
            item.pop("kind", None)
        listing = {
            "kind": "LeaseList",
            "apiVersion": LEASE_API_VERSION,
            "metadata": {"resourceVersion": str(self._current_revision())},
            "items": items,
        }
        return Reply(200, listing)

    def _create_lease(self, namespace: str, document: dict[str, Any], identity: Identity) -> Reply:
        if document["metadata"].get("resourceVersion"):
            raise fail(500, "", "resourceVersion should not be set on objects to be created")
        lease = _new_lease(document, namespace)
        name = lease["metadata"]["name"]
        _validate(lease)
        _admit_node_lease(identity, namespace, name)
        if lease_key(namespace, name) in self._leases:
            message = f'leases.{LEASE_GROUP} "{name}" already exists'
            raise fail(409, "AlreadyExists", message, _details(name))
        return Reply(201, self._put_lease(lease))

    def _update_lease(
        self, namespace: str, name: str, document: dict[str, Any], identity: Identity
    ) -> Reply:
        metadata = document["metadata"]
        if metadata.get("name", name) != name:
            message = (
                f"the name of the object ({metadata.get('name')}) does not match the name on "
                f"the URL ({name})"
            )
            raise fail(400, "BadRequest", message)
        current = self._leases.get(lease_key(namespace, name))
        if current is None:  # AllowCreateOnUpdate
            metadata.pop("resourceVersion", None)
            metadata["name"] = name
            return self._create_lease(namespace, document, identity)
        wanted = metadata.get("resourceVersion")
        if not wanted:
            error = validation.FieldError(
                "metadata.resourceVersion",
                "Invalid value",
                detail="0: must be specified for an update",
                show_value=False,
            )
            raise validation.invalid_object("leases", LEASE_GROUP, name, [error])
        if wanted != current["metadata"]["resourceVersion"]:
            raise fail(409, "Conflict", _CONFLICT.format(name=name), _details(name))
        updated = copy.deepcopy(current)
        for field in ("labels", "annotations"):
            if metadata.get(field) is None:
                updated["metadata"].pop(field, None)
            else:
                updated["metadata"][field] = metadata[field]
        spec = document["spec"]
        for field in _GATED:  # PrepareForUpdate with the gate off
            if field not in current["spec"]:
                spec.pop(field, None)
        updated["spec"] = spec
        _validate(updated)
        _admit_node_lease(identity, namespace, name)
        if updated == current:
            return Reply(200, copy.deepcopy(current))
        return Reply(200, self._put_lease(updated))


def _admit_node_lease(identity: Identity, namespace: str, name: str) -> None:
    """NodeRestriction's admitLease: a node identity writes its own Lease in kube-node-lease
    only, whichever authorizer let the request through (``name``: the object's, on a
    create)."""
    node = node_identity(identity)
    if node is None:
        return
    if namespace != NODE_LEASE_NAMESPACE:
        reason = f'can only access leases in the "{NODE_LEASE_NAMESPACE}" system namespace'
    elif name != node:
        reason = "can only access node lease with the same name as the requesting node"
    else:
        return
    message = f'leases.{LEASE_GROUP} "{name}" is forbidden: {reason}'
    raise fail(403, "Forbidden", message, _details(name))


def _details(name: str) -> dict[str, Any]:
    return {"name": name, "group": LEASE_GROUP, "kind": "leases"}


def _new_lease(document: dict[str, Any], namespace: str) -> dict[str, Any]:
    lease = copy.deepcopy(document)
    for field in _GATED:  # PrepareForCreate with the gate off
        lease["spec"].pop(field, None)
    lease["metadata"].update(
        namespace=namespace,
        uid=str(uuid.uuid4()),
        creationTimestamp=datetime.datetime.now(datetime.timezone.utc).strftime(
            "%Y-%m-%dT%H:%M:%SZ"
        ),
    )
    return lease


def _validate(lease: dict[str, Any]) -> None:
    """ValidateLease (ValidateObjectMeta's name rule, ValidateLeaseSpec)."""
    spec = lease["spec"]
    errors = validation.object_name(lease["metadata"])
    duration = spec.get("leaseDurationSeconds")
    if duration is not None and duration <= 0:
        errors.append(
            validation.invalid("spec.leaseDurationSeconds", duration, "must be greater than 0")
        )
    transitions = spec.get("leaseTransitions")
    if transitions is not None and transitions < 0:
        errors.append(
            validation.invalid(
                "spec.leaseTransitions", transitions, "must be greater than or equal to 0"
            )
        )
    if errors:
        name = lease["metadata"].get("name") or ""
        raise validation.invalid_object("Lease", LEASE_GROUP, name, errors)


class _Number(float):
    """A JSON number with its text, for the decoder's words about it."""

    text: str


def _number(text: str) -> _Number:
    number = _Number(text)
    number.text = text
    return number


def _refusal(error: str) -> Fail:
    message = f'Lease in version "v1" cannot be handled as a Lease: {error}'
    return fail(400, "BadRequest", message)


def _mismatch(value: Any, struct: str, field: str, go_type: str) -> Fail:
    """encoding/json's UnmarshalTypeError (sigs.k8s.io/json keeps its words; its decode.go
    ``literalStore``): a number names its text only where the field is a number too (one out
    of range or with a fraction), else the JSON kind alone."""
    kinds = ((bool, "bool"), (str, "string"), ((int, float), "number"), (dict, "object"))
    kind = next((k for t, k in kinds if isinstance(value, t)), "array")
    if kind == "number" and go_type.startswith(("int", "uint", "float")):
        kind = f"number {getattr(value, 'text', value)}"
    return _refusal(
        f"json: cannot unmarshal {kind} into Go struct field {struct}.{field} of type {go_type}"
    )


def _decode(body: bytes) -> dict[str, Any]:
    """The body as the Lease decoder reads it: known fields only, types checked, MicroTimes
    normalised to UTC; 400 in the decoder's words otherwise."""
    try:
        document = json.loads(body, parse_float=_number)
    except (ValueError, UnicodeDecodeError) as error:
        raise _refusal(f"json: {error}") from None
    if not isinstance(document, dict):
        raise _mismatch(document, "Lease", "", "v1.Lease")
    _check_kind(document)
    metadata = document.get("metadata") or {}
    if not isinstance(metadata, dict):
        raise _mismatch(metadata, "Lease", "metadata", "v1.ObjectMeta")
    kept_metadata = {}
    for field in ("name", "namespace", "resourceVersion", "labels", "annotations"):
        value = metadata.get(field)
        if value is None:
            continue
        if field in ("labels", "annotations"):
            if not isinstance(value, dict):
                raise _mismatch(value, "ObjectMeta", f"metadata.{field}", "map[string]string")
            # A wrong value is named by the map's element type.
            for item in value.values():
                if not isinstance(item, str):
                    raise _mismatch(item, "ObjectMeta", f"metadata.{field}", "string")
        elif not isinstance(value, str):
            raise _mismatch(value, "ObjectMeta", f"metadata.{field}", "string")
        kept_metadata[field] = value
    spec = document.get("spec") or {}
    if not isinstance(spec, dict):
        raise _mismatch(spec, "Lease", "spec", "v1.LeaseSpec")
    return {"metadata": kept_metadata, "spec": _decode_spec(spec)}


def _decode_spec(spec: dict[str, Any]) -> dict[str, Any]:
    kept: dict[str, Any] = {}
    for field, value in spec.items():
        if value is None:
            continue
        path = f"spec.{field}"
        if field in _STRINGS:
            if not isinstance(value, str):
                raise _mismatch(value, "LeaseSpec", path, "string")
            kept[field] = value
        elif field in _INT32:
            if (
                isinstance(value, bool)
                or not isinstance(value, int)
                or not -(2**31) <= value < 2**31
            ):
                raise _mismatch(value, "LeaseSpec", path, "int32")
            kept[field] = value
        elif field in _TIMES:
            # MicroTime.UnmarshalJSON decodes a string first, and the decoder names that type.
            if not isinstance(value, str):
                raise _mismatch(value, "LeaseSpec", path, "string")
            try:
                kept[field] = format_micro_time(parse_micro_time(value))
            except ValueError as error:
                raise _refusal(str(error)) from None
    return kept


def _check_kind(document: dict[str, Any]) -> None:
    """The decoder's refusal of another kind or group version in the body."""
    kind, version = document.get("kind"), document.get("apiVersion")
    if version not in (None, LEASE_API_VERSION):
        message = (
            f"the API version in the data ({version}) does not match the expected API "
            f"version ({LEASE_API_VERSION})"
        )
        raise fail(400, "BadRequest", message)
    if kind not in (None, "Lease"):
        message = f"the kind in the data ({kind}) does not match the expected kind (Lease)"
        raise fail(400, "BadRequest", message)
