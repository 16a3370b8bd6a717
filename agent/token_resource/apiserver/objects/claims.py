"""Reading a ResourceClaim the kubelet asks the driver to prepare: which of the driver's devices
the scheduler allocated to it, and for which pods.

A node identity may read a claim only while a pod bound to its node references it (the Node
authorizer's graph), which is exactly when the kubelet asks.

The claims of a node's prepares are read over one connection, kept (:class:`ClaimClient`).
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import quote

from token_resource.apiserver.connection.client import ApiClient, ApiError, KubeError
from token_resource.apiserver.connection.kept import KeptClient
from token_resource.apiserver.objects.slices import API_VERSION
from token_resource.config.model import KubernetesSettings

NOT_FOUND = 404


@dataclass(frozen=True)
class Allocated:
    """One allocated device: the claim's request it serves, and where it comes from."""

    request: str
    pool: str
    device: str


@dataclass(frozen=True)
class Claim:
    namespace: str
    name: str
    uid: str
    # The driver's devices only, in the allocation's order.
    devices: tuple[Allocated, ...]
    # The pods the claim is reserved for, by name.
    pods: tuple[str, ...]


class ClaimError(KubeError):
    """The claim cannot be prepared; the text says why, for the kubelet's event."""


def claim_path(namespace: str, name: str) -> str:
    return (
        f"/apis/{API_VERSION}/namespaces/{quote(namespace, safe='')}/resourceclaims/"
        f"{quote(name, safe='')}"
    )


def read_claim(client: ApiClient, namespace: str, name: str, uid: str, driver: str) -> Claim:
    """The claim as allocated, checked to be the one the kubelet means (by uid) and allocated;
    ClaimError otherwise, KubeError when the API server cannot be asked."""
    try:
        item = client.get(claim_path(namespace, name))
    except ApiError as error:
        if error.status == NOT_FOUND:
            raise ClaimError(f"ResourceClaim {namespace}/{name} does not exist") from None
        raise
    metadata = item.get("metadata") or {}
    if metadata.get("uid") != uid:
        raise ClaimError(
            f"ResourceClaim {namespace}/{name} has uid {metadata.get('uid')}, not {uid}: it was "
            "deleted and made again"
        )
    status = item.get("status") or {}
    allocation = status.get("allocation")
    if not isinstance(allocation, dict):
        raise ClaimError(f"ResourceClaim {namespace}/{name} is not allocated")
    results = (allocation.get("devices") or {}).get("results") or []
    devices = tuple(
        Allocated(str(result.get("request")), str(result.get("pool")), str(result.get("device")))
        for result in results
        if isinstance(result, dict) and result.get("driver") == driver
    )
    pods = tuple(
        str(consumer.get("name"))
        for consumer in status.get("reservedFor") or []
        if isinstance(consumer, dict) and consumer.get("resource") == "pods"
    )
    return Claim(namespace, name, uid, devices, pods)


class ClaimClient:
    """Reads claims over one kept connection (apiserver.connection.kept)."""

    def __init__(self) -> None:
        self._kept = KeptClient(final=(ClaimError,))

    def read(
        self, settings: KubernetesSettings, namespace: str, name: str, uid: str, driver: str
    ) -> Claim:
        """As :func:`read_claim`."""
        return self._kept.call(
            settings, lambda client: read_claim(client, namespace, name, uid, driver)
        )

    def close(self) -> None:
        """Close the connection, once a read under way is done; later reads fail."""
        self._kept.close()
