"""Where the metrics go: a file for node_exporter's textfile collector, and an HTTP listener."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import threading
from pathlib import Path
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_client import CollectorRegistry, generate_latest, make_wsgi_app
from prometheus_client.exposition import ThreadingWSGIServer

from token_resource.config.model import MetricsSettings, format_listen

log = logging.getLogger(__name__)

# The textfile is rendered this often and rewritten when its content changed.
TEXTFILE_INTERVAL_SECONDS = 5.0


class Exposition:
    """Both outputs, each only if configured: :meth:`start` opens them, :meth:`close` ends them."""

    def __init__(self, settings: MetricsSettings, registry: CollectorRegistry) -> None:
        self._settings = settings
        self._registry = registry
        self._server: ThreadingWSGIServer | None = None
        self._thread: threading.Thread | None = None
        self._textfile_task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Raises OSError when the listen address cannot be bound."""
        if self._settings.listen is not None:
            self._listen(*self._settings.listen)
        if self._settings.textfile is not None:
            self._textfile_task = asyncio.ensure_future(
                self._keep_textfile(self._settings.textfile)
            )

    def _listen(self, host: str, port: int) -> None:
        server_class = _Server6 if ":" in host else _Server
        server = make_server(host, port, make_wsgi_app(self._registry), server_class, _QuietHandler)
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever, name="metrics-http", daemon=True
        )
        self._thread.start()
        bound = format_listen((host, server.server_port))
        log.info("metrics: serving http://%s/metrics", bound)

    async def _keep_textfile(self, path: Path) -> None:
        written: bytes | None = None
        failure: str | None = None
        while True:
            # Rendering asks the event loop for a report: never on the loop itself.
            text = await asyncio.to_thread(generate_latest, self._registry)
            if text != written:
                try:
                    await asyncio.to_thread(_write_atomically, path, text)
                except OSError as error:
                    if str(error) != failure:  # once per distinct problem, not every interval
                        log.warning("metrics: cannot write %s: %s", path, error)
                    failure = str(error)
                else:
                    written, failure = text, None
            await asyncio.sleep(TEXTFILE_INTERVAL_SECONDS)

    async def close(self) -> None:
        """Stop both; the textfile goes too, so that node_exporter shows no stale values."""
        if self._textfile_task is not None:
            self._textfile_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._textfile_task
            if self._settings.textfile is not None:
                self._settings.textfile.unlink(missing_ok=True)
        if self._server is not None and self._thread is not None:
            await asyncio.to_thread(self._server.shutdown)
            self._server.server_close()
            self._thread.join()


class _Server(ThreadingWSGIServer):
    address_family = socket.AF_INET


class _Server6(ThreadingWSGIServer):
    address_family = socket.AF_INET6


class _QuietHandler(WSGIRequestHandler):
    """No line on stderr per scrape (the journal would fill with them)."""

    def log_message(self, format: str, *args: Any) -> None:
        pass


def _write_atomically(path: Path, data: bytes) -> None:
    """node_exporter never reads a half-written file: write a hidden file, rename it over.
    (prometheus_client's write_to_textfile would render the metrics a second time.)"""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        temporary.write_bytes(data)
        temporary.chmod(0o644)
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)
