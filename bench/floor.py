"""The agent against the floor: an ideal client that serves N resources and only registers
(bench/floor_plugin.py), and the agent of an earlier commit, side by side in one run.

Beside the wall-clock times, each client's own CPU time (user + system of its process, from
/proc) for a start (spawn → all registered, plus what it does in the second after) and for a
kubelet restart (the old kubelet's stop → all registered again, plus the second after), and
its RSS once started: these do not depend on how fast the kubelet stand-in is, so they hold
against a real kubelet too, where the wall-clock times do not."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from bench.scenarios import TOKENS, Scale, Section, counts_of, mib, ms, start_and_register
from bench.support import Bench, Sample, cpu_seconds, rss_kib

# A client's work does not end the moment the stand-in has every list (answers in flight, the
# streams' last messages, log lines): what it does in this time after is counted too.
TRAILING_SECONDS = 1.5


@dataclass(frozen=True)
class Client:
    """Something that serves N resources to the kubelet: the agent (this tree's, or an earlier
    commit's from ``source``), or the floor (bench/floor_plugin.py)."""

    name: str
    source: Path | None = None
    floor: bool = False

    def start(self, bench: Bench, counts: Mapping[str, int]) -> tuple[int, float, float]:
        """Start it; returns (its pid, spawn, every resource registered with its list)."""
        expectation = bench.kubelet.expect(counts)
        if self.floor:
            spawned = time.monotonic()
            pid = bench.spawn_floor(len(counts), TOKENS).pid
            return pid, spawned, expectation.wait()
        agent = bench.agent(source=self.source)
        spawned, _, registered = start_and_register(bench, agent, counts)
        return agent.pid, spawned, registered


@dataclass(frozen=True)
class Figures:
    start: Sample  # process start → every resource registered and listed
    restart: Sample  # kubelet start → every resource registered again and listed
    start_cpu: Sample  # the client's CPU seconds for a start
    restart_cpu: Sample  # the client's CPU seconds for a kubelet restart
    rss_kib: int  # after the first start


def startup_and_restarts(client: Client, n: int, starts: int, restarts: int) -> Figures:
    """``starts`` starts, and ``restarts`` kubelet restarts after the first one."""
    counts = counts_of(n)
    to_registered, to_healthy, start_cpu, restart_cpu = [], [], [], []
    rss = 0
    for start in range(starts):
        with Bench() as bench:
            pid, spawned, registered = client.start(bench, counts)
            to_registered.append(registered - spawned)
            time.sleep(TRAILING_SECONDS)
            start_cpu.append(cpu_seconds(pid))
            if start:
                continue
            rss = rss_kib(pid)
            for rep in range(restarts):
                expectation = bench.kubelet.expect(counts, min_registrations=rep + 2)
                before = cpu_seconds(pid)
                bench.kubelet.stop()
                starting = time.monotonic()
                bench.kubelet.start()
                to_healthy.append(expectation.wait() - starting)
                time.sleep(TRAILING_SECONDS)
                restart_cpu.append(cpu_seconds(pid) - before)
    return Figures(
        Sample.of(to_registered),
        Sample.of(to_healthy),
        Sample.of(start_cpu),
        Sample.of(restart_cpu),
        rss,
    )


def seconds(sample: Sample) -> str:
    return f"{sample.median:.2f} s (min {sample.low:.2f}, max {sample.high:.2f})"


def floor_section(scale: Scale, before: Path | None) -> Section:
    section = Section(
        "Against the floor (an ideal client: sockets in its own directory, Register only)"
    )
    clients = [
        Client("agent"),
        *([Client("agent before", source=before)] if before is not None else []),
        Client("floor", floor=True),
    ]
    for n, starts, restarts in ((1, 5, 20), (10, 5, 20), (100, 3, 10), (1000, 3, 5)):
        results = {}
        for client in clients:
            print(f"{client.name}, {n} resource(s)", flush=True)
            results[client.name] = startup_and_restarts(
                client, n, scale.reps(starts), scale.reps(restarts)
            )
        floor = results["floor"]
        for client in clients:
            figures = results[client.name]
            ratios = (
                f" ({figures.start.median / floor.start.median:.1f}x / "
                f"{figures.restart.median / floor.restart.median:.1f}x the floor)"
                if not client.floor
                else ""
            )
            target = n in (100, 1000) and client.name == "agent"
            section.add(
                f"{n} resource(s), {client.name}: start → all registered / kubelet restart → "
                "all healthy",
                f"{ms(figures.start)} / {ms(figures.restart)}{ratios}",
                "restart ≤ 1.5x the floor" if target else "",
                figures.restart.median <= 1.5 * floor.restart.median if target else None,
            )
        for client in clients:
            figures = results[client.name]
            mine = client.name == "agent" and n == 1000
            section.add(
                f"{n} resource(s), {client.name}: own CPU for a start / a kubelet restart",
                f"{seconds(figures.start_cpu)} / {seconds(figures.restart_cpu)}",
                "start ≤ 1.2 s, restart ≤ 1.0 s" if mine else "",
                figures.start_cpu.median <= 1.2 and figures.restart_cpu.median <= 1.0
                if mine
                else None,
            )
            section.add(
                f"{n} resource(s), {client.name}: RSS after start",
                mib(figures.rss_kib),
                "≤ 90 MiB" if mine else "",
                figures.rss_kib <= 90 * 1024 if mine else None,
            )
    section.notes.append(
        "Each client runs alone against the same kubelet stand-in in this process; the floor "
        "(bench/floor_plugin.py) learns of a kubelet start from inotify, as the agent does, and "
        "then calls Register for every resource at once over one channel."
        + (
            " 'agent before' is the agent of the revision given with --before (make bench: "
            "BENCH_BEFORE)."
            if before is not None
            else ""
        )
    )
    return section
