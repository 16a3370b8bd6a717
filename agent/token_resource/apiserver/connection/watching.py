"""Watches that go on where they stopped, as client-go's reflector keeps them.

Each watch asks for bookmarks and lasts ``resync_seconds`` to twice that (client-go's 5 to 10
minutes: rarely, and not every agent at once); the next one starts from the last
resourceVersion seen, an event's or a bookmark's, with no list in between. A bookmark moves
that version on even when the field selector leaves every change out, so the version stays one
the API server still has. Only a ``410 Gone`` (the version compacted away, or older than a
restarted API server's cache) makes the caller list again. A watch that broke off (the API
server restarting, the network) is opened again from the same version after a backoff; a
connection that died without a word is noticed at the watch's end (the socket's timeout).

The watch is read in a worker thread; its events are handled on the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import socket
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Union
from urllib.parse import urlencode

from token_resource._compat import wait_set
from token_resource.apiserver.connection.client import ApiClient, ApiError, KubeError, Watch
from token_resource.apiserver.connection.credentials import load_credentials
from token_resource.config.model import KubernetesSettings

log = logging.getLogger(__name__)

GONE = 410
# Errors of the API server a watch is not opened again after: the caller decides.
REFUSED = frozenset({401, 403, 404})
FIRST_RETRY_DELAY = 1.0
MAX_RETRY_DELAY = 60.0
# Beyond the watch's own end, how long the socket may stay silent before it counts as dead.
SOCKET_MARGIN_SECONDS = 10.0

# What an event says: why to stop watching (the caller acts on it), or None to go on.
Decision = Callable[[Mapping[str, Any]], Union[str, None]]


@dataclass
class Cursor:
    """Where the next watch starts: the resourceVersion of the last list, event or bookmark;
    "" when the caller must list first."""

    version: str = ""


def watch_seconds(resync_seconds: float) -> int:
    """One watch's length: from ``resync_seconds`` to twice that (client-go's jitter)."""
    return max(1, int(resync_seconds * (1.0 + random.random())))


async def watch_until(
    settings: KubernetesSettings,
    path: str,
    field_selector: str,
    cursor: Cursor,
    decide: Decision,
    wake: asyncio.Event,
) -> str | None:
    """Watch the objects of the collection at ``path`` that ``field_selector`` picks, from
    ``cursor.version`` on (moved along as events come), one watch after another, until
    ``decide(event)`` gives a reason to stop (returned), the version is gone (the reason
    returned, the cursor emptied), or ``wake`` is set (None). ApiError when the API server
    refuses the watch (REFUSED); other failures are retried with backoff."""
    delay = FIRST_RETRY_DELAY
    while not wake.is_set():
        seconds = watch_seconds(settings.resync_seconds)
        try:
            reason = await _one_watch(settings, path, field_selector, cursor, decide, wake, seconds)
        except ApiError as error:
            if error.status == GONE:
                cursor.version = ""
                return f"the watch's version is gone: {error}"
            if error.status in REFUSED:
                raise
            reason, failure = None, str(error)
        except KubeError as error:
            reason, failure = None, str(error)
        else:
            if reason is not None:
                return reason
            delay = FIRST_RETRY_DELAY
            continue
        log.info("watch of %s stopped, resuming in %g s: %s", path, delay, failure)
        await wait_set(wake, delay)
        delay = min(delay * 2, MAX_RETRY_DELAY)
    return None


@dataclass(frozen=True)
class _End:
    """The watch ended: at its timeout (no error), or broken off."""

    error: KubeError | None


async def _one_watch(
    settings: KubernetesSettings,
    path: str,
    field_selector: str,
    cursor: Cursor,
    decide: Decision,
    wake: asyncio.Event,
    seconds: int,
) -> str | None:
    """One watch, to its end (None) or to a reason to stop; None at once when woken."""
    query = {
        "watch": "true",
        "allowWatchBookmarks": "true",
        "resourceVersion": cursor.version,
        "timeoutSeconds": str(seconds),
    }
    if field_selector:
        query["fieldSelector"] = field_selector
    client = ApiClient(load_credentials(settings))
    opening = _Opening()
    try:
        watch = await asyncio.to_thread(
            opening.open, client, f"{path}?{urlencode(query)}", seconds + SOCKET_MARGIN_SECONDS
        )
    except asyncio.CancelledError:
        # Stopped while the thread opens it, maybe with the loop gone by the time it is
        # open: whichever of the two comes second closes it.
        opening.abandon()
        raise
    events: asyncio.Queue[dict[str, Any] | _End] = asyncio.Queue()
    reading = asyncio.ensure_future(
        asyncio.to_thread(_pump, watch, asyncio.get_running_loop(), events)
    )
    woken = asyncio.ensure_future(wake.wait())
    try:
        while True:
            getting = asyncio.ensure_future(events.get())
            done, _ = await asyncio.wait({getting, woken}, return_when=asyncio.FIRST_COMPLETED)
            if getting not in done:
                getting.cancel()
                return None
            item = getting.result()
            if isinstance(item, _End):
                if item.error is not None:
                    raise item.error
                return None
            reason = _handle(item, cursor, decide)
            if reason is not None:
                return reason
    finally:
        watch.close()  # its thread ends of itself once the watch is closed
        woken.cancel()
        reading.cancel()


def _handle(event: Mapping[str, Any], cursor: Cursor, decide: Decision) -> str | None:
    kind = event.get("type")
    item = event.get("object") or {}
    if kind == "ERROR":
        code = item.get("code")
        message = str(item.get("message", item))
        raise ApiError(code if isinstance(code, int) else 500, str(item.get("reason", "")), message)
    version = (item.get("metadata") or {}).get("resourceVersion")
    if version:
        cursor.version = str(version)
    return None if kind == "BOOKMARK" else decide(event)


def _pump(
    watch: Watch,
    loop: asyncio.AbstractEventLoop,
    events: asyncio.Queue[dict[str, Any] | _End],
) -> None:
    """Hand the watch's events to the loop as they come, then how it ended."""

    def hand(item: dict[str, Any] | _End) -> None:
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: nobody is left
            loop.call_soon_threadsafe(events.put_nowait, item)

    try:
        for event in watch.events():
            hand(event)
    except KubeError as error:
        hand(_End(error))
    else:
        hand(_End(None))


class _Opening:
    """A watch being opened in a thread, which its opener may abandon meanwhile: its socket
    is shut down at whatever stage the opening has reached, so the thread ends at once rather
    than at its timeout (which the loop's shutdown would wait for)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._socket: socket.socket | None = None
        self._watch: Watch | None = None
        self._abandoned = False

    def open(self, client: ApiClient, path: str, timeout: float) -> Watch:
        watch = client.watch(path, timeout, connected=self._connected)
        with self._lock:
            self._watch = watch
            if self._abandoned:
                watch.close()
        return watch

    def _connected(self, sock: socket.socket) -> None:
        with self._lock:
            self._socket = sock
            if self._abandoned:
                raise KubeError("watch abandoned as it was opened")

    def abandon(self) -> None:
        with self._lock:
            self._abandoned = True
            if self._watch is not None:
                self._watch.close()
            elif self._socket is not None:
                with contextlib.suppress(OSError):
                    self._socket.shutdown(socket.SHUT_RDWR)
