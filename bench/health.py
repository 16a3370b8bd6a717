"""Health probes, end to end: one token's device path removed → that token out of what the
kubelet can allocate (device plugin) or tainted in its ResourceSlice (DRA), and back when the
path returns.

A path probe checks every ``interval`` seconds and the removal lands anywhere between two
checks, so the figures spread from ~0 to one interval (plus the agent's own reaction); the
removal is put at a random point of the interval (a fixed seed) rather than in step with the
previous check. Beside the wall times, the agent's own CPU (user + system of its process,
from /proc) over all the repetitions.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.cpu import CpuMeter, CpuUse
from bench.dra import DRIVER, NODE, DraBench, registered
from bench.scenarios import Scale, Section, start_and_register
from bench.support import TIMEOUT, Bench, Sample, resource_names
from tests.standin.apiserver import ApiServerView
from tests.standin.kubelet import KubeletView
from token_resource.apiserver.objects.slices import pool_name

TOKENS = 4
INTERVAL = 1  # seconds between checks
REPETITIONS = 5  # removals (and returns) per scenario
TAINT = f"{DRIVER}/unhealthy"


def probe_table(name: str, devices: Path) -> str:
    """A path probe of ``name``: token N healthy while DEVICES/dev<N> exists."""
    return (
        f'[resources."{name}".probe]\npath = "{devices}/dev{{index}}"\n'
        f"interval = {INTERVAL}\nfailure_threshold = 1\n"
    )


def plug(devices: Path, count: int = TOKENS) -> None:
    devices.mkdir(exist_ok=True)
    for index in range(count):
        (devices / f"dev{index}").touch()


@dataclass(frozen=True)
class Cycles:
    """Repeated removals and returns of one token's path."""

    out: Sample  # path removed → the token out (allocatable one less / tainted)
    back: Sample  # path back → the token back
    agent_cpu: CpuUse  # the agent's CPU over all the cycles


def cycles(
    devices: Path,
    pid: int,
    reps: int,
    out: Callable[[int], Callable[[], object]],
    back: Callable[[], Callable[[], object]],
) -> Cycles:
    """``reps`` times: remove token N's path and wait for ``out(N)``'s wait, put it back and
    wait for ``back()``'s. Each wait is made (the predicate built) before the change."""
    rng = random.Random(1)
    removed: list[float] = []
    returned: list[float] = []
    meter = CpuMeter(pid)
    for rep in range(reps):
        index = rep % TOKENS
        path = devices / f"dev{index}"
        for samples, wait, change in (
            (removed, out(index), path.unlink),
            (returned, back(), path.touch),
        ):
            time.sleep(rng.uniform(0.0, INTERVAL))  # a random point between two checks
            changed = time.monotonic()
            change()
            wait()
            samples.append(time.monotonic() - changed)
    return Cycles(Sample.of(removed), Sample.of(returned), meter.stop())


# --- device plugin: the kubelet's allocatable --------------------------------------------------


def listed(name: str, unhealthy: int | None) -> Callable[[KubeletView], bool]:
    """Every token listed, exactly token-``unhealthy`` Unhealthy (none if None)."""

    def holds(view: KubeletView) -> bool:
        resource = view.resources[name]
        expected = [
            (f"token-{i}", "Unhealthy" if i == unhealthy else "Healthy") for i in range(TOKENS)
        ]
        return (
            resource.stream_open
            and sorted(resource.devices) == expected
            and resource.allocatable == TOKENS - (unhealthy is not None)
        )

    return holds


def device_plugin_cycles(reps: int) -> Cycles:
    name = resource_names(1)[0]
    with Bench() as bench:
        devices = bench.root / "dev"
        plug(devices)
        agent = bench.agent()
        agent.resource_extra = lambda resource: probe_table(resource, devices)
        start_and_register(bench, agent, {name: TOKENS})
        kubelet = bench.kubelet
        kubelet.wait_for(listed(name, None), timeout=TIMEOUT)

        def out(index: int) -> Callable[[], object]:
            return lambda: kubelet.wait_for(listed(name, index), timeout=TIMEOUT)

        def back() -> Callable[[], object]:
            return lambda: kubelet.wait_for(listed(name, None), timeout=TIMEOUT)

        result = cycles(devices, agent.pid, reps, out, back)
        registrations = kubelet.snapshot().resources[name].registrations
        assert registrations == 1, f"{registrations} registrations: health must not re-register"
        assert agent.stop() == 0, agent.log()[-2000:]
    return result


# --- DRA: the taint in the ResourceSlice ---------------------------------------------------------


