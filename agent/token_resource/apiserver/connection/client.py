"""HTTPS requests to the Kubernetes API server, and the errors they end in.

The standard library does the HTTP (``http.client`` over an ``ssl`` context that always
verifies the server against the kubeconfig's CA). Every call is blocking: the agent runs them
in a worker thread.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import platform
import socket
import ssl
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import urlsplit

from token_resource import __version__

REQUEST_TIMEOUT = 10.0
UNPROCESSABLE = 422  # among others, a JSON patch whose "test" op failed
JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"
JSON = "application/json"
_T = TypeVar("_T")
_Client = TypeVar("_Client", bound="ApiClient")
# Machine names as Go's GOARCH says them, which client-go's User-Agent carries.
_GO_ARCH = {"x86_64": "amd64", "aarch64": "arm64", "armv7l": "arm", "i686": "386"}


def user_agent() -> str:
    """As client-go's clients say who they are (``kubectl/v1.37.2 (linux/amd64) ...``): the
    audit log and ``apiserver_request_total`` tell agents of different versions apart."""
    machine = platform.machine().lower()
    return f"token-resource/{__version__} ({sys.platform}/{_GO_ARCH.get(machine, machine)})"


USER_AGENT = user_agent()


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
    """Requests to one API server with one set of credentials; JSON in, JSON out.

    Requests in a row share one connection (HTTP/1.1 keep-alive: one TLS handshake for a sync
    of many slices); :meth:`close` ends it, as does any failure.
    """

    def __init__(self, credentials: Credentials, timeout: float = REQUEST_TIMEOUT) -> None:
        self._credentials = credentials
        self._timeout = timeout
        self._connection: http.client.HTTPSConnection | None = None

    def __enter__(self: _Client) -> _Client:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def timeout(self) -> float:
        return self._timeout

    @timeout.setter
    def timeout(self, seconds: float) -> None:
        """Bound the requests from now on, on the open connection too (each blocking step:
        connecting, sending, waiting for the answer)."""
        self._timeout = seconds
        if self._connection is not None:
            self._connection.timeout = seconds
            if self._connection.sock is not None:
                self._connection.sock.settimeout(seconds)

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None

    def get(self, path: str) -> dict[str, Any]:
        return self._request("GET", path)

    def json_patch(self, path: str, operations: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """Apply an RFC 6902 JSON patch to the object at ``path``."""
        body = json.dumps(list(operations)).encode()
        return self._request("PATCH", path, body=body, content_type=JSON_PATCH)

    def merge_patch(self, path: str, patch: Mapping[str, Any]) -> dict[str, Any]:
        """Apply an RFC 7386 JSON merge patch to the object at ``path``."""
        body = json.dumps(patch).encode()
        return self._request("PATCH", path, body=body, content_type=MERGE_PATCH)

    def create(self, path: str, item: Mapping[str, Any]) -> dict[str, Any]:
        """POST ``item`` to the collection at ``path``."""
        return self._request("POST", path, body=json.dumps(item).encode(), content_type=JSON)

    def replace(self, path: str, item: Mapping[str, Any]) -> dict[str, Any]:
        """PUT ``item`` (with its metadata.resourceVersion: 409 if it changed meanwhile)."""
        return self._request("PUT", path, body=json.dumps(item).encode(), content_type=JSON)

    def delete(self, path: str) -> dict[str, Any]:
        return self._request("DELETE", path)

    def watch(
        self,
        path: str,
        timeout: float,
        connected: Callable[[socket.socket], None] | None = None,
    ) -> Watch:
        """A watch of the collection at ``path`` (with its query): its events, as the API
        server sends them, until it ends the watch or :meth:`Watch.close` is called.

        Connecting and the response's headers take at most the client's request timeout;
        ``timeout`` bounds each read of the events after that. ``connected`` gets the socket
        as soon as there is one, so that another thread can shut it down while the watch is
        still being opened (into a partition, say).
        """
        connection = self._connect(self._timeout)
        try:
            # Connected first, to keep the socket: a response that will close the connection
            # takes it from the connection (http.client), and close() must reach it.
            self._read(connection.connect)
            sock = connection.sock
            if connected is not None:
                connected(sock)
            response = self._send(connection, "GET", path)
            sock.settimeout(timeout)
        except KubeError:
            connection.close()  # an ApiError closed it already; a broken transport did not
            raise
        return Watch(connection, response, sock, self._credentials.server)

    def _request(
        self, method: str, path: str, body: bytes | None = None, content_type: str | None = None
    ) -> dict[str, Any]:
        if self._connection is None:
            self._connection = self._connect(self._timeout)
        try:
            response = self._send(self._connection, method, path, body, content_type)
            data = self._read(response.read)
            if response.will_close:
                self.close()
        except BaseException:
            self.close()
            raise
        try:
            answer: dict[str, Any] = json.loads(data)
        except ValueError:
            raise KubeError(f"API server answered {method} {path} with no JSON") from None
        return answer

    def _connect(self, timeout: float) -> http.client.HTTPSConnection:
        url = urlsplit(self._credentials.server)
        return http.client.HTTPSConnection(
            url.hostname or "", url.port or 443, timeout=timeout, context=self._credentials.tls
        )

    def _send(
        self,
        connection: http.client.HTTPSConnection,
        method: str,
        path: str,
        body: bytes | None = None,
        content_type: str | None = None,
    ) -> http.client.HTTPResponse:
        """The response to the request, once its status says success; ApiError otherwise."""
        headers = {"Accept": "application/json", "User-Agent": USER_AGENT}
        if content_type:
            headers["Content-Type"] = content_type
        if self._credentials.token:
            headers["Authorization"] = f"Bearer {self._credentials.token}"
        prefix = urlsplit(self._credentials.server).path.rstrip("/")
        response = self._read(lambda: _begin(connection, method, prefix + path, body, headers))
        if response.status >= 300:
            message = _status_message(self._read(response.read))
            connection.close()
            raise ApiError(response.status, response.reason, message)
        return response

    def _read(self, call: Callable[[], _T]) -> _T:
        """``call``, with the transport's failures as KubeError naming the server."""
        server = self._credentials.server
        try:
            return call()
        except ssl.SSLError as error:
            raise KubeError(f"TLS with {server} failed: {error}") from None
        except OSError as error:
            raise KubeError(f"API server {server} unreachable: {error}") from None
        except http.client.HTTPException as error:
            # Not an OSError: an answer cut short (IncompleteRead) or not HTTP at all.
            raise KubeError(f"API server {server} answered badly: {error!r}") from None


