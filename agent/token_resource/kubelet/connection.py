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


# One kubelet.sock file: its inode number and the time it was made, as a new socket can get
# the number of the one just removed.
SocketIdentity = tuple[int, int]


class KubeletConnection:
    """The one channel to the kubelet that every Register shares, made once the socket
    accepts connections; :meth:`appeared` and :meth:`vanished` follow the socket file."""

    def __init__(self, directory: Path, on_change: Callable[[], None]) -> None:
        self._socket = directory / KUBELET_SOCKET
        self._on_change = on_change
        self._client: KubeletClient | None = None
        self._connecting: asyncio.Task[KubeletClient] | None = None
        # The kubelet.sock that the client, or the connection in progress, is for; None once
        # connected if the file changed while the connection was made.
        self._socket_identity: SocketIdentity | None = None
        self._closing: set[asyncio.Task[None]] = set()
        # The kubelet.sock whose refusal was logged, to log it once.
        self._refusal_logged: SocketIdentity | None = None

    def identity(self) -> SocketIdentity | None:
        try:
            status = self._socket.lstat()
        except FileNotFoundError:
            return None
        return (status.st_ino, status.st_ctime_ns) if stat.S_ISSOCK(status.st_mode) else None

    def accepting(self) -> bool:
        """Whether a kubelet answered on the current kubelet.sock."""
        return self._client is not None

    def connected_to(self) -> SocketIdentity | None:
        """The kubelet.sock the client is known to have connected to."""
        return self._socket_identity if self._client is not None else None

    def connected_to_current(self) -> bool:
        """Whether the client is connected to the kubelet.sock there now: a file event that
        says otherwise is about an older one, read late (the connection can be made to a new
        kubelet.sock before the events of its creation arrive)."""
        connected = self.connected_to()
        return connected is not None and connected == self.identity()

    def appeared(self) -> SocketIdentity | None:
        """A new kubelet.sock: forget the old kubelet (not for another event about the same
        socket). Returns the new socket's identity."""
        identity = self.identity()
        if identity is None or identity != self._socket_identity:
            self._drop()
        return identity

    def vanished(self) -> None:
        self._drop()

    async def client(self) -> KubeletClient:
        """The channel to the kubelet, once its socket accepts connections (waiting quietly
        while it does not). OSError when kubelet.sock is gone."""
        if self._client is not None:
            return self._client
        if self._connecting is None:
            self._socket_identity = self.identity()
            self._connecting = asyncio.ensure_future(self._connect())
        return await asyncio.shield(self._connecting)

    async def close(self) -> None:
        self._drop()
        await asyncio.gather(*self._closing, return_exceptions=True)

    async def _connect(self) -> KubeletClient:
        delay = FIRST_PROBE_DELAY
        while True:
            identity = self.identity()
            if identity is None:
                raise FileNotFoundError(f"{self._socket} is gone")
            try:
                _, writer = await asyncio.open_unix_connection(str(self._socket))
            except (ConnectionRefusedError, FileNotFoundError):
                if delay >= MAX_PROBE_DELAY and self._refusal_logged != identity:
                    self._refusal_logged = identity
                    log.info(
                        "%s refuses connections (left from before a reboot?): waiting for the "
                        "kubelet to replace it",
                        self._socket,
                    )
                await asyncio.sleep(delay)
                delay = min(delay * 2, MAX_PROBE_DELAY)
                continue
            # The same file before and after: the one connected to. Another: not known.
            self._socket_identity = identity if self.identity() == identity else None
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()
            self._client = KubeletClient(self._socket)
            self._connecting = None
            self._on_change()
            return self._client

    def _drop(self) -> None:
        self._socket_identity = None
        if self._connecting is not None:
            self._connecting.cancel()
            self._connecting = None
        if self._client is not None:
            closing = asyncio.ensure_future(self._client.close())
            self._closing.add(closing)
            closing.add_done_callback(self._closing.discard)
            self._client = None
            self._on_change()
