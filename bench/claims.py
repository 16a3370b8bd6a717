"""The benchmarks' ResourceClaims as the scheduler leaves them: created for a DeviceClass that
exists, then allocated (``status.allocation`` written, as the scheduler writes it) from a
driver's pool, so that the publisher's claims watch reads and keeps each one
(apiserver/keeping/allocations.py: a claim with no result of its driver is dropped at once,
the cheapest path there is); and the pods that hold a node's token (``token_pod``), for the
real scheduler to place.
"""

from __future__ import annotations

from typing import Any

from tests.kube.client import KubeClient
from tests.kube.controlplane import ControlPlane
from token_resource.apiserver.objects.slices import device_class, device_class_name

RESOURCE_API = "/apis/resource.k8s.io/v1"
CLAIMS = f"{RESOURCE_API}/namespaces/default/resourceclaims"
REQUEST = "seat"


def ensure_class(cp: ControlPlane, driver: str, resource: str) -> None:
    """The DeviceClass the claims ask for, as ``token-resource device-classes`` prints it."""
    cp.ensure(f"{RESOURCE_API}/deviceclasses", device_class(driver, resource))


def new_claim(name: str, resource: str) -> dict[str, Any]:
    request = {"name": REQUEST, "exactly": {"deviceClassName": device_class_name(resource)}}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"devices": {"requests": [request]}},
    }


def allocated_claim(
    client: KubeClient, name: str, resource: str, driver: str, pool: str, device: str
) -> None:
    """Create the claim, then allocate ``pool``'s ``device`` of ``driver`` to it."""
    status, created = client.request("POST", CLAIMS, new_claim(name, resource))
    if status != 201:
        raise AssertionError(f"POST {CLAIMS}: {status} {created}")
    result = {"request": REQUEST, "driver": driver, "pool": pool, "device": device}
    created["status"] = {"allocation": {"devices": {"results": [result]}}}
    status, answer = client.request("PUT", f"{CLAIMS}/{name}/status", created)
    if status != 200:
        raise AssertionError(f"PUT {CLAIMS}/{name}/status: {status} {answer}")


def delete_claim(client: KubeClient, name: str) -> None:
    status, answer = client.request("DELETE", f"{CLAIMS}/{name}")
    if status != 200:
        raise AssertionError(f"DELETE {CLAIMS}/{name}: {status} {answer}")


def token_pod(client: KubeClient, node: str, resource: str) -> None:
    """A claim of one token of ``resource`` and a pod on ``node`` holding it (both
    ``<node>-token``), for the scheduler to place."""
    name = f"{node}-token"
    request = {"name": REQUEST, "exactly": {"deviceClassName": device_class_name(resource)}}
    claim = {"metadata": {"name": name}, "spec": {"devices": {"requests": [request]}}}
    client.create(CLAIMS, claim)
    container = {
        "name": "app",
        "image": "example:1",
        "resources": {"claims": [{"name": "token", "request": REQUEST}]},
    }
    spec = {
        "nodeSelector": {"kubernetes.io/hostname": node},
        "resourceClaims": [{"name": "token", "resourceClaimName": name}],
        "containers": [container],
        # The API server's TaintNodesByCondition puts this on every new Node; without a
        # node-lifecycle controller (tests/kube/controlplane.py) nothing takes it off.
        "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists"}],
    }
    client.create("/api/v1/namespaces/default/pods", {"metadata": {"name": name}, "spec": spec})
