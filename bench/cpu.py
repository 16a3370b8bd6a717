"""A process's CPU over a window: its own threads' (finely, from schedstat, and in the ticks of
/proc/<pid>/stat) and its reaped children's."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from bench.support import CLOCK_TICKS, cpu_seconds


def children_cpu_seconds(pid: int) -> float:
    """User plus system time of the children it has waited for (cutime + cstime): a child's
    time is added when it is reaped, so one still running is not in it yet."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[13]) + int(fields[14])) / CLOCK_TICKS


def thread_cpu_ns(pid: int) -> dict[int, int]:
    """Each live thread's time on a CPU in ns (/proc/<pid>/task/<tid>/schedstat): finer than
    the 0.01 s ticks of /proc/<pid>/stat, but a thread's time goes with it when it ends."""
    found = {}
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            found[int(task)] = int(
                Path(f"/proc/{pid}/task/{task}/schedstat").read_text().split()[0]
            )
        except (FileNotFoundError, ProcessLookupError):
            continue
    return found


@dataclass(frozen=True)
class CpuUse:
    """A process's CPU over a window, in seconds."""

    ticks: float  # user + system of all its threads (/proc/<pid>/stat), 0.01 s resolution
    threads: float  # the same from its threads' schedstat, ns resolution (live threads)
    # Threads that ended in the window: their time is missing from ``threads`` (as is that of
    # a thread both started and ended in it, not counted here); ``ticks`` has them all.
    ended_threads: int
    children: float  # cutime + cstime: the children it reaped in the window
    wall: float


class CpuMeter:
    """``CpuMeter(pid)`` starts a window, ``stop()`` ends it."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self._ticks, self._children = cpu_seconds(pid), children_cpu_seconds(pid)
        self._threads = thread_cpu_ns(pid)
        self._started = time.monotonic()

    def stop(self) -> CpuUse:
        wall = time.monotonic() - self._started
        threads = thread_cpu_ns(self.pid)
        return CpuUse(
            cpu_seconds(self.pid) - self._ticks,
            sum(ns - self._threads.get(tid, 0) for tid, ns in threads.items()) / 1e9,
            len(set(self._threads) - set(threads)),
            children_cpu_seconds(self.pid) - self._children,
            wall,
        )
