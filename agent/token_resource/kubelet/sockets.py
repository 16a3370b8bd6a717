"""The agent's socket files in the device-plugin directory: their names, and stale ones."""

from __future__ import annotations

import hashlib
import logging
import os
import stat
from pathlib import Path

log = logging.getLogger(__name__)

PREFIX = "token-resource."
SUFFIX = ".sock"
# sun_path holds 108 bytes including the terminating NUL.
MAX_SOCKET_PATH = 107
_HASH_LENGTH = 16


class SocketPathError(ValueError):
    """The device-plugin directory leaves no room for a socket name."""


def socket_name(resource_name: str, directory: Path) -> str:
    """A file name unique to the resource, the same on every run, and recognisably ours.

    ``example.com/token`` → ``token-resource.example.com_token.sock``. The domain part of an
    extended resource name cannot hold ``_``, so replacing the one ``/`` keeps names distinct.
    Names too long for a unix socket path are shortened and made unique by a hash.
    """
    readable = resource_name.replace("/", "_")
    room = MAX_SOCKET_PATH - len(os.fsencode(directory)) - 1
    name = f"{PREFIX}{readable}{SUFFIX}"
    if len(name.encode()) <= room:
        return name
    digest = hashlib.sha256(resource_name.encode()).hexdigest()[:_HASH_LENGTH]
    keep = room - len(PREFIX) - len(SUFFIX) - len(digest) - 1
    if keep < 0:
        raise SocketPathError(
            f"the device-plugin directory {directory} is too long for unix socket paths "
            f"({MAX_SOCKET_PATH} bytes at most with the socket name)"
        )
    return f"{PREFIX}{readable[:keep]}-{digest}{SUFFIX}"


def is_agent_socket_name(name: str) -> bool:
    return name.startswith(PREFIX) and name.endswith(SUFFIX)


def is_agent_socket(path: Path) -> bool:
    """A socket file named like ours (never a regular file, and never anyone else's)."""
    if not is_agent_socket_name(path.name):
        return False
    try:
        return stat.S_ISSOCK(path.lstat().st_mode)
    except FileNotFoundError:
        return False


def remove_stale_sockets(directory: Path) -> list[str]:
    """Remove sockets an earlier run left behind. Only call while holding the agent lock."""
    removed = []
    for path in sorted(directory.iterdir()):
        if is_agent_socket(path):
            path.unlink(missing_ok=True)
            removed.append(path.name)
    if removed:
        log.info(
            "removed %d stale socket(s) of an earlier run: %s", len(removed), ", ".join(removed)
        )
    return removed
