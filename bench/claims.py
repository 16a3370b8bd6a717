"""The benchmarks' ResourceClaims as the scheduler leaves them: created for a DeviceClass that
exists, then allocated (``status.allocation`` written, as the scheduler writes it) from a
driver's pool, so that the publisher's claims watch reads and keeps each one
(apiserver/keeping/allocations.py: a claim with no result of its driver is dropped at once,
the cheapest path there is).
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
