"""``kubelet.sock`` as the agent sees it: absent, a file nobody answers on, or a kubelet.

After a node reboot the socket file of the kubelet that ran before is still there, and nobody
listens on it until the new kubelet replaces it: that is waiting for the kubelet, not a failing
registration. The agent learns of a replacement from inotify (a new kubelet.sock), so while the
file refuses connections it only looks again now and then, quietly.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import stat
from pathlib import Path
from typing import Callable

from token_resource.kubelet.registration import KubeletClient
from token_resource.protocol.deviceplugin import KUBELET_SOCKET

log = logging.getLogger(__name__)

# How often a kubelet.sock that refuses connections is tried again: quickly at first (a new
# kubelet binds its socket a moment before it listens), then every second.
FIRST_PROBE_DELAY = 0.02
MAX_PROBE_DELAY = 1.0


class KubeletConnection:
    """The one channel to the kubelet that every Register shares, made once the socket
    accepts connections; :meth:`appeared` and :meth:`vanished` follow the socket file."""

    def __init__(self, directory: Path, on_change: Callable[[], None]) -> None:
        self._socket = directory / KUBELET_SOCKET
        self._on_change = on_change
        self._client: KubeletClient | None = None
        self._connecting: asyncio.Task[KubeletClient] | None = None
        self._closing: set[asyncio.Task[None]] = set()
        # The inode of kubelet.sock whose refusal was logged, to log it once.
        self._refusal_logged: int | None = None

    def inode(self) -> int | None:
        try:
            status = self._socket.lstat()
        except FileNotFoundError:
            return None
        return status.st_ino if stat.S_ISSOCK(status.st_mode) else None

    def accepting(self) -> bool:
        """Whether a kubelet answered on the current kubelet.sock."""
        return self._client is not None

    def appeared(self) -> int | None:
        """A new kubelet.sock: forget the old kubelet. Returns the new socket's inode."""
        self._drop()
        return self.inode()

    def vanished(self) -> None:
        self._drop()

    async def client(self) -> KubeletClient:
        """The channel to the kubelet, once its socket accepts connections (waiting quietly
        while it does not). OSError when kubelet.sock is gone."""
        if self._client is not None:
            return self._client
        if self._connecting is None:
            self._connecting = asyncio.ensure_future(self._connect())
        return await asyncio.shield(self._connecting)

    async def close(self) -> None:
        self._drop()
        await asyncio.gather(*self._closing, return_exceptions=True)

    async def _connect(self) -> KubeletClient:
        delay = FIRST_PROBE_DELAY
        while True:
            inode = self.inode()
            if inode is None:
                raise FileNotFoundError(f"{self._socket} is gone")
            try:
                _, writer = await asyncio.open_unix_connection(str(self._socket))
            except (ConnectionRefusedError, FileNotFoundError):
                if delay >= MAX_PROBE_DELAY and self._refusal_logged != inode:
                    self._refusal_logged = inode
                    log.info(
                        "%s refuses connections (left from before a reboot?): waiting for the "
                        "kubelet to replace it",
                        self._socket,
                    )
                await asyncio.sleep(delay)
                delay = min(delay * 2, MAX_PROBE_DELAY)
                continue
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()
            self._client = KubeletClient(self._socket)
            self._connecting = None
            self._on_change()
            return self._client

    def _drop(self) -> None:
        if self._connecting is not None:
            self._connecting.cancel()
            self._connecting = None
        if self._client is not None:
            closing = asyncio.ensure_future(self._client.close())
            self._closing.add(closing)
            closing.add_done_callback(self._closing.discard)
            self._client = None
            self._on_change()
