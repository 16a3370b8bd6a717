"""Calls to the API server over one connection, made at the first call and kept.

A call with other settings than the connection's (a reload changed them) makes a new one, and
so does the call after a failure, with the credentials read afresh. A call on a kept connection
that broke off in transport, or was refused as unauthenticated, is made once more on a new
one: an API server, or a load balancer before it, closes connections left idle, and a client
certificate that expired (the kubelet's, rotated meanwhile) or a service-account token that
did is refused on a connection made with it. Blocking, for a worker thread; calls take turns
(http.client's connection is for one thread at a time).

A new connection is a TLS handshake and the credentials read again: most of the CPU of a
claim's read, and of a Lease's renewal every retry period.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

from token_resource.apiserver.connection.client import (
    REQUEST_TIMEOUT,
    ApiClient,
    ApiError,
    KubeError,
)
from token_resource.apiserver.connection.credentials import load_credentials
from token_resource.config.model import KubernetesSettings

UNAUTHORIZED = 401
_T = TypeVar("_T")


class KeptClient:
    def __init__(self, timeout: float = REQUEST_TIMEOUT, final: tuple[type[KubeError], ...] = ()):
        """``timeout`` bounds each request; errors of the ``final`` kinds are the answer (a
        claim that cannot be prepared), neither tried again nor a reason for a new connection."""
        self._timeout = timeout
        self._final = final
        self._lock = threading.Lock()
        self._client: ApiClient | None = None
        self._settings: KubernetesSettings | None = None
        self._closed = False

    def call(self, settings: KubernetesSettings, action: Callable[[ApiClient], _T]) -> _T:
        """``action(client)``, on the kept connection or a new one."""
        with self._lock:
            if self._closed:
                raise KubeError("stopping")
            kept = self._client is not None and settings == self._settings
            try:
                return self._call_once(settings, action)
            except self._final:
                raise
            except ApiError as error:
                if not kept or error.status != UNAUTHORIZED:
                    raise
            except KubeError:
                if not kept:
                    raise
            return self._call_once(settings, action)

    def close(self) -> None:
        """Close the connection, once a call under way is done; later calls fail."""
        with self._lock:
            self._closed = True
            self._drop()

    def _call_once(self, settings: KubernetesSettings, action: Callable[[ApiClient], _T]) -> _T:
        if self._client is None or settings != self._settings:
            self._drop()
            credentials = load_credentials(settings)
            self._client, self._settings = ApiClient(credentials, self._timeout), settings
        try:
            return action(self._client)
        except self._final:
            raise
        except KubeError:
            self._drop()  # the next call reads the credentials again
            raise

    def _drop(self) -> None:
        if self._client is not None:
            self._client.close()
        self._client = self._settings = None
