"""The driver's registration with the kubelet's plugin watcher.

A socket in the kubelet's ``plugins_registry`` directory (``<driver>-reg.sock``) serves
``pluginregistration.Registration``: the kubelet finds it there (inotify), asks GetInfo (a DRA
plugin, the driver's name, the service socket, both service versions) and answers with
NotifyRegistrationStatus. A kubelet that starts (or restarts) does this again for every socket
there, which also tells the agent that the kubelet may have wiped the node's slices. Removing
the socket deregisters the driver.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import grpc.aio

from token_resource.protocol import pluginregistration_pb2 as pb
from token_resource.protocol.dra import SUPPORTED_VERSIONS
from token_resource.protocol.pluginregistration import DRA_PLUGIN_TYPE, registration_handler

log = logging.getLogger(__name__)

Context = grpc.aio.ServicerContext[Any, Any]
_STOP_GRACE_SECONDS = 1.0


class Registration:
    """What the kubelet said last: None before it asked, then registered or refused."""

    def __init__(
        self,
        driver: str,
        endpoint: Path,
        on_info: Callable[[], None],
        on_change: Callable[[], None],
    ) -> None:
        """``endpoint``: the DRA service socket; ``on_info``: the kubelet asked GetInfo."""
        self._driver = driver
        self._endpoint = endpoint
        self._on_info = on_info
        self._on_change = on_change
        self.registered: bool | None = None
        self.error: str | None = None

    async def GetInfo(self, request: pb.InfoRequest, context: Context) -> pb.PluginInfo:
        self._on_info()
        return pb.PluginInfo(
            type=DRA_PLUGIN_TYPE,
            name=self._driver,
            endpoint=str(self._endpoint),
            supported_versions=list(SUPPORTED_VERSIONS),
        )

    async def NotifyRegistrationStatus(
        self, request: pb.RegistrationStatus, context: Context
    ) -> pb.RegistrationStatusResponse:
        registered, error = request.plugin_registered, request.error or None
        if (registered, error) != (self.registered, self.error):
            if registered:
                log.info("DRA driver %s registered with the kubelet", self._driver)
            else:
                log.error("the kubelet refused DRA driver %s: %s", self._driver, error)
        self.registered, self.error = registered, error
        self._on_change()
        return pb.RegistrationStatusResponse()


class RegistrationServer:
    """The registration socket's gRPC server."""

    def __init__(self, path: Path, registration: Registration) -> None:
        self.path = path
        self.registration = registration
        self._server: grpc.aio.Server | None = None

    async def start(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        server = grpc.aio.server()
        server.add_generic_rpc_handlers((registration_handler(self.registration),))
        # gRPC unlinks a stale socket in the way before it binds.
        server.add_insecure_port(f"unix:{self.path}")
        await server.start()
        self._server = server
        self._inode = os.lstat(self.path).st_ino

    def intact(self) -> bool:
        try:
            return self._server is not None and os.lstat(self.path).st_ino == self._inode
        except FileNotFoundError:
            return False

    async def stop(self) -> None:
        """Deregister: remove the socket (if it is still ours), then stop serving."""
        if self._server is None:
            return
        if self.intact():
            self.path.unlink(missing_ok=True)
        server, self._server = self._server, None
        await server.stop(_STOP_GRACE_SECONDS)
