"""The agent against the floor: an ideal client that serves N resources and only registers
(bench/floor_plugin.py), and the agent of an earlier commit, side by side in one run."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from bench.scenarios import TOKENS, Scale, Section, counts_of, ms, start_and_register
from bench.support import Bench, Sample


@dataclass(frozen=True)
class Client:
    """Something that serves N resources to the kubelet: the agent (this tree's, or an earlier
    commit's from ``source``), or the floor (bench/floor_plugin.py)."""

    name: str
    source: Path | None = None
    floor: bool = False

    def start(self, bench: Bench, counts: Mapping[str, int]) -> tuple[float, float]:
        """Start it; returns (spawn, every resource registered with its list)."""
        expectation = bench.kubelet.expect(counts)
        if self.floor:
            spawned = time.monotonic()
            bench.spawn_floor(len(counts), TOKENS)
            return spawned, expectation.wait()
        agent = bench.agent(source=self.source)
        spawned, _, registered = start_and_register(bench, agent, counts)
        return spawned, registered


def startup_and_restarts(
    client: Client, n: int, starts: int, restarts: int
) -> tuple[Sample, Sample]:
    """(process start → every resource registered and listed, over ``starts`` starts;
    kubelet start → every resource registered again and listed, over ``restarts`` restarts)."""
    counts = counts_of(n)
    to_registered, to_healthy = [], []
    for start in range(starts):
        with Bench() as bench:
            spawned, registered = client.start(bench, counts)
            to_registered.append(registered - spawned)
            if start:
                continue
            for rep in range(restarts):
                expectation = bench.kubelet.expect(counts, min_registrations=rep + 2)
                bench.kubelet.stop()
                starting = time.monotonic()
                bench.kubelet.start()
                to_healthy.append(expectation.wait() - starting)
    return Sample.of(to_registered), Sample.of(to_healthy)


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
        floor_start, floor_restart = results["floor"]
        for client in clients:
            start, restart = results[client.name]
            ratios = (
                f" ({start.median / floor_start.median:.1f}x / "
                f"{restart.median / floor_restart.median:.1f}x the floor)"
                if not client.floor
                else ""
            )
            target = n in (100, 1000) and client.name == "agent"
            section.add(
                f"{n} resource(s), {client.name}: start → all registered / kubelet restart → "
                "all healthy",
                f"{ms(start)} / {ms(restart)}{ratios}",
                "restart ≤ 1.5x the floor" if target else "",
                restart.median <= 1.5 * floor_restart.median if target else None,
            )
    section.notes.append(
        "Each client runs alone against the same kubelet stand-in in this process; the floor "
        "(bench/floor_plugin.py) learns of a kubelet start from inotify, as the agent does, and "
        "then calls Register for every resource at once over one channel."
        + (
            " 'agent before' is the agent as it was before its sockets moved into their own "
            "directory (every kubelet restart served every resource on a new socket)."
            if before is not None
            else ""
        )
    )
    return section
