"""``make bench``: run every benchmark, print a markdown report, write bench/RESULTS.md (an
``--only`` run: bench/results/NAME.md; ``--quick``: nothing).

python -m bench [--quick] [--only NAME ...] [--output PATH]
"""

from __future__ import annotations

import os

# The benchmark spawns processes while the in-process kubelet stand-in runs gRPC threads; see
# tests/conftest.py for why gRPC's fork support must be off (grpc/grpc#43055).
os.environ["GRPC_ENABLE_FORK_SUPPORT"] = "false"

import argparse
import contextlib
import datetime
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from importlib import metadata
from pathlib import Path

from bench.claim_churn import claim_churn_section
from bench.cluster_pools import cluster_pools_section
from bench.dra import dra_section
from bench.dra_start import dra_start_section
from bench.floor import floor_section
from bench.health import health_section
from bench.mass_restart import mass_restart_section
from bench.probe_idle import probe_idle_section
from bench.scale import scale_section
from bench.scenarios import (
    Scale,
    Section,
    StartupResult,
    allocation_section,
    comparison_section,
    idle_section,
    large_section,
    reload_section,
    reloads_section,
    restart_section,
    startup_section,
)
from bench.support import Sample

RESULTS = Path(__file__).resolve().parent / "RESULTS.md"
# An --only run's report, one file per choice of sections (docs/performance.md quotes them).
RESULTS_DIR = RESULTS.parent / "results"
NAMES = (
    "startup",
    "reload",
    "restart",
    "floor",
    "dra",
    "allocate",
    "reloads",
    "idle",
    "health",
    "probe-idle",
    "dra-start",
    "cluster-pools",
    "large",
    "scale",
    "claim-churn",
    "mass-restart",
    "compare",
)

# The sections that need nothing but the scale, by name (the others are run in main).
SECTIONS: dict[str, Callable[[Scale], Section]] = {
    "restart": restart_section,
    "dra": dra_section,
    "dra-start": dra_start_section,
    "cluster-pools": cluster_pools_section,
    "allocate": allocation_section,
    "reloads": reloads_section,
    "idle": idle_section,
    "health": health_section,
    "probe-idle": probe_idle_section,
    "large": large_section,
    "scale": scale_section,
    "claim-churn": claim_churn_section,
    "mass-restart": mass_restart_section,
}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="few repetitions: a smoke run")
    parser.add_argument("--only", nargs="+", choices=NAMES, help="run only these")
    parser.add_argument("--output", type=Path, default=None, help=f"default {RESULTS}")
    parser.add_argument(
        "--before",
        metavar="REV",
        help="also measure the agent of this git revision against the floor (make bench: "
        "the last one before the sockets moved into the agent's own directory)",
    )
    args = parser.parse_args(argv)
    scale = Scale(quick=args.quick)
    load_before = os.getloadavg()[0]
    chosen = set(args.only or NAMES)
    if "compare" in chosen:
        chosen |= {"startup", "reload"}  # the comparison quotes their figures
    started = time.monotonic()
    sections: list[Section] = []
    startups: dict[int, StartupResult] = {}
    reloads: dict[int, Sample] = {}
    if "startup" in chosen:
        start, memory, startups = startup_section(scale)
        sections += [start, memory]
    if "reload" in chosen:
        reload, reloads = reload_section(scale)
        sections.append(reload)
    for name in NAMES:
        if name in chosen and name in SECTIONS:
            sections.append(SECTIONS[name](scale))
        elif name == "floor" and name in chosen:
            with earlier_agent(args.before) as before:
                sections.append(floor_section(scale, before))
    if "compare" in chosen:
        sections.append(comparison_section(scale, startups, reloads.get(1)))
    elapsed = time.monotonic() - started
    load = f"{load_before:.1f} at the start, {os.getloadavg()[0]:.1f} at the end"
    report = render(sections, elapsed, scale, chosen != set(NAMES), load)
    print()
    print(report)
    output = args.output or (None if args.quick else results_file(args.only))
    if output is not None:
        output.write_text(report)
        print(f"bench: written to {output}", file=sys.stderr)
    return 0


def results_file(only: Sequence[str] | None) -> Path:
    """bench/RESULTS.md for a whole run, bench/results/NAME[-NAME...].md for an --only one."""
    return RESULTS if not only else RESULTS_DIR / f"{'-'.join(sorted(set(only)))}.md"


@contextlib.contextmanager
def earlier_agent(revision: str | None) -> Iterator[Path | None]:
    """The ``agent/`` directory of ``revision``, extracted from git into a temporary
    directory (None without a revision)."""
    if revision is None:
        yield None
        return
    with tempfile.TemporaryDirectory(prefix="trb-before-") as scratch:
        archive = subprocess.run(
            ["git", "archive", revision, "agent/token_resource"],
            cwd=Path(__file__).resolve().parents[1],
            check=True,
            capture_output=True,
        ).stdout
        subprocess.run(["tar", "-x", "-C", scratch], input=archive, check=True)
        yield Path(scratch) / "agent"


def render(
    sections: Sequence[Section], elapsed: float, scale: Scale, partial: bool, load: str
) -> str:
    lines = [
        "# token-resource benchmark results",
        "",
        f"Produced by `make bench` (`python -m bench{' --quick' if scale.quick else ''}`) on "
        f"{datetime.date.today().isoformat()} in {elapsed / 60:.1f} min"
        f"{' (a partial run)' if partial else ''}. The agent runs as a real process "
        "(`token-resource run`) against the kubelet stand-in (tests/standin/kubelet.py, "
        "in the benchmark process) over real unix sockets. Times are wall-clock from the "
        "benchmark's side; median and p99 over repeated runs (p99 is the nearest rank, so "
        "the maximum below 100 runs).",
        "",
        "## Machine",
        "",
        *(f"- {key}: {value}" for key, value in machine().items()),
        f"- load average (1 min): {load}; other work on the machine shows in the figures",
        "",
    ]
    for section in sections:
        lines += [f"## {section.title}", "", "| figure | result | target | |", "|---|---|---|---|"]
        for row in section.rows:
            lines.append(f"| {row.figure} | {row.result} | {row.target} | {row.verdict} |")
        lines.append("")
        lines += [*(f"{note}\n" for note in section.notes)]
    return "\n".join(lines).rstrip() + "\n"


def machine() -> dict[str, str]:
    cpu = "unknown"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            cpu = line.partition(":")[2].strip()
            break
    memory = "unknown"
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            memory = f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB"
    versions = ", ".join(
        f"{name} {metadata.version(name)}"
        for name in ("token-resource", "grpcio", "protobuf", "watchdog", "sdnotify")
    )
    return {
        "CPU": f"{cpu}, {os.cpu_count()} cores",
        "memory": memory,
        "kernel": f"{platform.system()} {platform.release()}",
        "Python": f"{platform.python_implementation()} {platform.python_version()}",
        "libraries": versions,
    }


if __name__ == "__main__":
    sys.exit(main())
