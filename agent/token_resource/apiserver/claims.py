"""Reading a ResourceClaim the kubelet asks the driver to prepare: which of the driver's devices
the scheduler allocated to it, and for which pods.

A node identity may read a claim only while a pod bound to its node references it (the Node
authorizer's graph), which is exactly when the kubelet asks.

The claims of a node's prepares are read over one connection, kept (:class:`ClaimClient`): a
claim is one GET, a new connection for each a TLS handshake and the credentials read again,
which cost the agent most of a prepare's CPU.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from urllib.parse import quote

from token_resource.apiserver.client import ApiClient, ApiError, KubeError
from token_resource.apiserver.credentials import load_credentials
from token_resource.apiserver.slices import API_VERSION
from token_resource.config.model import KubernetesSettings

NOT_FOUND = 404
UNAUTHORIZED = 401


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


def read_claim(client: ApiClient, namespace: str, name: str, uid: str, driver: str) -> Claim:
    """The claim as allocated, checked to be the one the kubelet means (by uid) and allocated;
    ClaimError otherwise, KubeError when the API server cannot be asked."""
    path = (
        f"/apis/{API_VERSION}/namespaces/{quote(namespace, safe='')}/resourceclaims/"
        f"{quote(name, safe='')}"
    )
    try:
        item = client.get(path)
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
    """Reads claims over one connection, made at the first read and kept.

    A read with other settings than the connection's (a reload changed them) makes a new one,
    and so does the read after a failure, with the credentials read afresh. A read on a kept
    connection that broke off in transport, or was refused as unauthenticated, is tried once
    more on a new one: an API server, or a load balancer before it, closes connections left
    idle, and a client certificate that expired (the kubelet's, rotated meanwhile) is refused
    on a connection made with it. Blocking, for a worker thread; reads take turns
    (http.client's connection is for one thread at a time).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._client: ApiClient | None = None
        self._settings: KubernetesSettings | None = None
        self._closed = False

    def read(
        self, settings: KubernetesSettings, namespace: str, name: str, uid: str, driver: str
    ) -> Claim:
        """As :func:`read_claim`."""
        with self._lock:
            if self._closed:
                raise KubeError("the DRA driver is stopping")
            kept = self._client is not None and settings == self._settings
            try:
                return self._read_once(settings, namespace, name, uid, driver)
            except ClaimError:
                raise
            except ApiError as error:
                if not kept or error.status != UNAUTHORIZED:
                    raise
            except KubeError:
                if not kept:
                    raise
            return self._read_once(settings, namespace, name, uid, driver)

    def close(self) -> None:
        """Close the connection, once a read under way is done; later reads fail."""
        with self._lock:
            self._closed = True
            self._drop()

    def _read_once(
        self, settings: KubernetesSettings, namespace: str, name: str, uid: str, driver: str
    ) -> Claim:
        if self._client is None or settings != self._settings:
            self._drop()
            self._client, self._settings = ApiClient(load_credentials(settings)), settings
        try:
            return read_claim(self._client, namespace, name, uid, driver)
        except ClaimError:
            raise
        except KubeError:
            self._drop()  # the next read reads the credentials again
            raise

    def _drop(self) -> None:
        if self._client is not None:
            self._client.close()
        self._client = self._settings = None
