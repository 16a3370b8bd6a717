"""A TCP relay that a test can cut: what an API server's clients see of a network partition.

The real node's pods reach the API server through one (tests/node/network.py); tests of
watches put one between an agent and the API server, cut it while something changes, and let
the agent back in.
"""

from __future__ import annotations

import contextlib
import selectors
import socket
import socketserver
import threading

BUFFER = 65536


class _Pipe(socketserver.BaseRequestHandler):
    server: _Server

    def handle(self) -> None:
        client: socket.socket = self.request
        try:
            upstream = socket.create_connection(self.server.upstream, timeout=10)
        except OSError:
            return
        upstream.settimeout(None)
        with upstream, selectors.DefaultSelector() as selector:
            if not self.server.track(client, upstream):
                return
            selector.register(client, selectors.EVENT_READ, upstream)
            selector.register(upstream, selectors.EVENT_READ, client)
            while True:
                for key, _ in selector.select():
                    source: socket.socket = key.fileobj  # type: ignore[assignment]
                    try:
                        data = source.recv(BUFFER)
                        if not data:
                            return
                        key.data.sendall(data)
                    except OSError:
                        return


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, listen: tuple[str, int], upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self._lock = threading.Lock()
        self._cut = False
        self._sockets: list[socket.socket] = []
        super().__init__(listen, _Pipe)

    def track(self, *sockets: socket.socket) -> bool:
        """Whether a connection's sockets may relay (not once cut): cut() shuts them down."""
        with self._lock:
            if self._cut:
                return False
            self._sockets.extend(sockets)
            return True

    def cut(self) -> None:
        with self._lock:
            self._cut = True
            sockets, self._sockets = self._sockets, []
        for each in sockets:
            with contextlib.suppress(OSError):
                each.shutdown(socket.SHUT_RDWR)


class TcpRelay:
    """Connections to ``listen`` passed on to ``upstream`` while it runs (``with``);
    :meth:`cut` ends every connection and refuses new ones until :meth:`restore`."""

    def __init__(self, listen: tuple[str, int], upstream: tuple[str, int]) -> None:
        """``listen``'s port 0: one the kernel picks, kept across cuts (:attr:`port`)."""
        self._listen = listen
        self._upstream = upstream
        self._running: tuple[_Server, threading.Thread] | None = None

    @property
    def port(self) -> int:
        return self._listen[1]

    def __enter__(self) -> TcpRelay:
        self.restore()
        return self

    def __exit__(self, *exc: object) -> None:
        self.cut()

    def restore(self) -> None:
        """Relay again (on the same address)."""
        if self._running is not None:
            return
        server = _Server(self._listen, self._upstream)
        self._listen = (self._listen[0], server.server_address[1])
        thread = threading.Thread(target=server.serve_forever, name="tcp-relay", daemon=True)
        thread.start()
        self._running = server, thread

    def cut(self) -> None:
        """Every connection shut down, and new ones refused, when this returns."""
        if self._running is None:
            return
        server, thread = self._running
        self._running = None
        server.shutdown()  # no new connection is accepted
        server.server_close()
        thread.join()
        server.cut()
