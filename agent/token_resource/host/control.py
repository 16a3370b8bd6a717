"""The control socket: ``token-resource reload``, ``status`` and ``handover`` talk to the
running agent.

One request line (a command), one answer: ``ok <text>`` or ``error <text>``, then the agent
closes the connection. A reload answers only once the file has been applied or
rejected, which makes ``systemctl reload`` wait for the truth (``kill -HUP`` cannot).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from collections.abc import Awaitable, Mapping
from pathlib import Path
from typing import Callable

log = logging.getLogger(__name__)

Answer = tuple[bool, str]
COMMANDS = ("reload", "status", "handover")
_MAX_REQUEST = 64


def default_control_socket(environ: Mapping[str, str] = os.environ) -> Path:
    """``$RUNTIME_DIRECTORY/control.sock`` under systemd, else ``/run/token-resource``'s."""
    runtime = environ.get("RUNTIME_DIRECTORY", "").split(":")[0]
    return Path(runtime or "/run/token-resource") / "control.sock"


class ControlError(Exception):
    """The agent could not be reached, or it answered with an error."""


class ControlServer:
    def __init__(self, path: Path, handle: Callable[[str], Awaitable[Answer]]) -> None:
        self._path = path
        self._handle = handle
        self._server: asyncio.AbstractServer | None = None

    async def start(self) -> None:
        if self._path.exists():
            if _answers(self._path):
                raise ControlError(f"another agent is already listening on {self._path}")
            self._path.unlink()
        self._path.parent.mkdir(parents=True, exist_ok=True)
        self._server = await asyncio.start_unix_server(self._serve, path=str(self._path))
        # Only root (the owner) may ask the agent to do anything.
        os.chmod(self._path, 0o600)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
        self._path.unlink(missing_ok=True)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            command = (await reader.readline())[:_MAX_REQUEST].decode(errors="replace").strip()
            if command in COMMANDS:
                ok, text = await self._handle(command)
            else:
                ok, text = False, f"unknown command {command!r}; known: {', '.join(COMMANDS)}"
            writer.write(f"{'ok' if ok else 'error'} {text}\n".encode())
            await writer.drain()
        except ConnectionError as error:
            log.debug("control client went away: %s", error)
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()


def request(path: Path, command: str, timeout: float) -> str:
    """Send ``command`` to the agent at ``path``; return its text, raise ControlError otherwise."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
        client.settimeout(timeout)
        try:
            client.connect(str(path))
            client.sendall(f"{command}\n".encode())
            answer = b"".join(iter(lambda: client.recv(65536), b"")).decode(errors="replace")
        except socket.timeout:
            raise ControlError(f"no answer from the agent on {path} within {timeout:g} s") from None
        except OSError as error:
            raise ControlError(f"cannot reach the agent on {path}: {error.strerror}") from None
    status, _, text = answer.rstrip("\n").partition(" ")
    if status != "ok":
        raise ControlError(text or "the agent closed the connection without an answer")
    return text


def _answers(path: Path) -> bool:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        try:
            probe.connect(str(path))
        except OSError:
            return False
        return True
