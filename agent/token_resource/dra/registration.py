"""The driver's registration with the kubelet's plugin watcher.

A socket in the kubelet's ``plugins_registry`` directory (``<driver>-<id>-reg.sock``) serves
``pluginregistration.Registration``: the kubelet finds it there (inotify), asks GetInfo (a DRA
plugin, the driver's name, the service socket, both service versions) and answers with
NotifyRegistrationStatus. A kubelet that starts (or restarts) does this again for every socket
there, which also tells the agent that the kubelet may have wiped the node's slices. Removing
the socket deregisters the driver.

Each start of the agent makes sockets of new names (``<id>`` a start's own, after the instance
where it has one), and removes those of earlier starts that nobody serves only once the
kubelet has registered the new ones. A kubelet keeps a plugin per registration socket (1.33
on) and calls the newest connected one, so the driver stays registered throughout. A socket
made again at the path of a dead one would instead be deregistered by the kubelet's reconciler,
and registered again only at its next pass, a second later (its operations are keyed by the
path): a prepare in that second fails. An agent that may run beside another instance of itself
(a DaemonSet rolling with maxSurge) names both sockets after its instance, so that neither
removes the other's.
"""

from __future__ import annotations

import hashlib
import logging
import os
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import grpc.aio

from token_resource.config.model import DraSettings
from token_resource.host.listeners import nobody_listens
from token_resource.protocol import pluginregistration_pb2 as pb
from token_resource.protocol.dra import SUPPORTED_VERSIONS
from token_resource.protocol.pluginregistration import DRA_PLUGIN_TYPE, registration_handler

log = logging.getLogger(__name__)

Context = grpc.aio.ServicerContext[Any, Any]
_STOP_GRACE_SECONDS = 1.0
# A unix socket's path must fit sun_path: 108 bytes with the terminating NUL.
_MAX_SOCKET_PATH = 107


def start_id() -> str:
    """A start's own part of its sockets' names."""
    return secrets.token_hex(4)


def socket_paths(settings: DraSettings, instance: str | None, start: str) -> tuple[Path, Path]:
    """(registration socket, service socket) of one start, named as the Kubernetes plugin
    helper names an instance's (``<driver>-<id>-reg.sock``, ``dra-<id>.sock``), the ID being
    ``<instance>-<start>`` or ``<start>``, hashed where a path would not fit."""
    name = start if instance is None else f"{instance}-{start}"

    def named(directory: Path, template: str) -> Path:
        path = directory / template.format(name)
        if len(os.fsencode(path)) > _MAX_SOCKET_PATH:
            path = directory / template.format(hashlib.sha256(name.encode()).hexdigest()[:16])
        return path

    return (
        named(settings.plugins_registry_dir, settings.driver + "-{}-reg.sock"),
        named(settings.driver_dir, "dra-{}.sock"),
    )


def _registrations(settings: DraSettings) -> list[Path]:
    """The registration sockets of the driver's starts and instances (and the fixed name an
    older version used)."""
    registry = settings.plugins_registry_dir
    return [
        *registry.glob(f"{settings.driver}-reg.sock"),
        *registry.glob(f"{settings.driver}-*-reg.sock"),
    ]


def remove_dead_sockets(settings: DraSettings) -> list[Path]:
    """Remove the driver's sockets, of any start or instance, that nobody listens on any more
    (an agent killed before it could remove them): the kubelet would keep a plugin for each."""
    candidates = [
        *_registrations(settings),
        *settings.driver_dir.glob("dra.sock"),
        *settings.driver_dir.glob("dra-*.sock"),
    ]
    removed = [path for path in candidates if nobody_listens(path)]
    for path in removed:
        path.unlink(missing_ok=True)
        log.info("removed %s: nobody serves it any more", path)
    return removed


def newer_instance(settings: DraSettings, own: Path) -> Path | None:
    """A live registration socket of the driver made after ``own``: the kubelet calls the
    newest instance, and this one is on its way out (a rollout's old pod)."""
    try:
        mine = own.lstat().st_mtime_ns
    except FileNotFoundError:
        return None
    for path in _registrations(settings):
        try:
            newer = path != own and path.lstat().st_mtime_ns > mine
        except FileNotFoundError:
            continue
        if newer and path.is_socket() and not nobody_listens(path):
            return path
    return None


class Registration:
    """What the kubelet said last: None before it asked, then registered or refused."""

    def __init__(
        self,
        driver: str,
        endpoint: Path,
        on_info: Callable[[], None],
        on_change: Callable[[], None],
        on_registered: Callable[[], None] = lambda: None,
    ) -> None:
        """``endpoint``: the DRA service socket; ``on_info``: the kubelet asked GetInfo;
        ``on_registered``: it said the driver is registered (after each of its starts)."""
        self._driver = driver
        self._endpoint = endpoint
        self._on_info = on_info
        self._on_change = on_change
        self._on_registered = on_registered
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
        if registered:
            self._on_registered()
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
