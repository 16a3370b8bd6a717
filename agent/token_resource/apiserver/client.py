"""HTTPS requests to the Kubernetes API server, and the errors they end in.

The standard library does the HTTP (``http.client`` over an ``ssl`` context that always
verifies the server against the kubeconfig's CA). Every call is blocking: the agent runs them
in a worker thread.
"""

from __future__ import annotations

import http.client
import json
import ssl
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

REQUEST_TIMEOUT = 10.0
UNPROCESSABLE = 422  # among others, a JSON patch whose "test" op failed
JSON_PATCH = "application/json-patch+json"


class KubeError(Exception):
    """The API server could not be used: no credentials, unreachable, or it said no."""


class ApiError(KubeError):
    """The API server answered with an error status."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status = status


@dataclass(frozen=True)
class Credentials:
    server: str  # https://host:port[/prefix]
    tls: ssl.SSLContext
    token: str | None


class ApiClient:
    """Requests to one API server with one set of credentials; JSON in, JSON out."""

    def __init__(self, credentials: Credentials, timeout: float = REQUEST_TIMEOUT) -> None:
        self._credentials = credentials
        self._timeout = timeout

    def get(self, path: str) -> dict[str, Any]:
        return self._request("GET", path)

    def json_patch(self, path: str, operations: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """Apply an RFC 6902 JSON patch to the object at ``path``."""
        body = json.dumps(list(operations)).encode()
        return self._request("PATCH", path, body=body, content_type=JSON_PATCH)

    def _request(
        self, method: str, path: str, body: bytes | None = None, content_type: str | None = None
    ) -> dict[str, Any]:
        url = urlsplit(self._credentials.server)
        headers = {"Accept": "application/json", "User-Agent": "token-resource"}
        if content_type:
            headers["Content-Type"] = content_type
        if self._credentials.token:
            headers["Authorization"] = f"Bearer {self._credentials.token}"
        connection = http.client.HTTPSConnection(
            url.hostname or "",
            url.port or 443,
            timeout=self._timeout,
            context=self._credentials.tls,
        )
        try:
            connection.request(method, url.path.rstrip("/") + path, body=body, headers=headers)
            response = connection.getresponse()
            data = response.read()
        except ssl.SSLError as error:
            raise KubeError(f"TLS with {self._credentials.server} failed: {error}") from None
        except OSError as error:
            raise KubeError(f"API server {self._credentials.server} unreachable: {error}") from None
        finally:
            connection.close()
        if response.status >= 300:
            raise ApiError(response.status, response.reason, _status_message(data))
        try:
            answer: dict[str, Any] = json.loads(data)
        except ValueError:
            raise KubeError(f"API server answered {method} {path} with no JSON") from None
        return answer


def _status_message(data: bytes) -> str:
    """The message of a Kubernetes Status body, or the start of whatever came instead."""
    try:
        status = json.loads(data)
        return str(status.get("message") or status)
    except (ValueError, AttributeError):
        return data[:200].decode(errors="replace")
