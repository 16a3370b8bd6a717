"""systemd service notifications (sd_notify), a no-op when not run by systemd."""

from __future__ import annotations

import os
import time
from collections.abc import Mapping

import sdnotify


class SystemdNotifier:
    """READY / RELOADING / STOPPING / STATUS / WATCHDOG messages to ``$NOTIFY_SOCKET``."""

    def __init__(self) -> None:
        # sdnotify reads $NOTIFY_SOCKET itself.
        self._notifier = sdnotify.SystemdNotifier() if os.environ.get("NOTIFY_SOCKET") else None
        self.watchdog_interval = _watchdog_interval(os.environ)
        self._status: str | None = None

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
        if self._notifier is not None:
            self._notifier.notify(message)


def _watchdog_interval(environ: Mapping[str, str]) -> float | None:
    """Seconds between WATCHDOG=1 pings: half of systemd's timeout, or None without a watchdog."""
    usec = environ.get("WATCHDOG_USEC", "")
    pid = environ.get("WATCHDOG_PID", "")
    if not usec.isdigit() or int(usec) == 0 or (pid and pid != str(os.getpid())):
        return None
    return int(usec) / 2_000_000
