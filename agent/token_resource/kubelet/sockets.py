"""Where the agent's plugin sockets live in the device-plugin directory, their names, and
stale ones.

The sockets go in a directory of the agent's own inside the device-plugin directory, and are
registered with an endpoint relative to it (``token-resource/example.com_token.sock``): every
kubelet read (1.24 to 1.36) joins the endpoint onto its directory unchecked, and its clean-up
at start skips directories, so the sockets and their servers survive a kubelet restart and only
need registering again. A kubelet that will not take such an endpoint gets the top-level
layout instead (``token-resource.example.com_token.sock`` beside ``kubelet.sock``), which it
wipes at every start.

An instance that runs beside another (a rollout on a 1.37+ kubelet, which keys endpoints by
resource and socket path) puts its instance in every name
(``token-resource/example.com_token-<instance>.sock``), so that neither replaces or removes the
other's; a name the kubelet will not take again gets a generation (``….2.sock``).
"""

from __future__ import annotations

import hashlib
import logging
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from token_resource.host.listeners import nobody_listens

log = logging.getLogger(__name__)

# The agent's own directory inside the device-plugin directory.
SUBDIRECTORY = "token-resource"
SUBDIRECTORY_MODE = 0o750
# Top-level sockets carry the prefix, so that the agent recognises its own among others'.
PREFIX = "token-resource."
SUFFIX = ".sock"
# sun_path holds 108 bytes including the terminating NUL.
MAX_SOCKET_PATH = 107
_HASH_LENGTH = 16


class SocketPathError(ValueError):
    """The device-plugin directory leaves no room for a socket name."""


def socket_name(
    resource_name: str, directory: Path, prefix: str = PREFIX, qualifier: str = ""
) -> str:
    """A file name unique to the resource (and ``qualifier``), the same on every run, and
    recognisably ours.

    ``example.com/token`` → ``<prefix>example.com_token<qualifier>.sock``. The domain part of
    an extended resource name cannot hold ``_``, so replacing the one ``/`` keeps names
    distinct. Names too long for a unix socket path in ``directory`` are shortened and made
    unique by a hash.
    """
    readable = resource_name.replace("/", "_") + qualifier
    room = MAX_SOCKET_PATH - len(os.fsencode(directory)) - 1
    name = f"{prefix}{readable}{SUFFIX}"
    if len(name.encode()) <= room:
        return name
    digest = hashlib.sha256((resource_name + qualifier).encode()).hexdigest()[:_HASH_LENGTH]
    keep = room - len(prefix) - len(SUFFIX) - len(digest) - 1
    if keep < 0:
        raise SocketPathError(
            f"the device-plugin directory {directory} is too long for unix socket paths "
            f"({MAX_SOCKET_PATH} bytes at most with the socket name)"
        )
    return f"{prefix}{readable[:keep]}-{digest}{SUFFIX}"


@dataclass(frozen=True)
class SocketLayout:
    """Where the plugin sockets go: the agent's subdirectory, or beside ``kubelet.sock``."""

    device_plugin_dir: Path
    subdirectory: bool = True
    # Named into every socket of an instance beside another; None for the fixed names.
    instance: str | None = None

    @property
    def directory(self) -> Path:
        return (
            self.device_plugin_dir / SUBDIRECTORY if self.subdirectory else self.device_plugin_dir
        )

    @property
    def prefix(self) -> str:
        return "" if self.subdirectory else PREFIX

    def endpoint(self, resource_name: str, generation: int = 1) -> str:
        """What Register names: the socket's path relative to the device-plugin directory.
        ``generation``: counted up each time the kubelet refuses the name (1: the plain one)."""
        qualifier = "" if self.instance is None else f"-{self.instance}"
        if generation > 1:
            qualifier += f".{generation}"
        name = socket_name(resource_name, self.directory, self.prefix, qualifier)
        return f"{SUBDIRECTORY}/{name}" if self.subdirectory else name

    def owns(self, name: str) -> bool:
        """Whether a file of that name in :attr:`directory` would be one of the agent's sockets."""
        return name.startswith(self.prefix) and name.endswith(SUFFIX)

    def describe(self) -> str:
        if self.subdirectory:
            return f"{self.directory} (kept across kubelet restarts)"
        return f"{self.directory}, beside kubelet.sock (the kubelet wipes them at its restarts)"


def is_agent_socket(path: Path) -> bool:
    """A socket file named like the agent's top-level ones (never a regular file, and never
    anyone else's)."""
    if not (path.name.startswith(PREFIX) and path.name.endswith(SUFFIX)):
        return False
    return _is_socket(path)


def _is_socket(path: Path) -> bool:
    try:
        return stat.S_ISSOCK(path.lstat().st_mode)
    except FileNotFoundError:
        return False


def remove_stale_sockets(directory: Path, *, only_dead: bool = False) -> list[str]:
    """Remove the sockets an earlier run left behind, in both layouts (a restart may follow a
    fallback), and make the agent's subdirectory. Every one of them for an agent alone on the
    node (holding the agent lock); ``only_dead``, for an instance beside another, those nobody
    listens on any more (an instance killed before it could remove them), never the other's."""
    removed = [path for path in sorted(directory.iterdir()) if is_agent_socket(path)]
    subdirectory = make_subdirectory(directory)
    removed += [path for path in sorted(subdirectory.iterdir()) if _is_socket(path)]
    if only_dead:
        removed = [path for path in removed if nobody_listens(path)]
    for path in removed:
        path.unlink(missing_ok=True)
    if removed:
        names = ", ".join(str(path.relative_to(directory)) for path in removed)
        log.info("removed %d stale socket(s) of an earlier run: %s", len(removed), names)
    return [str(path.relative_to(directory)) for path in removed]


def make_subdirectory(directory: Path) -> Path:
    """The agent's subdirectory, made if missing (watched before any plugin is served)."""
    subdirectory = directory / SUBDIRECTORY
    subdirectory.mkdir(mode=SUBDIRECTORY_MODE, exist_ok=True)
    return subdirectory


def remove_subdirectory(directory: Path) -> None:
    """At stop, once every server has removed its socket: the agent's subdirectory goes too,
    unless someone put something else there."""
    try:
        (directory / SUBDIRECTORY).rmdir()
    except OSError as error:
        if not isinstance(error, FileNotFoundError):
            log.warning("left %s in place: %s", directory / SUBDIRECTORY, error.strerror)
