"""What probing costs an idle agent: 10 device-plugin resources registered with their streams
open and the watchdog on, without probes (today's idle) and with each resource probing every
10 s, one agent per kind of probe that is cheap to provide here: path (files that exist),
command (``/bin/true``), tcp and http (a listener in the benchmark process).

The agents run side by side over the same window, each on its own kubelet stand-in, so that
each kind sees the same machine; each agent's CPU is its own process's, from /proc/<pid>/stat:
user + system of its threads, and apart from it the children it has reaped (cutime + cstime:
the command probes' processes, added at their reaping). The listeners' CPU (in the benchmark
process) is not counted.

TOKEN_RESOURCE_BENCH_PROBE_IDLE_SECONDS sets the window (default 60 s, --quick 20 s).
"""

from __future__ import annotations

import http.server
import os
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass

from bench.cpu import CpuMeter, CpuUse
from bench.scenarios import Scale, Section, counts_of, start_and_register
from bench.support import Bench, BenchAgent
from tests.loopback import http_server

RESOURCES = 10
TOKENS = 4
INTERVAL = 10  # seconds between checks
WINDOW_VARIABLE = "TOKEN_RESOURCE_BENCH_PROBE_IDLE_SECONDS"
WATCHDOG_USEC = "20000000"  # the shipped unit's WatchdogSec=20s, as the idle section has


def window(scale: Scale) -> float:
    value = os.environ.get(WINDOW_VARIABLE)
    return float(value) if value else (20.0 if scale.quick else 60.0)


# --- local things to probe ---------------------------------------------------------------------


class _Quiet(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


@contextmanager
def http_listener() -> Iterator[str]:
    """An HTTP server answering 200 on 127.0.0.1; its address (host:port)."""
    with http_server(_Quiet) as port:
        yield f"127.0.0.1:{port}"


@contextmanager
def tcp_listener() -> Iterator[str]:
    """A socket on 127.0.0.1 accepting connections and closing them; its host:port."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    listener.settimeout(0.2)
    stopping = threading.Event()

    def serve() -> None:
        while not stopping.is_set():
            try:
                connection, _ = listener.accept()
            except (socket.timeout, OSError):
                continue
            connection.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stopping.set()
        thread.join()
        listener.close()


# --- the agents ----------------------------------------------------------------------------------


@dataclass
class Probed:
    """One agent of the comparison: ``kind`` names its probes ("" for none)."""

    kind: str
    probe: str  # the probe table's target line, e.g. 'path = "..."' ("" for none)
    agent: BenchAgent | None = None
    meter: CpuMeter | None = None

    def table(self, name: str) -> str:
        """Resource ``name``'s probe table ("" for none)."""
        if not self.probe:
            return ""
        return f'[resources."{name}".probe]\n{self.probe}\ninterval = {INTERVAL}\n'

    @property
    def label(self) -> str:
        return f"{self.kind} probes" if self.kind else "no probes (today's idle)"


def per_minute(seconds: float, use: CpuUse) -> float:
    return seconds * 60 / use.wall


def probe_idle_section(scale: Scale) -> Section:
    seconds = window(scale)
    section = Section(
        f"Idle cost of probes ({RESOURCES} device-plugin resources, streams open, watchdog on; "
        f"each resource probing every {INTERVAL} s, or not; a {seconds:g} s window)"
    )
    with ExitStack() as stack:
        devices = stack.enter_context(Bench()).root  # a directory holding the probed paths
        for index in range(TOKENS):
            (devices / f"dev{index}").touch()
        tcp = stack.enter_context(tcp_listener())
        web = stack.enter_context(http_listener())
        runs = [
            Probed("", ""),
            Probed("path", f'path = "{devices}/dev{{index}}"'),
            Probed("command", 'command = ["/bin/true"]'),
            Probed("tcp", f'tcp = "{tcp}"'),
            Probed("http", f'http = "http://{web}/healthz"'),
        ]
        print(f"probe idle: {len(runs)} agents side by side, {seconds:g} s", flush=True)
        counts = counts_of(RESOURCES, TOKENS)
        for run in runs:
            bench = stack.enter_context(Bench())
            run.agent = bench.agent()
            run.agent.resource_extra = run.table
            start_and_register(bench, run.agent, counts, env={"WATCHDOG_USEC": WATCHDOG_USEC})
        # Start-up's stragglers done, and the window half an interval off the checks (which
        # began at each start), so it holds window / interval checks of each resource.
        time.sleep(INTERVAL / 2)
        for run in runs:
            assert run.agent is not None
            run.meter = CpuMeter(run.agent.pid)
        time.sleep(seconds)
        uses = [run.meter.stop() for run in runs if run.meter is not None]
        for run in runs:
            assert run.agent is not None
            assert run.agent.stop() == 0, run.agent.log()[-2000:]
    idle = uses[0]
    checks = RESOURCES * idle.wall / INTERVAL
    for run, use in zip(runs, uses):
        own = per_minute(use.threads, use)
        result = (
            f"{own:.3f} s (threads' schedstat; {per_minute(use.ticks, use):.2f} s from "
            f"/proc/<pid>/stat ticks)"
        )
        if run.kind:
            extra = use.threads - idle.threads
            result += (
                f"; {per_minute(extra, use):+.3f} s over no probes, "
                f"~{extra / checks * 1000:.2f} ms per check"
            )
        if run.kind == "command":
            result += (
                f"; the probe commands themselves (reaped children) "
                f"{per_minute(use.children, use):.2f} s more"
            )
        if use.ended_threads:
            result += f"; {use.ended_threads} thread(s) ended in the window (their time missed)"
        section.add(
            f"{run.label}: the agent's own CPU per minute",
            result,
            "≤ 0.1 s" if not run.kind else "",
            own <= 0.1 if not run.kind else None,
        )
    section.notes.append(
        f"The agent's own CPU is its process's: the sum over its threads of their time on a "
        "CPU (/proc/<pid>/task/*/schedstat, ns) over the window, and beside it user + system "
        f"from /proc/<pid>/stat (ticks of 0.01 s: over {idle.wall:.0f} s good to "
        f"{0.01 * 60 / idle.wall:.3f} s per minute). 'Per check' divides the CPU above the "
        f"no-probes agent by the {checks:.0f} checks expected in the window ({RESOURCES} "
        f"resources, one each {INTERVAL} s). For command probes the agent's own figure "
        "includes spawning them and reading their output; the commands' own CPU is apart, "
        "from the agent's cutime + cstime (its reaped children, ticks). The five agents run "
        "at once, each on its own kubelet stand-in in this process; the tcp and http "
        f"listeners run here too and are not counted. {WINDOW_VARIABLE} sets the window."
    )
    return section