def _begin(
    connection: http.client.HTTPSConnection,
    method: str,
    target: str,
    body: bytes | None,
    headers: Mapping[str, str],
) -> http.client.HTTPResponse:
    connection.request(method, target, body=body, headers=dict(headers))
    return connection.getresponse()


class Watch:
    """One watch's events (newline-separated JSON, ``{"type": ..., "object": ...}``).

    Blocking, for a worker thread; :meth:`close` from another thread ends :meth:`events`.
    """

    def __init__(
        self,
        connection: http.client.HTTPSConnection,
        response: http.client.HTTPResponse,
        sock: socket.socket,
        server: str,
    ) -> None:
        self._connection = connection
        self._response = response
        self._sock = sock
        self._server = server
        self._closed = False
        self._reading = False

    def events(self) -> Iterator[dict[str, Any]]:
        self._reading = True
        try:
            while True:
                line = self._response.readline()
                if not line:
                    return  # the API server ended the watch (its timeout)
                if line.strip():
                    event: dict[str, Any] = json.loads(line)
                    yield event
        except (OSError, ValueError, http.client.HTTPException) as error:
            if self._closed:
                return
            raise KubeError(f"watch on {self._server} broke off: {error}") from None
        finally:
            self._release()

    def _release(self) -> None:
        self._response.close()  # the response's file holds the socket open until closed
        self._connection.close()
        self._sock.close()

    def close(self) -> None:
        """End the watch from another thread: its blocked read returns (and closes the
        connection); a watch never read is closed here."""
        self._closed = True
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        if not self._reading:
            self._release()


def _status_message(data: bytes) -> str:
    """The message of a Kubernetes Status body, or the start of whatever came instead."""
    try:
        status = json.loads(data)
        return str(status.get("message") or status)
    except (ValueError, AttributeError):
        return data[:200].decode(errors="replace")
