"""What the fleet's real processes asked and got over a window (bench/scale.py): their
requests (bench/audit.py), the bytes their sockets received, their CPU."""

from __future__ import annotations

import re
import subprocess
import threading
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from bench.scenarios import Section


@dataclass(frozen=True)
class Counts:
    """What each real agent and the publisher asked and got over ``seconds``."""

    seconds: float
    per_agent: Sequence[Counter[str]]  # verb resource -> requests
    agent_bytes: Sequence[int]
    agent_cpu: Sequence[float]
    publisher: Counter[str]
    publisher_bytes: int
    publisher_cpu: float
    publisher_rss_kib: float
    leases: int  # kwok's Lease renewals, all nodes
    nodes: int

    def _hourly(self, number: float) -> float:
        return number * 3600.0 / self.seconds

    @property
    def agent_requests(self) -> float:
        """The busiest agent's requests per hour."""
        return self._hourly(max(sum(c.values()) for c in self.per_agent))

    @property
    def agent_kib(self) -> float:
        """The busiest agent's KiB received per hour."""
        return self._hourly(max(self.agent_bytes)) / 1024

    @property
    def publisher_requests(self) -> float:
        return self._hourly(sum(self.publisher.values()))

    @property
    def publisher_kib(self) -> float:
        return self._hourly(self.publisher_bytes) / 1024

    @property
    def publisher_cpu_hourly(self) -> float:
        return self._hourly(self.publisher_cpu)

    @property
    def lease_requests(self) -> float:
        """A simulated kubelet's Lease requests per hour."""
        return self._hourly(self.leases / max(self.nodes, 1))

    def agent_line(self) -> str:
        totals = [sum(c.values()) for c in self.per_agent]
        kinds = Counter[str]()
        for counter in self.per_agent:
            kinds.update(counter)
        shown = ", ".join(f"{k} {v / len(self.per_agent):.1f}" for k, v in kinds.most_common(6))
        mean = self._hourly(sum(totals) / len(totals))
        return (
            f"{self.agent_requests:.0f} requests/h at most ({mean:.0f} mean; "
            f"in {self.seconds:.0f} s per agent: {shown}); "
            f"{self.agent_kib:.0f} KiB/h received at most; "
            f"CPU {max(self.agent_cpu):.2f} s at most"
        )

    def restart_line(self) -> str:
        """Every request of the window, by verb and resource: the mean per agent, and the
        range of the agents' totals; what they received and their CPU, at most."""
        kinds = Counter[str]()
        for counter in self.per_agent:
            kinds.update(counter)
        agents = len(self.per_agent)
        shown = ", ".join(f"{k} {v / agents:g}" for k, v in sorted(kinds.items())) or "none"
        totals = [sum(c.values()) for c in self.per_agent]
        return (
            f"requests per agent (mean of {agents}): {shown}; "
            f"{min(totals)} to {max(totals)} in all; "
            f"{max(self.agent_bytes) / 1024:.1f} KiB received at most; "
            f"CPU {max(self.agent_cpu):.2f} s at most"
        )

    def publisher_line(self) -> str:
        shown = ", ".join(f"{k} {v}" for k, v in self.publisher.most_common(6)) or "none"
        return (
            f"{self.publisher_requests:.0f} requests/h ({shown} in "
            f"{self.seconds:.0f} s); {self.publisher_kib:.0f} KiB/h received; "
            f"CPU {self.publisher_cpu:.2f} s, RSS "
            f"{self.publisher_rss_kib / 1024:.0f} MiB"
        )

    def churn_line(self, changes: int) -> str:
        shown = ", ".join(f"{k} {v}" for k, v in self.publisher.most_common(6)) or "none"
        return (
            f"the publisher: {shown} in {self.seconds:.0f} s; CPU {self.publisher_cpu:.2f} s, "
            f"{self.publisher_cpu * 1000 / changes:.2f} ms per change; RSS "
            f"{self.publisher_rss_kib / 1024:.0f} MiB after"
        )

    def lease_line(self) -> str:
        return f"{self.lease_requests:.0f} Lease requests/h per node"


RESTART_WINDOW = 60.0  # seconds counted after a mass restart


@dataclass(frozen=True)
class Restart:
    counts: Counts  # the agents' first RESTART_WINDOW seconds
    registered: Sequence[float | None]  # per agent: seconds to its driver's registration

    def report(self, section: Section, nodes: int) -> None:
        figure = f"{nodes:,} nodes: every agent restarted at once, its first {RESTART_WINDOW:.0f} s"
        section.add(figure, self.counts.restart_line())
        done = sorted(s for s in self.registered if s is not None)
        section.add(
            f"{nodes:,} nodes: the restarted agents' drivers registered with their kubelet",
            f"{len(done)} of {len(self.registered)}"
            + (f", {done[0]:.1f} to {done[-1]:.1f} s after the start" if done else ""),
        )


_RECEIVED = re.compile(r"bytes_received:(\d+)")
_PROCESS = re.compile(r"pid=(\d+),")


class SocketBytes:
    """The bytes the processes ``pids`` received from ``port`` while it runs: each TCP socket's
    own counter (ss), sampled every second, its growth since it was first seen."""

    def __init__(self, pids: Sequence[int], port: int) -> None:
        self._pids = list(pids)
        self._port = port
        self._first: dict[tuple[int, str], int] = {}
        self._last: dict[tuple[int, str], int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> SocketBytes:
        self._sample()
        # Sockets open at the start count from there: only their growth is the window's.
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()

    def totals(self) -> list[int]:
        totals = dict.fromkeys(self._pids, 0)
        for (pid, local), last in self._last.items():
            totals[pid] += last - self._first.get((pid, local), 0)
        return [totals[pid] for pid in self._pids]

    def _run(self) -> None:
        while not self._stop.wait(1.0):
            self._sample()

    def _sample(self) -> None:
        output = subprocess.run(
            ["ss", "-tniHp", "state", "established", "dport", f"= :{self._port}"],
            capture_output=True,
            text=True,
            check=False,
        ).stdout
        socket: tuple[int, str] | None = None
        for line in output.splitlines():
            found = _PROCESS.search(line)
            if found and not line[:1].isspace():
                # Recv-Q Send-Q Local Peer Process: a socket, then its tcp_info line.
                pid, local = int(found[1]), line.split()[2]
                socket = (pid, local) if pid in self._pids else None
                if socket is not None and socket not in self._first and self._thread.is_alive():
                    self._first[socket] = 0  # new during the window: all of it counts
                continue
            received = _RECEIVED.search(line)
            if socket is not None and received:
                value = int(received[1])
                self._first.setdefault(socket, value)
                self._last[socket] = value
