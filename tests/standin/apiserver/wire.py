"""The API server stand-in's wire: identities, replies and errors (``Status`` objects), the
request log, and the HTTPS server that carries them (HTTP/1.1, keep-alive, chunked bodies both
ways: a watch answers with a chunked stream of JSON lines, as the real server does)."""

from __future__ import annotations

import contextlib
import json
import logging
import re
import select
import socket
import ssl
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import parse_qs, unquote

if TYPE_CHECKING:  # watch.py builds on this module
    from tests.standin.apiserver.watch import Change

LOG = logging.getLogger("apiserver-standin")

MAX_BODY = 3 * 1024 * 1024  # the real server's limit for a request body
_HANDSHAKE_TIMEOUT = 10.0
_IDLE_TIMEOUT = 60.0  # a keep-alive connection with no request for this long is closed


@dataclass(frozen=True)
class Identity:
    """An authenticated user, as the authenticators hand it to the authorizers."""

    user: str
    groups: tuple[str, ...]
    token: str | None = None  # the bearer token it authenticated with
    # user.Info's Extra: (key, values) pairs, e.g. the node of a pod's service-account token.
    extra: tuple[tuple[str, tuple[str, ...]], ...] = ()


@dataclass(frozen=True)
class Reply:
    status: int
    body: Mapping[str, Any]
    error: str | None = None  # for the log only
    # A watch: JSON lines sent as HTTP chunks while the iterator yields (it ends the stream).
    stream: Iterator[bytes] | None = field(default=None, compare=False)


class Fail(Exception):
    """Answer the request with this Status."""

    def __init__(self, reply: Reply) -> None:
        super().__init__(reply.body.get("message"))
        self.reply = reply


def status_object(
    code: int, reason: str, message: str, details: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """A ``Status`` as the API server sends it for an error."""
    status: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
    }
    if details is not None:
        status["details"] = dict(details)
    status["code"] = code
    return status


def fail(
    code: int,
    reason: str,
    message: str,
    details: Mapping[str, Any] | None = None,
    error: str | None = None,
) -> Fail:
    return Fail(Reply(code, status_object(code, reason, message, details), error))


@dataclass(frozen=True)
class LoggedRequest:
    """One request as the stand-in saw it, with its answer."""

    method: str
    path: str  # without the query string
    query: str
    content_type: str | None  # as sent, parameters and all
    identity: str | None  # the authenticated user name; None if authentication failed
    status: int
    body: bytes  # the request body
    response: Any  # the JSON answer (a Node, or a Status for errors)
    error: str | None = None  # why a patch failed, in the library's words (never sent)
    # The connection it came on: 1 for the first whose TLS handshake completed, and so on.
    connection: int = 0
    # What it wrote, oldest first, as watches see it: with
    # ``identity``, the record of who wrote what. A refused request may have written some (a
    # deletecollection that an admission policy stops part way).
    changes: tuple[Change, ...] = ()
    # When it was served (time.monotonic() of this process, the tests' clock too; after any
    # hold of a cut-off client): when its writes took effect.
    at: float = 0.0
    user_agent: str | None = None  # the User-Agent header; None without one

    def json(self) -> Any:
        """The request body as JSON."""
        return json.loads(self.body)

    def __str__(self) -> str:
        text = f"{self.method} {self.path} [{self.identity or 'unauthenticated'}] -> {self.status}"
        if self.content_type:
            text += f" ({self.content_type})"
        if self.body:
            text += f" {self.body[:200].decode(errors='replace')}"
        if self.error:
            text += f": {self.error}"
        elif self.status >= 400 and isinstance(self.response, dict):
            text += f": {self.response.get('message')}"
        return text


class Handles(Protocol):
    """What the server hands its requests to (the stand-in)."""

    tls: ssl.SSLContext

    def handle(
        self,
        method: str,
        target: str,
        headers: Mapping[str, str],
        body: bytes,
        peer_cert: Mapping[str, Any] | None,
        connection: int,
        gone: Callable[[], bool],
    ) -> Reply | None:
        """None: no answer at all; the connection is closed."""
        ...

    def connected(self) -> int:
        """A connection's handshake completed: its number."""
        ...

    def tls_failed(self, error: str) -> None: ...


