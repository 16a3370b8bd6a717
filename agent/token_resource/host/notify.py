"""systemd service notifications (sd_notify), a no-op when not run by systemd."""

from __future__ import annotations

import array
import os
import select
import socket
import time
from collections.abc import Mapping

import sdnotify


class SystemdNotifier:
    """READY / RELOADING / STOPPING / STATUS / WATCHDOG messages to ``$NOTIFY_SOCKET``."""

    def __init__(self, muted: bool = False) -> None:
        """``muted``: silent until unmute(), as a successor is until it is the main process
        (systemd refuses, and logs, messages from any other)."""
        # sdnotify reads $NOTIFY_SOCKET itself.
        self._notifier = sdnotify.SystemdNotifier() if os.environ.get("NOTIFY_SOCKET") else None
        self.watchdog_interval = _watchdog_interval(os.environ)
        self._status: str | None = None
        self._muted = muted

    def unmute(self) -> None:
        self._muted = False

    def main_pid(self, pid: int, timeout: float = 5.0) -> bool:
        """Make ``pid`` the service's main process, and fall silent: the messages are then
        its. Returns once systemd has read the message (a barrier: it closes the descriptor
        sent with BARRIER=1 after the messages before), False if it did not within
        ``timeout``."""
        if self._notifier is None or self._muted:
            return True
        self._send(f"MAINPID={pid}")
        self._muted = True
        client = self._notifier.socket
        if client is None:
            return True
        read_end, write_end = os.pipe()
        try:
            fds = array.array("i", [write_end])
            client.sendmsg([b"BARRIER=1"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds)])
            os.close(write_end)
            write_end = -1
            readable, _, _ = select.select([read_end], [], [], timeout)
            return bool(readable)
        except OSError:
            return False
        finally:
            os.close(read_end)
            if write_end >= 0:
                os.close(write_end)

    def ready(self, status: str) -> None:
        self._status = status
        self._send(f"READY=1\nSTATUS={status}")

    def reloading(self) -> None:
        # systemd (253+) needs MONOTONIC_USEC to match the reload to the request that caused it.
        self._send(f"RELOADING=1\nMONOTONIC_USEC={time.monotonic_ns() // 1000}")

    def stopping(self) -> None:
        self._send("STOPPING=1\nSTATUS=stopping")

    def status(self, status: str) -> None:
        if status != self._status:
            self._status = status
            self._send(f"STATUS={status}")

    def watchdog(self) -> None:
        self._send("WATCHDOG=1")

    def close(self) -> None:
        if self._notifier is not None and self._notifier.socket is not None:
            self._notifier.socket.close()
        self._notifier = None

    def _send(self, message: str) -> None:
        if self._notifier is not None and not self._muted:
            self._notifier.notify(message)


def _watchdog_interval(environ: Mapping[str, str]) -> float | None:
    """Seconds between WATCHDOG=1 pings: half of systemd's timeout, or None without a watchdog."""
    usec = environ.get("WATCHDOG_USEC", "")
    pid = environ.get("WATCHDOG_PID", "")
    if not usec.isdigit() or int(usec) == 0 or (pid and pid != str(os.getpid())):
        return None
    return int(usec) / 2_000_000
