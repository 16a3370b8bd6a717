"""Running the real agent as a subprocess, and reading its sd_notify messages, for tests."""

from __future__ import annotations

import ctypes
import json
import os
import re
import shutil
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.paths import short_directory
from token_resource import __version__

AGENT_COMMAND = (sys.executable, "-m", "token_resource")
# What the agent calls itself to the API server, as client-go's clients do: its version, then
# the OS and Go's name of the machine.
AGENT_USER_AGENT = re.compile(rf"token-resource/{re.escape(__version__)} \(linux/(amd64|arm64)\)")


# A configuration with both forms of resource: a shorthand count, and a table with its own env.
TWO_RESOURCES = """
[resources]
"example.com/token" = 2

[resources."example.com/license"]
count = 5
env = "LICENSE_SEATS"
"""


class NotifySocket:
    """A real ``$NOTIFY_SOCKET``: a datagram socket whose messages are collected by a thread,
    each line stamped with the time (``time.monotonic()``) it arrived."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._socket = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._socket.bind(str(path))
        self._socket.settimeout(0.2)
        self._messages: list[str] = []
        self._stamps: list[float] = []  # one per line, in the order of assignments()
        self._cond = threading.Condition()
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._receive, daemon=True)
        self._thread.start()

    def _receive(self) -> None:
        while not self._closed.is_set():
            try:
                data = self._socket.recv(65536)
            except socket.timeout:
                continue
            except OSError:
                return
            now = time.monotonic()
            with self._cond:
                message = data.decode()
                self._messages.append(message)
                self._stamps.extend(now for _ in message.splitlines())
                self._cond.notify_all()

    def messages(self) -> list[str]:
        with self._cond:
            return list(self._messages)

    def assignments(self) -> list[str]:
        """Every ``KEY=value`` line received, in order."""
        return [line for message in self.messages() for line in message.splitlines()]

    def wait_for(self, predicate: Callable[[list[str]], bool], timeout: float = 20.0) -> list[str]:
        """Wait until ``predicate`` holds for the assignments received so far."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while not predicate(self.assignments()):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise AssertionError(f"notify: condition not met; received {self._messages}")
                self._cond.wait(remaining)
        return self.assignments()

    def wait_for_line(self, line: str, *, after: int = 0, timeout: float = 20.0) -> int:
        """Wait for ``line`` at an index >= ``after``; return its index."""
        self.wait_for(lambda lines: line in lines[after:], timeout)
        lines = self.assignments()
        return lines.index(line, after)

    def arrival(self, index: int) -> float:
        """When the line at ``index`` of assignments() arrived."""
        with self._cond:
            return self._stamps[index]

    def close(self) -> None:
        self._closed.set()
        self._socket.close()
        self._thread.join()


