"""What the benchmarks are made of: the real agent as a process, a timed kubelet stand-in,
a timed sd_notify socket, /proc readings and the statistics of repeated runs."""

from __future__ import annotations

import math
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from tests.harness import NotifySocket
from tests.standin.kubelet import KubeletStandin
from tests.standin.kubelet_links import Link
from token_resource.protocol import deviceplugin_pb2 as pb

AGENT_COMMAND = (sys.executable, "-m", "token_resource", "run")
BASELINE_COMMAND = (sys.executable, "-m", "bench.baseline_plugin")
FLOOR_COMMAND = (sys.executable, "-m", "bench.floor_plugin")
TIMEOUT = 120.0
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


# --- statistics ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Sample:
    """Repeated measurements of one figure, in the unit they were taken in."""

    values: tuple[float, ...]

    @classmethod
    def of(cls, values: Iterable[float]) -> Sample:
        return cls(tuple(sorted(values)))

    @property
    def median(self) -> float:
        return statistics.median(self.values)

    @property
    def p99(self) -> float:
        """Nearest rank: with fewer than 100 runs this is the maximum."""
        return self.values[max(0, math.ceil(0.99 * len(self.values)) - 1)]

    @property
    def low(self) -> float:
        return self.values[0]

    @property
    def high(self) -> float:
        return self.values[-1]


# --- /proc -----------------------------------------------------------------------------------


def rss_kib(pid: int) -> int:
    return _status_field(pid, "VmRSS")


def pss_kib(pid: int) -> int:
    """Proportional set size: shared library pages divided among the processes sharing them."""
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("Pss:"):
            return int(line.split()[1])
    raise LookupError(f"no Pss for {pid}")


