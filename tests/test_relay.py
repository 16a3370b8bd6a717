"""The relay the watch tests cut (tests/relay.py): it passes bytes both ways, a cut ends the
connections it carries and refuses new ones, and a restore serves the same port again."""

from __future__ import annotations

import socket
import socketserver
import threading
from collections.abc import Iterator

import pytest

from tests.relay import TcpRelay


class _Echo(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        while data := self.request.recv(4096):
            self.request.sendall(data)


@pytest.fixture
def echo() -> Iterator[tuple[str, int]]:
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Echo)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield "127.0.0.1", int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def round_trip(connection: socket.socket, data: bytes) -> bytes:
    connection.sendall(data)
    received = b""
    while len(received) < len(data):
        chunk = connection.recv(4096)
        if not chunk:
            break
        received += chunk
    return received


def test_a_cut_ends_connections_and_refuses_new_ones_until_restored(
    echo: tuple[str, int],
) -> None:
    with TcpRelay(("127.0.0.1", 0), echo) as relay:
        port = relay.port
        with socket.create_connection(("127.0.0.1", port), timeout=10) as carried:
            assert round_trip(carried, b"x" * 100_000) == b"x" * 100_000
            relay.cut()
            # The carried connection ends (no more bytes), new ones are refused.
            assert carried.recv(1) == b""
            with pytest.raises(ConnectionRefusedError):
                socket.create_connection(("127.0.0.1", port), timeout=10)
        relay.restore()
        assert relay.port == port
        with socket.create_connection(("127.0.0.1", port), timeout=10) as again:
            assert round_trip(again, b"back") == b"back"
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=10)
