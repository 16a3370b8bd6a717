"""resource.k8s.io/v1 as a 1.36 API server serves it: ResourceSlices, ResourceClaims,
DeviceClasses (a mixin of :class:`~tests.standin.apiserver.server.ApiServerStandin`).

Routes: ``/apis/resource.k8s.io/v1/resourceslices[/<name>]`` and ``deviceclasses[/<name>]``
(cluster-scoped), ``namespaces/<ns>/resourceclaims[/<name>]`` and ``resourceclaims`` (every
namespace, list only). GET is get, list or (``?watch=true``) watch (watch.py); POST creates
(``metadata.generateName`` gets 5 random characters, as names.SimpleNameGenerator does), PUT
updates (409 Conflict for a stale ``metadata.resourceVersion``, none means unconditional; a
no-op keeps the resourceVersion), PATCH takes the three patch types of the Node, DELETE deletes
one (a ``Status`` of Success, as registry.Store does without ReturnDeletedObject) or, on the
collection, every object the field selector matches (the deleted objects as a list). Lists
carry ``metadata.resourceVersion``; objects ``uid``, ``resourceVersion``, ``generation`` (1 at
creation, +1 when ``spec`` changes: resourceslice/strategy.go) and ``creationTimestamp``.
ResourceSlices are decoded and defaulted, and with DRADeviceTaints off (``device_taints``)
stripped of their taints, as taints.py says, then validated as validation.py says; claims and
classes are stored as given.

Authorization, after authentication, before anything else (so a node asking for a slice that
does not exist gets 403, not 404): the Node authorizer and NodeRestriction for node identities,
RBAC for anyone else (resourceauthz.py).

Writes then pass the ValidatingAdmissionPolicies a test applied (admission.py), after
validation, each object of a deletecollection in turn.
"""

from __future__ import annotations

import copy
import datetime
import json
import random
import re
import uuid
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs, unquote

from tests.standin.apiserver import taints, validation
from tests.standin.apiserver.admission import AdmissionPolicies
from tests.standin.apiserver.authz import RESOURCE_GROUP, Authorizer
from tests.standin.apiserver.core import StandinCore
from tests.standin.apiserver.patches import apply_patch, patch_type_of
from tests.standin.apiserver.resourceauthz import ResourceAuthorizationMixin
from tests.standin.apiserver.watch import (
    Change,
    Requirement,
    matches,
    parse_field_selector,
    watch_from_params,
)
from tests.standin.apiserver.wire import Identity, Reply, fail

API_VERSION = f"{RESOURCE_GROUP}/v1"
KINDS = {
    "resourceslices": "ResourceSlice",
    "resourceclaims": "ResourceClaim",
    "deviceclasses": "DeviceClass",
}
_PATH = re.compile(
    rf"/apis/{re.escape(RESOURCE_GROUP)}/v1/(?:namespaces/(?P<namespace>[^/]+)/)?"
    r"(?P<collection>[a-z]+)(?:/(?P<name>[^/]+))?(?:/(?P<subresource>[^/]+))?"
)
_NAME_CHARACTERS = "bcdfghjklmnpqrstvwxz2456789"  # names.SimpleNameGenerator's alphabet


def now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def claim_key(namespace: str, name: str) -> str:
    return f"{namespace}/{name}"