def threads(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/task"))


def fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def cpu_seconds(pid: int) -> float:
    """User plus system time of every thread so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def context_switches(pid: int) -> int:
    """Voluntary and involuntary switches of every live thread: roughly its wake-ups."""
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            text = Path(f"/proc/{pid}/task/{task}/status").read_text()
        except FileNotFoundError:
            continue
        for line in text.splitlines():
            if line.startswith(("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")):
                total += int(line.split()[1])
    return total


def _status_field(pid: int, name: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{name}:"):
            return int(line.split()[1])
    raise LookupError(f"no {name} for {pid}")


# --- the kubelet stand-in, timed ---------------------------------------------------------------


@dataclass(eq=False)
class Expectation:
    """Every named resource sends a list of the given length, from a registration numbered at
    least ``min_registrations``; ``time`` is when the last of them arrived."""

    counts: Mapping[str, int]
    min_registrations: int
    pending: set[str] = field(default_factory=set)
    done: threading.Event = field(default_factory=threading.Event)
    time: float = math.nan

    def wait(self, timeout: float = TIMEOUT) -> float:
        if not self.done.wait(timeout):
            missing = sorted(self.pending)
            raise TimeoutError(f"{len(missing)} resource(s) never sent the list: {missing[:5]}")
        return self.time


class TimedKubelet(KubeletStandin):
    """The project's kubelet stand-in, plus a cheap hook on each ListAndWatch message.

    ``wait_for`` re-evaluates a predicate on a full snapshot at every event, which is O(N)
    per event and would make the stand-in, not the agent, the slow part at 1,000 resources.
    An expectation instead checks only the resource that sent the list: O(1) per event.
    """

    def __init__(self, socket_dir: Path) -> None:
        super().__init__(socket_dir)
        self._hook_lock = threading.Lock()
        self._expectations: list[Expectation] = []

    def expect(self, counts: Mapping[str, int], min_registrations: int = 1) -> Expectation:
        expectation = Expectation(dict(counts), min_registrations, set(counts))
        with self._hook_lock:
            self._expectations.append(expectation)
        return expectation

    def _received(self, link: Link, response: pb.ListAndWatchResponse) -> None:
        super()._received(link, response)
        now = time.monotonic()
        with self._hook_lock:
            if not self._expectations or link.closed:
                return
            length = len(response.devices)
            view = self._views.get(link.resource)
            registrations = view.registrations if view is not None else 0
            for expectation in self._expectations:
                if (
                    expectation.counts.get(link.resource) == length
                    and registrations >= expectation.min_registrations
                ):
                    expectation.pending.discard(link.resource)
                    if not expectation.pending:
                        expectation.time = now
                        expectation.done.set()
            self._expectations = [e for e in self._expectations if not e.done.is_set()]


# --- the agent, as a process ---------------------------------------------------------------------


def resource_names(count: int) -> list[str]:
    return [f"example.com/r{i:04d}" for i in range(count)]


def resources_toml(counts: Mapping[str, int]) -> str:
    return "[resources]\n" + "".join(f'"{name}" = {count}\n' for name, count in counts.items())


class BenchAgent:
    """``token-resource run`` with its own config, control socket, log and notify socket."""

    def __init__(self, workdir: Path, device_plugin_dir: Path, source: Path | None = None) -> None:
        """``source``: the directory holding another version's ``token_resource`` package
        (an earlier commit's ``agent/``), run instead of the installed one."""
        workdir.mkdir(parents=True, exist_ok=True)
        self.source = source
        self.device_plugin_dir = device_plugin_dir
        self.config_path = workdir / "token-resource.toml"
        self.control_socket = workdir / "control.sock"
        self.log_path = workdir / "agent.log"
        self.notify = NotifySocket(workdir / "notify.sock")
        self.process: subprocess.Popen[bytes] | None = None
        # Each resource's table after its count, e.g. its probe (a function of its name).
        self.resource_extra: Callable[[str], str] | None = None

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def text(self, counts: Mapping[str, int]) -> str:
        head = f'[agent]\ndevice_plugin_dir = "{self.device_plugin_dir}"\n'
        extra = self.resource_extra
        if extra is None:
            return head + resources_toml(counts)
        return head + "".join(
            f'[resources."{name}"]\ncount = {count}\n{extra(name)}'
            for name, count in counts.items()
        )

    def write(self, counts: Mapping[str, int], *, atomic: bool = True) -> None:
        if atomic:
            temporary = self.config_path.with_name(f".{self.config_path.name}.tmp")
            temporary.write_text(self.text(counts))
            temporary.replace(self.config_path)
        else:
            with self.config_path.open("r+" if self.config_path.exists() else "w") as file:
                file.truncate(0)
                file.write(self.text(counts))

    def start(self, env: Mapping[str, str] | None = None) -> float:
        """Spawn the agent; returns the monotonic time just before the spawn."""
        environ = {
            k: v for k, v in os.environ.items() if k not in ("NOTIFY_SOCKET", "WATCHDOG_USEC")
        }
        environ.update({"NOTIFY_SOCKET": str(self.notify.path), **(env or {})})
        if self.source is not None:
            environ["PYTHONPATH"] = os.pathsep.join(
                [str(self.source), *filter(None, [environ.get("PYTHONPATH")])]
            )
        command = [
            *AGENT_COMMAND,
            "--config",
            str(self.config_path),
            "--control-socket",
            str(self.control_socket),
        ]
        with self.log_path.open("ab") as log:
            started = time.monotonic()
            self.process = subprocess.Popen(command, stdout=log, stderr=log, env=environ)
        return started

    def stop(self) -> int:
        assert self.process is not None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        return self.process.wait(TIMEOUT)

    def close(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self.notify.close()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


class Bench:
    """A temporary node: a device-plugin directory with a timed kubelet stand-in, and agents
    and baseline plugins on it; everything is stopped and removed on exit."""

    def __init__(self) -> None:
        # Short: a unix socket path holds at most 107 bytes.
        self.root = Path(tempfile.mkdtemp(prefix="trb-"))
        self.device_plugin_dir = self.root / "dp"
        self.device_plugin_dir.mkdir()
        self.kubelet = TimedKubelet(self.device_plugin_dir)
        self._agents: list[BenchAgent] = []
        self._plugins: list[subprocess.Popen[bytes]] = []
        self._floor_log = self.root / "floor.log"

    def __enter__(self) -> Bench:
        self.kubelet.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        try:
            for agent in self._agents:
                agent.close()
            self.stop_plugins(self._plugins)
            self.kubelet.stop()
        finally:
            if exc is not None:
                for agent in self._agents:
                    sys.stderr.write(f"--- agent log (tail) ---\n{agent.log()[-3000:]}\n")
                if self._floor_log.exists():
                    floor_log = self._floor_log.read_text(errors="replace")
                    sys.stderr.write(f"--- floor log (tail) ---\n{floor_log[-3000:]}\n")
            shutil.rmtree(self.root, ignore_errors=True)

    def agent(self, name: str = "agent", source: Path | None = None) -> BenchAgent:
        agent = BenchAgent(self.root / name, self.device_plugin_dir, source)
        self._agents.append(agent)
        return agent

    def spawn_floor(self, resources: int, count: int) -> subprocess.Popen[bytes]:
        """The ideal client (bench/floor_plugin.py) serving ``resources`` resources."""
        command = [
            *FLOOR_COMMAND,
            "--dir",
            str(self.device_plugin_dir),
            "--resources",
            str(resources),
            "--count",
            str(count),
        ]
        with self._floor_log.open("ab") as log:
            floor = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=log)
        self._plugins.append(floor)
        return floor

    def spawn_plugin(self, resource: str, count: int) -> subprocess.Popen[bytes]:
        plugin = subprocess.Popen(
            [
                *BASELINE_COMMAND,
                "--dir",
                str(self.device_plugin_dir),
                "--resource",
                resource,
                "--count",
                str(count),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self._plugins.append(plugin)
        return plugin

    @staticmethod
    def stop_plugins(plugins: Sequence[subprocess.Popen[bytes]]) -> None:
        for plugin in plugins:
            if plugin.poll() is None:
                plugin.send_signal(signal.SIGTERM)
        for plugin in plugins:
            try:
                plugin.wait(TIMEOUT)
            except subprocess.TimeoutExpired:
                plugin.kill()
                plugin.wait()