class ProbedDra(DraBench):
    """One DRA resource of TOKENS tokens, with a path probe under DEVICES."""

    def __init__(self, stack: ExitStack) -> None:
        super().__init__(stack, 1)
        self.devices = self.agent.config_path.parent / "dev"

    def text(self, counts: Mapping[str, int]) -> str:
        return super().text(counts) + probe_table(self.names[0], self.devices)


def taints_of(view: ApiServerView, pool: str) -> dict[str, list[dict[str, Any]]] | None:
    """Device -> its taints (key and effect) in the pool's current generation, or None while
    that generation is incomplete."""
    current = view.pools(NODE, DRIVER).get(pool)
    if current is None or not current.complete:
        return None
    found: dict[str, list[dict[str, Any]]] = {}
    for item in view.slices_of(NODE, DRIVER):
        spec = item["spec"]
        if spec["pool"]["name"] != pool or spec["pool"]["generation"] != current.generation:
            continue
        for device in spec.get("devices") or []:
            found[device["name"]] = [
                {"key": taint.get("key"), "effect": taint.get("effect")}
                for taint in device.get("taints") or []
            ]
    return found


def tainted(pool: str, index: int | None) -> Callable[[ApiServerView], bool]:
    """Every token published, exactly token-``index`` tainted ``<driver>/unhealthy``
    NoSchedule (none if None)."""
    expected = {
        f"token-{i}": [{"key": TAINT, "effect": "NoSchedule"}] if i == index else []
        for i in range(TOKENS)
    }
    return lambda view: taints_of(view, pool) == expected


@contextmanager
def probed_dra_node() -> Iterator[ProbedDra]:
    with ExitStack() as stack:
        node = ProbedDra(stack)
        plug(node.devices)
        node.write(node.counts)
        node.agent.start()
        node.kubelet.wait_for(registered, timeout=TIMEOUT)
        node.apiserver.wait_for(tainted(pool_name(NODE, node.names[0]), None), timeout=TIMEOUT)
        try:
            yield node
        finally:
            assert node.agent.stop() == 0, node.agent.log()[-2000:]


def dra_cycles(reps: int) -> Cycles:
    with probed_dra_node() as node:
        pool = pool_name(NODE, node.names[0])
        apiserver = node.apiserver

        def out(index: int) -> Callable[[], object]:
            return lambda: apiserver.wait_for(tainted(pool, index), timeout=TIMEOUT)

        def back() -> Callable[[], object]:
            return lambda: apiserver.wait_for(tainted(pool, None), timeout=TIMEOUT)

        return cycles(node.devices, node.agent.pid, reps, out, back)


# --- the section ---------------------------------------------------------------------------------


def median_max(sample: Sample) -> str:
    return (
        f"median {sample.median * 1000:.0f} ms, max {sample.high * 1000:.0f} ms "
        f"(min {sample.low * 1000:.0f}; n={len(sample.values)})"
    )


def health_section(scale: Scale) -> Section:
    section = Section(
        f"Health probes: a token's path removed → the token out, and back (path probe every "
        f"{INTERVAL} s, failure_threshold 1, {TOKENS} tokens)"
    )
    reps = scale.reps(REPETITIONS)
    limit = INTERVAL + 0.5
    for kind, measure, out, back in (
        (
            "device plugin",
            device_plugin_cycles,
            "path removed → the kubelet stand-in's allocatable one less (that token Unhealthy)",
            "path back → allocatable back",
        ),
        (
            "DRA",
            dra_cycles,
            "path removed → the ResourceSlice carries the taint on exactly that device",
            "path back → the taint gone",
        ),
    ):
        print(f"health, {kind} x {reps}", flush=True)
        result = measure(reps)
        section.add(
            f"{kind}: {out}",
            median_max(result.out),
            f"max ≤ {limit:g} s",
            result.out.high <= limit,
        )
        section.add(
            f"{kind}: {back}",
            median_max(result.back),
            f"max ≤ {limit:g} s",
            result.back.high <= limit,
        )
        use = result.agent_cpu
        section.add(
            f"{kind}: the agent's own CPU over the {reps} cycles",
            f"{use.threads:.3f} s in {use.wall:.1f} s wall ({use.threads * 60 / use.wall:.2f} s "
            f"per minute; /proc/<pid>/stat ticks: {use.ticks:.2f} s)",
        )
    section.notes.append(
        f"Each change lands at a random point between two checks, so the figures spread from "
        f"~0 to one interval ({INTERVAL} s) plus the agent's reaction: the median is about half "
        "an interval, the maximum about one. Wall times are from the change (unlink or touch) "
        "to the stand-in's state in which the predicate first holds (kubelet stand-in: the "
        "ListAndWatch message; API-server stand-in: the slice write); the agent's CPU (its "
        "threads' schedstat) includes its probing in between. The DRA time ends when the "
        "pool's current generation, as the scheduler reads it, has the taint."
    )
    return section
