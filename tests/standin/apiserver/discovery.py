"""API discovery as the real server answers it (the unaggregated form, whatever the Accept
header asks): ``GET /api``, ``GET /apis``, ``GET /apis/resource.k8s.io`` and
``GET /apis/resource.k8s.io/<version>``, for any authenticated user (system:discovery).

Which versions of resource.k8s.io exist is the stand-in's ``resource_versions``: ``("v1",)``
for a 1.34 to 1.36 server with defaults, ``("v1beta1", "v1beta2")`` for 1.33 with DRA on,
``()`` for a server without the group (1.32 with DRA off): then ``/apis/resource.k8s.io`` is
404 and ``/apis`` does not list it. Only v1 serves objects; a beta version is in discovery
only (its objects differ, and the agent must not use them).
"""

from __future__ import annotations

from typing import Any

from tests.standin.apiserver.authz import RESOURCE_GROUP
from tests.standin.apiserver.wire import Reply, fail

_VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
_RESOURCES = (
    ("deviceclasses", "deviceclass", False, "DeviceClass"),
    ("resourceclaims", "resourceclaim", True, "ResourceClaim"),
    ("resourceclaims/status", "", True, "ResourceClaim"),
    ("resourceclaimtemplates", "resourceclaimtemplate", True, "ResourceClaimTemplate"),
    ("resourceslices", "resourceslice", False, "ResourceSlice"),
)


def discovery(path: str, versions: tuple[str, ...]) -> Reply | None:
    """The answer for a discovery path; None if ``path`` is not one."""
    if path == "/api":
        return Reply(200, {"kind": "APIVersions", "versions": ["v1"]})
    group = _group(versions)
    if path == "/apis":
        return Reply(
            200, {"kind": "APIGroupList", "apiVersion": "v1", "groups": [group] if group else []}
        )
    if path == f"/apis/{RESOURCE_GROUP}":
        if group is None:
            raise fail(404, "NotFound", "the server could not find the requested resource", {})
        return Reply(200, {"kind": "APIGroup", "apiVersion": "v1", **group})
    prefix = f"/apis/{RESOURCE_GROUP}/"
    if path.startswith(prefix) and "/" not in path[len(prefix) :]:
        version = path[len(prefix) :]
        if version not in versions:
            raise fail(404, "NotFound", "the server could not find the requested resource", {})
        return Reply(200, _resource_list(version))
    return None


def _group(versions: tuple[str, ...]) -> dict[str, Any] | None:
    if not versions:
        return None
    listed = [{"groupVersion": f"{RESOURCE_GROUP}/{v}", "version": v} for v in versions]
    return {"name": RESOURCE_GROUP, "versions": listed, "preferredVersion": listed[0]}


def _resource_list(version: str) -> dict[str, Any]:
    resources = []
    for name, singular, namespaced, kind in _RESOURCES:
        verbs = ["get", "patch", "update"] if "/" in name else _VERBS
        resources.append(
            {
                "name": name,
                "singularName": singular,
                "namespaced": namespaced,
                "kind": kind,
                "verbs": verbs,
            }
        )
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{RESOURCE_GROUP}/{version}",
        "resources": resources,
    }