class Server(ThreadingHTTPServer):
    """Accepts TCP connections; each request thread does its own TLS handshake, so a client
    that never finishes one blocks nobody."""

    daemon_threads = False
    block_on_close = True  # server_close() joins every request thread

    def __init__(self, address: tuple[str, int], standin: Handles) -> None:
        self.standin = standin
        self._connections: set[ssl.SSLSocket] = set()
        self._connections_lock = threading.Lock()
        super().__init__(address, _Handler)
        self.socket = standin.tls.wrap_socket(
            self.socket, server_side=True, do_handshake_on_connect=False
        )

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._connections_lock:
            self._connections.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self._connections_lock:
            self._connections.discard(request)
        super().shutdown_request(request)

    def close_connections(self) -> None:
        """Cut every open connection; the request threads see EOF and end."""
        with self._connections_lock:
            connections = list(self._connections)
        for connection in connections:
            # The plain socket's shutdown: the SSL object stays its request thread's.
            with contextlib.suppress(OSError):
                socket.socket.shutdown(connection, socket.SHUT_RDWR)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Failed handshakes and cut connections are normal here; no tracebacks on stderr."""
        LOG.debug("connection from %s ended with an error", client_address, exc_info=True)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: Server
    request: ssl.SSLSocket
    timeout = _IDLE_TIMEOUT

    def setup(self) -> None:
        # Headers and body leave in two writes: without this, each answer waits for the
        # client's delayed ACK (Nagle), 40 ms a request.
        self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.request.settimeout(_HANDSHAKE_TIMEOUT)
        try:
            self.request.do_handshake()
        except (ssl.SSLError, OSError) as error:
            self.server.standin.tls_failed(f"{self.client_address[0]}: {error}")
            raise
        self.connection_number = self.server.standin.connected()
        super().setup()

    def do_GET(self) -> None:
        self._serve()

    def do_PATCH(self) -> None:
        self._serve()

    def do_PUT(self) -> None:
        self._serve()

    def do_POST(self) -> None:
        self._serve()

    def do_DELETE(self) -> None:
        self._serve()

    def _serve(self) -> None:
        try:
            body = self._read_body()
        except Fail as failure:
            self.close_connection = True
            self._send(failure.reply)
            return
        headers = {key.lower(): value for key, value in self.headers.items()}
        reply = self.server.standin.handle(
            self.command,
            self.path,
            headers,
            body,
            self.request.getpeercert(),
            self.connection_number,
            self._client_gone,
        )
        if reply is None:
            self.close_connection = True
            return
        self._send(reply)

    def _client_gone(self) -> bool:
        """Whether the client gave up on the request it waits for an answer to: its connection
        became readable (closed, or more sent, which an HTTP/1.1 client waiting never does)."""
        try:
            readable, _, _ = select.select([self.request], [], [], 0)
        except (OSError, ValueError):  # closed under it
            return True
        return bool(readable) or self.request.pending() > 0

    def _read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks: list[bytes] = []
            total = 0
            while True:
                size = int(self.rfile.readline().split(b";")[0], 16)
                total += size
                if total > MAX_BODY:
                    raise fail(413, "RequestEntityTooLarge", "Request entity too large")
                if not size:  # the last chunk, then trailers up to an empty line
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size + 2)[:size])  # with its CRLF
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY:
            raise fail(413, "RequestEntityTooLarge", "Request entity too large")
        return self.rfile.read(length)

    def _send(self, reply: Reply) -> None:
        if reply.stream is not None:
            self._send_stream(reply.stream)
            return
        data = json.dumps(reply.body).encode()
        self.send_response(reply.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(data)

    def _send_stream(self, stream: Iterator[bytes]) -> None:
        """A watch: 200 at once, then each event as its own chunk, flushed, as the real server
        does; the last chunk when the stream ends (timeoutSeconds, or the server stops)."""
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        try:
            for data in stream:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
        except OSError:  # the client went away: the watch ends with it
            self.close_connection = True
        finally:
            close = getattr(stream, "close", None)
            if close is not None:
                close()

    def log_message(self, format: str, *args: Any) -> None:
        LOG.debug("%s %s", self.client_address[0], format % args)


def namespaced_request(
    pattern: re.Pattern[str], path: str, query: str
) -> tuple[str, str, str, dict[str, str]]:
    """(namespace, name, subresource, the query's parameters: the last of each) of a request
    for a namespaced kind whose ``pattern`` has those groups (any may be empty: every
    namespace's list, one namespace's list, the object itself); 404 for any other path."""
    match = pattern.fullmatch(path)
    if match is None or (match["name"] and not match["namespace"]):
        raise fail(404, "NotFound", "the server could not find the requested resource", {})
    namespace, name = unquote(match["namespace"] or ""), unquote(match["name"] or "")
    params = {k: v[-1] for k, v in parse_qs(query).items()}
    return namespace, name, str(match["subresource"] or ""), params