class ResourcesMixin(ResourceAuthorizationMixin, StandinCore):
    """The objects and their routes."""

    authorizer: Authorizer
    _objects: dict[str, dict[str, dict[str, Any]]]  # collection -> key -> object
    _pods: dict[str, dict[str, Any]]  # "<namespace>/<name>" -> Pod
    _admission: AdmissionPolicies  # ValidatingAdmissionPolicies (admission.py)
    _resource_versions: tuple[str, ...]
    device_taints: bool  # the DRADeviceTaints feature gate

    # --- storage (caller holds the lock) ---------------------------------------------------

    def _put(self, collection: str, key: str, obj: dict[str, Any], change: str) -> dict[str, Any]:
        old = self._objects[collection].get(key)
        obj["metadata"]["resourceVersion"] = revision = self._next_revision()
        self._objects[collection][key] = obj
        self._history.add(Change(int(revision), collection, change, copy.deepcopy(obj), old))
        self._changed(f"{collection} {key}: {change}")
        return copy.deepcopy(obj)

    def _remove(self, collection: str, key: str) -> dict[str, Any]:
        obj = self._objects[collection].pop(key)
        obj = copy.deepcopy(obj)
        obj["metadata"]["resourceVersion"] = revision = self._next_revision()
        self._history.add(Change(int(revision), collection, "DELETED", obj, None))
        self._changed(f"{collection} {key}: DELETED")
        return obj

    def _new_object(self, collection: str, body: dict[str, Any], namespace: str) -> dict[str, Any]:
        obj = copy.deepcopy(body)
        obj["apiVersion"], obj["kind"] = API_VERSION, KINDS[collection]
        metadata = obj.setdefault("metadata", {})
        if not metadata.get("name") and metadata.get("generateName"):
            suffix = "".join(random.choice(_NAME_CHARACTERS) for _ in range(5))
            metadata["name"] = f"{metadata['generateName']}{suffix}"
        if namespace:
            metadata["namespace"] = namespace
        metadata.update(uid=str(uuid.uuid4()), generation=1, creationTimestamp=now())
        return obj

    # --- serving (caller holds the lock) ---------------------------------------------------

    def _route_resources(
        self,
        method: str,
        path: str,
        query: str,
        content_type: str | None,
        body: bytes,
        identity: Identity,
    ) -> Reply:
        match = _PATH.fullmatch(path)
        collection = match["collection"] if match else ""
        namespace = unquote(match["namespace"] or "") if match else ""
        name = unquote(match["name"] or "") if match else ""
        namespaced = collection == "resourceclaims"
        if (
            match is None
            or "v1" not in self._resource_versions
            or collection not in KINDS
            or (namespace and not namespaced)
            or (namespaced and not namespace and (name or method != "GET"))
        ):
            raise fail(404, "NotFound", "the server could not find the requested resource", {})
        params = {k: v[-1] for k, v in parse_qs(query).items()}
        watching = params.get("watch") in ("true", "1")
        verb = {
            ("GET", True): "get",
            ("GET", False): "watch" if watching else "list",
            ("POST", False): "create",
            ("PUT", True): "update",
            ("PATCH", True): "patch",
            ("DELETE", True): "delete",
            ("DELETE", False): "deletecollection",
        }.get((method, bool(name)))
        if verb is None:
            message = "the server does not allow this method on the requested resource"
            raise fail(405, "MethodNotAllowed", message, {})
        selector = parse_field_selector(collection, params.get("fieldSelector", ""))
        resource = collection + (f"/{match['subresource']}" if match["subresource"] else "")
        self._authorize_resource(identity, verb, resource, name, namespace, selector)
        if match["subresource"]:
            raise fail(404, "NotFound", "the server could not find the requested resource", {})
        key = claim_key(namespace, name) if namespaced else name
        if verb == "get":
            return Reply(200, self._existing(collection, key, name))
        if verb in ("list", "watch", "deletecollection"):
            return self._collection(verb, collection, namespace, selector, params, identity)
        if verb == "delete":
            obj = self._existing(collection, key, name)
            self._admit_slice(identity, "delete", collection, obj)
            self._admission.admit(identity, "DELETE", collection, name, None, obj)
            deleted = self._remove(collection, key)
            details = {
                "name": name,
                "group": RESOURCE_GROUP,
                "kind": collection,
                "uid": deleted["metadata"]["uid"],
            }
            status = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"}
            return Reply(200, {**status, "details": details})
        document = _json_body(body)
        if verb == "patch":
            document = apply_patch(
                patch_type_of(content_type), self._existing(collection, key, name), body
            )
        if verb == "create":
            return self._create(collection, namespace, document, identity)
        return self._update(collection, key, name, document, identity, patched=verb == "patch")

    def _existing(self, collection: str, key: str, name: str) -> dict[str, Any]:
        try:
            return copy.deepcopy(self._objects[collection][key])
        except KeyError:
            message = f'{collection}.{RESOURCE_GROUP} "{name}" not found'
            details = {"name": name, "group": RESOURCE_GROUP, "kind": collection}
            raise fail(404, "NotFound", message, details) from None

    def _collection(
        self,
        verb: str,
        collection: str,
        namespace: str,
        selector: tuple[Requirement, ...],
        params: dict[str, str],
        identity: Identity,
    ) -> Reply:
        def current() -> list[dict[str, Any]]:
            return [
                copy.deepcopy(obj)
                for obj in self._objects[collection].values()
                if matches(obj, selector)
                and (not namespace or obj["metadata"].get("namespace") == namespace)
            ]

        if verb == "watch":
            stream = watch_from_params(
                params,
                self._cond,
                self._history,
                collection,
                current,
                self._current_revision,
                self._serving,
                selector,
            )
            return Reply(200, {}, stream=_namespaced(stream, namespace))
        items = current()
        if verb == "deletecollection":
            for obj in items:
                self._admit_slice(identity, "delete", collection, obj)
            removed = []
            for obj in items:  # one by one: a policy's refusal leaves the ones before it deleted
                self._admission.admit(identity, "DELETE", collection, "", None, obj)
                removed.append(self._remove(collection, _key_of(collection, obj)))
            items = removed
        for item in items:
            item.pop("apiVersion", None)
            item.pop("kind", None)
        listing = {
            "kind": f"{KINDS[collection]}List",
            "apiVersion": API_VERSION,
            "metadata": {"resourceVersion": str(self._current_revision())},
            "items": items,
        }
        return Reply(200, listing)

    def _create(
        self, collection: str, namespace: str, document: dict[str, Any], identity: Identity
    ) -> Reply:
        _check_kind(collection, document)
        if collection == "resourceslices":
            taints.decode(document)
        self._admit_slice(identity, "create", collection, document)
        obj = self._new_object(collection, document, namespace)
        name = obj["metadata"].get("name") or ""
        errors = validation.object_name(obj["metadata"])
        if collection == "resourceslices":
            taints.drop_disabled(obj.get("spec"), None, enabled=self.device_taints)
            errors += validation.resource_slice(obj.get("spec"))
        if errors:
            raise validation.invalid_object(KINDS[collection], RESOURCE_GROUP, name, errors)
        self._admission.admit(identity, "CREATE", collection, name, obj, None)
        key = claim_key(namespace, name) if namespace else name
        if key in self._objects[collection]:
            message = f'{collection}.{RESOURCE_GROUP} "{name}" already exists'
            details = {"name": name, "group": RESOURCE_GROUP, "kind": collection}
            raise fail(409, "AlreadyExists", message, details)
        return Reply(201, self._put(collection, key, obj, "ADDED"))

    def _update(
        self,
        collection: str,
        key: str,
        name: str,
        document: dict[str, Any],
        identity: Identity,
        patched: bool = False,
    ) -> Reply:
        _check_kind(collection, document)
        if collection == "resourceslices":
            taints.decode(document, patched=patched)
        current = self._existing(collection, key, name)
        given = document.get("metadata")
        metadata: dict[str, Any] = given if isinstance(given, dict) else {}
        if metadata.get("name", name) != name:
            message = (
                f"the name of the object ({metadata.get('name')}) does not match the name on "
                f"the URL ({name})"
            )
            raise fail(400, "BadRequest", message)
        wanted = metadata.get("resourceVersion")
        if wanted not in (None, "", current["metadata"]["resourceVersion"]):
            message = (
                f'Operation cannot be fulfilled on {collection}.{RESOURCE_GROUP} "{name}": the '
                "object has been modified; please apply your changes to the latest version and "
                "try again"
            )
            details = {"name": name, "group": RESOURCE_GROUP, "kind": collection}
            raise fail(409, "Conflict", message, details)
        updated = copy.deepcopy(current)
        for field in ("labels", "annotations"):
            if metadata.get(field) is None:
                updated["metadata"].pop(field, None)
            else:
                updated["metadata"][field] = metadata[field]
        for field in ("spec", "status"):
            if field in document:
                updated[field] = copy.deepcopy(document[field])
        spec_changed = updated.get("spec") != current.get("spec")  # before fields are dropped
        if collection == "resourceslices":
            old_spec = current.get("spec") or {}
            taints.drop_disabled(updated.get("spec"), old_spec, enabled=self.device_taints)
            errors = validation.resource_slice(updated.get("spec"), old_spec)
            if errors:
                raise validation.invalid_object(KINDS[collection], RESOURCE_GROUP, name, errors)
        if spec_changed:
            updated["metadata"]["generation"] = current["metadata"].get("generation", 1) + 1
        # Even a no-op is admitted: only the storage notices that nothing changed.
        self._admission.admit(identity, "UPDATE", collection, name, updated, current)
        if updated == current:  # a no-op keeps its resourceVersion, as on the real server
            return Reply(200, current)
        return Reply(200, self._put(collection, key, updated, "MODIFIED"))


