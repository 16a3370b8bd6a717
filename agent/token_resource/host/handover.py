"""A package upgrade without a gap: the running agent starts the newly installed code as its
successor, which takes over the service before the running one leaves.

The package's maintainer script asks the running agent (``token-resource handover``); it starts
``token-resource run`` again from the files now installed, with its own environment, in the
service's own cgroup. The successor serves beside it where the kubelet keeps a registration
per socket (else it gets ready to, and waits for the lock), and says ``ready`` once the kubelet
has registered it; the running agent tells systemd that the successor is the service's main
process (``MAINPID=``), answers ``main``, and leaves the way it stops. The successor knows it
has left when their socket pair closes: the lock, the control socket and the metrics port are
then free. A successor that exits or is not ready in time is stopped, and the running agent
goes on serving.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from token_resource.host.notify import SystemdNotifier

log = logging.getLogger(__name__)

# The successor's end of the socket pair: a file descriptor number.
HANDOVER_VARIABLE = "TOKEN_RESOURCE_HANDOVER_FD"
READY = b"ready\n"
MAIN = b"main\n"
# How long a successor that was asked to stop may take.
_STOP_SECONDS = 10.0


class HandoverError(Exception):
    """The handover did not happen; the agent that asked keeps serving."""


def successor_command(argv: list[str] | None = None) -> list[str]:
    """This process's command line, run again from the files installed now: the installed
    command itself where it was one (its ``#!`` line chooses the interpreter and its flags, as
    the self-contained package's launcher needs), else ``python -m token_resource``."""
    program, *arguments = argv or sys.argv
    if Path(program).name != "__main__.py" and os.access(program, os.X_OK):
        return [program, *arguments]
    flags = [flag for flag, on in (("-I", sys.flags.isolated), ("-S", sys.flags.no_site)) if on]
    return [sys.executable, *flags, "-m", "token_resource", *arguments]


async def start_successor(
    environ: Mapping[str, str], notifier: SystemdNotifier, timeout: float
) -> Successor:
    """The successor started, ready within ``timeout`` and made the service's main process
    (this agent falls silent to systemd); HandoverError, the successor stopped, otherwise."""
    successor = Successor.start(successor_command(), environ)
    try:
        await successor.ready(timeout)
    except HandoverError:
        await successor.abandon()
        raise
    if not await asyncio.to_thread(notifier.main_pid, successor.pid):
        log.warning("systemd did not confirm pid %d as the main process", successor.pid)
    successor.confirm_main()
    return successor


class Successor:
    """The running agent's side: the process it started to take its place."""

    def __init__(self, process: subprocess.Popen[bytes], channel: socket.socket) -> None:
        self.process = process
        self._channel = channel

    @property
    def pid(self) -> int:
        return self.process.pid

    @classmethod
    def start(cls, command: list[str], environ: Mapping[str, str]) -> Successor:
        ours, theirs = socket.socketpair()
        # WATCHDOG_PID names this process: the successor pings for itself once it is main.
        env = {name: value for name, value in environ.items() if name != "WATCHDOG_PID"}
        env[HANDOVER_VARIABLE] = str(theirs.fileno())
        try:
            # Its output goes where this process's goes: the service's journal.
            process = subprocess.Popen(
                command, env=env, pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL
            )
        except OSError as error:
            ours.close()
            raise HandoverError(f"cannot start {command[0]}: {error.strerror}") from None
        finally:
            theirs.close()
        ours.setblocking(False)
        return cls(process, ours)

    async def ready(self, timeout: float) -> None:
        """Return once the successor says it can take over; HandoverError otherwise."""
        reading = asyncio.ensure_future(_read_line(self._channel))
        try:
            done, _ = await asyncio.wait({reading}, timeout=timeout)
        finally:
            reading.cancel()
        if not done:
            raise HandoverError(f"the successor (pid {self.pid}) not ready within {timeout:g} s")
        if reading.result() == READY:
            return
        status = await asyncio.to_thread(self._exit_status, 5.0)
        raise HandoverError(
            f"the successor (pid {self.pid}) {status} before it could serve (its reason is "
            f"in the agent's log, the service's journal)"
        )

    def confirm_main(self) -> None:
        """Tell the successor it is the service's main process now."""
        self._channel.send(MAIN)

    def leave(self) -> None:
        """Tell the successor this agent no longer serves (its lock and sockets are free)."""
        self._channel.close()

    async def abandon(self) -> None:
        """Stop a successor that will not take over."""
        self._channel.close()
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        await asyncio.to_thread(self._exit_status, _STOP_SECONDS)

    def _exit_status(self, timeout: float) -> str:
        try:
            code = self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            code = self.process.wait()
        if code < 0:
            return f"was killed by {signal.Signals(-code).name}"
        return f"exited with status {code}"


class Predecessor:
    """The successor's side: the agent it takes over from."""

    def __init__(self, channel: socket.socket) -> None:
        self._channel = channel
        self.pid = os.getppid()

    @classmethod
    def from_environment(cls) -> Predecessor | None:
        """The running agent that started this one, if one did (the variable is consumed)."""
        number = os.environ.pop(HANDOVER_VARIABLE, "")
        if not number.isdigit():
            return None
        channel = socket.socket(fileno=int(number))
        channel.set_inheritable(False)
        channel.setblocking(False)
        return cls(channel)

    async def take_over(self, notifier: SystemdNotifier) -> None:
        """Say this agent is ready; once it is the service's main process, speak to systemd,
        and return once the predecessor has left."""
        loop = asyncio.get_running_loop()
        await loop.sock_sendall(self._channel, READY)
        if await _read_line(self._channel) != MAIN:
            raise HandoverError(f"the agent (pid {self.pid}) gave up its handover")
        notifier.unmute()
        log.info("taking over from pid %d", self.pid)
        while await loop.sock_recv(self._channel, 64):
            pass
        self._channel.close()


async def _read_line(channel: socket.socket) -> bytes:
    """One line, or what came before the peer closed."""
    loop = asyncio.get_running_loop()
    line = b""
    while not line.endswith(b"\n"):
        chunk = await loop.sock_recv(channel, 1)
        if not chunk:
            break
        line += chunk
    return line