class AgentProcess:
    """``token-resource run`` as a real process, with its config file, log and notify socket."""

    def __init__(self, workdir: Path, device_plugin_dir: Path, role: str | None = None) -> None:
        """``role``: run's --role (None: the default, a node's agent)."""
        self.workdir = workdir
        self.role = role
        self.device_plugin_dir = device_plugin_dir
        self.config_path = workdir / "token-resource.toml"
        self.dropin_dir = workdir / "token-resource.d"
        self.log_path = workdir / "agent.log"
        workdir.mkdir(parents=True, exist_ok=True)
        # The sockets in a short directory (tests/paths.py), which kill() removes.
        self.sockets = short_directory("tr-agent-")
        self.control_socket = self.sockets / "run" / "control.sock"
        self.notify = NotifySocket(self.sockets / "notify.sock")
        self.process: subprocess.Popen[bytes] | Adopted | None = None

    def agent_section(self) -> str:
        return f'[agent]\ndevice_plugin_dir = "{self.device_plugin_dir}"\n'

    def write_config(
        self, resources: str, *, atomic: bool = True, path: Path | None = None
    ) -> None:
        """Write the main file (``[agent]`` + ``resources``): by rename, or rewritten in place."""
        write_file(path or self.config_path, self.agent_section() + resources, atomic=atomic)

    def start(self, *, env: Mapping[str, str] | None = None, wait_ready: bool = True) -> None:
        environ = {
            k: v for k, v in os.environ.items() if k not in ("NOTIFY_SOCKET", "WATCHDOG_USEC")
        }
        # A stop that hangs dumps every thread's stack (SIGABRT, below) into the log.
        environ.update(
            {"NOTIFY_SOCKET": str(self.notify.path), "PYTHONFAULTHANDLER": "1", **(env or {})}
        )
        # This run's READY=1, not an earlier run's (an agent started again after a stop).
        mark = len(self.notify.assignments())
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                [*AGENT_COMMAND, "run", *self._options("run")], stdout=log, stderr=log, env=environ
            )
        if wait_ready:
            self.notify.wait_for(lambda lines: "READY=1" in lines[mark:])

    def cli(self, *args: str, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
        """Run ``token-resource ARGS`` (control-socket and config options added as fitting)."""
        options = self._options(args[0]) if args else []
        return subprocess.run(
            [*AGENT_COMMAND, *args, *options],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def status_json(self) -> dict[str, Any]:
        """``token-resource status --json``: the running agent's report."""
        result = self.cli("status", "--json")
        assert result.returncode == 0, result.stderr
        report: dict[str, Any] = json.loads(result.stdout)
        return report

    def _options(self, command: str) -> list[str]:
        config = ["--config", str(self.config_path)]
        control = ["--control-socket", str(self.control_socket)]
        role = ["--role", self.role] if self.role else []
        return {
            "run": config + control + role,
            "check": config,
            "reload": control,
            "status": control,
            "handover": control,
        }.get(command, [])

    def handover(self, *command: str, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
        """``token-resource handover`` (or ``command``, which may lead to one); once it says
        the successor serves, the successor is
        this agent's process (the predecessor waited for first: the successor, orphaned, then
        becomes this test's child, which makes its exit status readable)."""
        assert self.process is not None
        predecessor = self.process
        _child_subreaper(True)
        try:
            result = self.cli(*(command or ("handover",)), timeout=timeout)
            if result.returncode == 0:
                predecessor.wait(timeout)
                found = re.search(r"^handed over to pid (\d+):", result.stdout, re.M)
                assert found is not None, result.stdout
                self.process = Adopted(int(found.group(1)))
        finally:
            _child_subreaper(False)
        return result

    def signal(self, signum: int) -> None:
        assert self.process is not None
        self.process.send_signal(signum)

    def stop(self, timeout: float = 20.0) -> int:
        """SIGTERM, then wait; returns the exit status. An agent still running after
        ``timeout`` is aborted, and the failure shows where each of its threads stood."""
        assert self.process is not None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.send_signal(signal.SIGABRT)
            self.process.wait(10)
            raise AssertionError(
                f"the agent did not stop within {timeout:g} s of SIGTERM; its log's end, with "
                f"its threads' stacks:\n{self.log()[-12000:]}"
            ) from None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def wait_for_log(self, text: str, timeout: float = 20.0) -> str:
        deadline = time.monotonic() + timeout
        while text not in (log := self.log()):
            if time.monotonic() > deadline:
                raise AssertionError(f"agent log never showed {text!r}; log:\n{log}")
            time.sleep(0.02)
        return log

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self.notify.close()
        shutil.rmtree(self.sockets, ignore_errors=True)


class Adopted:
    """A process this test became the parent of (a subreaper's orphan), as Popen is used."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while (code := self.poll()) is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(str(self.pid), timeout or 0.0)
            time.sleep(0.01)
        return code

    def send_signal(self, signum: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, signum)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def _child_subreaper(on: bool) -> None:
    """prctl(PR_SET_CHILD_SUBREAPER): this process inherits its descendants' orphans."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(36, int(on), 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")


@contextmanager
def rollout_pair(
    workdir: Path, device_plugin_dir: Path
) -> Iterator[tuple[AgentProcess, AgentProcess]]:
    """The old and the new agent of a DaemonSet's rollout on one node (not started); both
    killed at the end, if still running."""
    old = AgentProcess(workdir / "old", device_plugin_dir)
    new = AgentProcess(workdir / "new", device_plugin_dir)
    try:
        yield old, new
    finally:
        new.kill()
        old.kill()


def agent_sockets(directory: Path) -> list[str]:
    """The agent's sockets, relative to the device-plugin directory: in its own directory, and
    beside kubelet.sock (the fallback layout)."""
    own = directory / "token-resource"
    found = [path for path in directory.iterdir() if path.name.startswith("token-resource.")]
    found += list(own.iterdir()) if own.is_dir() else []
    return sorted(
        str(path.relative_to(directory)) for path in found if stat.S_ISSOCK(path.lstat().st_mode)
    )


def write_file(path: Path, text: str, *, atomic: bool) -> None:
    """Save like an editor (write a temporary file, rename it over) or rewrite in place."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if atomic:
        temporary = path.with_name(f".{path.name}.tmp")
        temporary.write_text(text)
        temporary.replace(path)
    else:
        with path.open("r+" if path.exists() else "w") as file:
            file.truncate(0)
            file.write(text)
