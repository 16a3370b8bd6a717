"""The node's programs as processes of the test's: each in a session of its own, its output in
a log file, stopped by the PID recorded at its start (never found by name)."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO

STOP_TIMEOUT = 30.0


@dataclass
class Process:
    name: str
    popen: subprocess.Popen[bytes]
    log_path: Path
    _log: IO[bytes]

    @classmethod
    def start(
        cls,
        name: str,
        command: list[str],
        log_path: Path,
        environment: Mapping[str, str] | None = None,
    ) -> Process:
        log = log_path.open("ab")
        popen = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=None if environment is None else dict(environment),
            start_new_session=True,
        )
        return cls(name, popen, log_path, log)

    @property
    def pid(self) -> int:
        return self.popen.pid

    def running(self) -> bool:
        return self.popen.poll() is None

    def check_running(self) -> None:
        if not self.running():
            raise AssertionError(
                f"{self.name} exited with {self.popen.returncode}:\n{self.log_tail()}"
            )

    def log_tail(self, lines: int = 40) -> str:
        text = self.log_path.read_text(errors="replace")
        return "\n".join(text.splitlines()[-lines:])

    def stop(self, sig: signal.Signals = signal.SIGTERM, timeout: float = STOP_TIMEOUT) -> None:
        """``sig`` to the process, then SIGKILL if it has not exited within ``timeout``."""
        if self.running():
            os.kill(self.pid, sig)
        try:
            self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait()
        self._log.close()
