"""Servers on 127.0.0.1 for tests and the bench: what a probe or a client connects to."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def http_server(handler: type[http.server.BaseHTTPRequestHandler]) -> Iterator[int]:
    """``handler`` served by a threading HTTP server on 127.0.0.1; yields its port, and stops
    it (its thread joined, its socket closed) on the way out."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
