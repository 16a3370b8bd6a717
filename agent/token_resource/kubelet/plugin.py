"""One resource's device-plugin server: serve on its socket, re-serve when the socket is lost."""

from __future__ import annotations

import asyncio
import logging
import os

import grpc
import grpc.aio

from token_resource.config.model import ResourceSpec
from token_resource.health.state import TokenHealth
from token_resource.kubelet.servicer import TokenServicer
from token_resource.kubelet.sockets import SUBDIRECTORY_MODE, SocketLayout
from token_resource.kubelet.tokens import TokenPool
from token_resource.observe.observer import Observer
from token_resource.protocol.deviceplugin import MAX_MESSAGE_BYTES, device_plugin_handler

# Enough for ended streams and in-flight Allocate calls to finish; then they are cancelled.
_STOP_GRACE_SECONDS = 1.0
_SERVER_OPTIONS = [
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
]


class PluginServer:
    """The gRPC server of one resource on its socket in ``layout``.

    A socket that is lost (the kubelet deletes top-level sockets when it restarts; someone may
    delete the agent's directory) leaves a running server unreachable: :meth:`serve` then
    replaces it on a fresh socket. The old server always stops before the new one binds, so
    that gRPC's unlink of a stopped server's path can never remove the new socket, and the
    kubelet never sees two servers for one resource.
    """

    def __init__(self, spec: ResourceSpec, layout: SocketLayout, observer: Observer) -> None:
        self.spec = spec
        self._observer = observer
        self.pool = TokenPool(spec.count)
        self.layout = layout
        self._generation = 1
        self.endpoint = layout.endpoint(spec.name)
        self.path = layout.device_plugin_dir / self.endpoint
        self.log = logging.getLogger(f"{__name__}.{spec.name}")
        # Set (and replaced) whenever the kubelet opens a ListAndWatch stream.
        self._stream_opened = asyncio.Event()
        self._server: grpc.aio.Server | None = None
        self._servicer: TokenServicer | None = None
        self._inode: int | None = None
        self._lifecycle = asyncio.Lock()
        # Set by stop(): a serve still waiting for the lifecycle lock (shielded from the
        # cancellation that came with the stop) then serves nothing.
        self._stopped = False

    def update(self, spec: ResourceSpec) -> None:
        """Apply new settings in place; open ListAndWatch streams get the new list."""
        old_count, self.spec = self.pool.count, spec
        if self.pool.resize(spec.count):
            self.log.info("count %d → %d", old_count, spec.count)

    def set_health(self, health: TokenHealth) -> None:
        """Which tokens are unhealthy; open ListAndWatch streams get the new list."""
        self.pool.set_health(health.within(self.spec.count))

    def socket_intact(self) -> bool:
        """Whether the file at our path is still the socket our server listens on."""
        try:
            return self._inode is not None and os.lstat(self.path).st_ino == self._inode
        except FileNotFoundError:
            return False

    def serving_intact(self) -> bool:
        """Serving on an intact socket, with no serve or stop in progress: nothing to wait for."""
        return not self._lifecycle.locked() and self.socket_intact()

    async def serve(self) -> None:
        """Serve on a fresh socket, replacing a running server."""
        async with self._lifecycle:
            await self._serve()

    async def ensure_serving(self) -> None:
        """Serve on a fresh socket unless the current one is intact.

        Checked under the lifecycle lock, so that a serve in progress is waited for, not
        repeated: a repeat would stop the server just started, that stop unlinks the new
        socket, and the deletion event would ask for yet another serve.
        """
        async with self._lifecycle:
            if not self.socket_intact():
                await self._serve()

    async def serve_elsewhere(self) -> None:
        """Serve on a socket of a new name, the old one removed: the kubelet will not take the
        old name again."""
        async with self._lifecycle:
            await self._stop_and_unlink()
            self._generation += 1
            self.endpoint = self.layout.endpoint(self.spec.name, self._generation)
            self.path = self.layout.device_plugin_dir / self.endpoint
            await self._serve()

    def next_stream(self) -> asyncio.Event:
        """An event set when the kubelet next opens a ListAndWatch stream on this server."""
        return self._stream_opened

    def _opened_stream(self) -> None:
        opened, self._stream_opened = self._stream_opened, asyncio.Event()
        opened.set()

    async def settled(self) -> None:
        """Return once no serve or stop is in progress."""
        async with self._lifecycle:
            pass

    async def _serve(self) -> None:
        if self._stopped:
            return
        await self._stop_server()
        servicer = TokenServicer(
            self.pool, lambda: self.spec, self.log, self._observer, self._opened_stream
        )
        server = grpc.aio.server(options=_SERVER_OPTIONS)
        server.add_generic_rpc_handlers((device_plugin_handler(servicer),))
        # The agent's directory may have been deleted with the socket in it.
        self.path.parent.mkdir(mode=SUBDIRECTORY_MODE, exist_ok=True)
        # gRPC unlinks whatever socket file is in the way before it binds.
        server.add_insecure_port(f"unix:{self.path}")
        await server.start()
        self._server, self._servicer = server, servicer
        self._inode = os.lstat(self.path).st_ino
        self.log.debug("serving on %s", self.path)

    async def stop(self) -> None:
        """Stop serving and remove the socket, if it is still ours."""
        async with self._lifecycle:
            self._stopped = True
            await self._stop_and_unlink()

    async def _stop_and_unlink(self) -> None:
        intact = self.socket_intact()
        await self._stop_server()
        if intact:
            self.path.unlink(missing_ok=True)

    async def _stop_server(self) -> None:
        if self._server is not None and self._servicer is not None:
            server, self._server, self._inode = self._server, None, None
            # ListAndWatch streams never end on their own: end them, then stop.
            self._servicer.close()
            await server.stop(_STOP_GRACE_SECONDS)