def _key_of(collection: str, obj: dict[str, Any]) -> str:
    metadata = obj["metadata"]
    if collection == "resourceclaims":
        return claim_key(metadata["namespace"], metadata["name"])
    return str(metadata["name"])


def _namespaced(stream: Iterator[bytes], namespace: str) -> Iterator[bytes]:
    """A namespaced watch sees its namespace's objects only."""
    for line in stream:
        if namespace:
            obj = json.loads(line)["object"]
            if obj.get("kind") != "Status" and obj["metadata"].get("namespace") != namespace:
                continue
        yield line


def _json_body(body: bytes) -> dict[str, Any]:
    try:
        document = json.loads(body)
    except ValueError as error:
        raise fail(400, "BadRequest", f"json: {error}") from None
    if not isinstance(document, dict):
        raise fail(400, "BadRequest", "the body must be a JSON object")
    return document


def _check_kind(collection: str, document: dict[str, Any]) -> None:
    """The decoder's refusal of another kind or group version in the body."""
    kind, version = document.get("kind"), document.get("apiVersion")
    if version not in (None, API_VERSION):
        message = (
            f"the API version in the data ({version}) does not match the expected API "
            f"version ({API_VERSION})"
        )
        raise fail(400, "BadRequest", message)
    if kind not in (None, KINDS[collection]):
        message = (
            f"the kind in the data ({kind}) does not match the expected kind ({KINDS[collection]})"
        )
        raise fail(400, "BadRequest", message)
