"""A DRA agent's start: the process spawned → the kubelet stand-in's plugin watcher has the
driver registered (it found the registration socket, asked GetInfo, told the agent it is
registered). Alone (the host's service), and as an instance of a DaemonSet rollout, which first
reads its Node's kubelet version from the API server. This is what a node waits for after a
reboot or during a rollout before a claim can be prepared; the agent's own CPU beside it.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from contextlib import ExitStack

from bench.dra import DRIVER, DraBench
from bench.floor import seconds
from bench.scenarios import Scale, Section, ms
from bench.support import TIMEOUT, Sample, cpu_seconds
from tests.standin.kubelet import KubeletView

INSTANCE = {"TOKEN_RESOURCE_INSTANCE": "5f0c1e9a-0000-4d6b-9a3e-000000000001"}


def _plugins(view: KubeletView) -> tuple[int, int]:
    """(registrations so far, connected plugins now) of the driver."""
    driver = view.dra.drivers.get(DRIVER) if view.dra is not None else None
    if driver is None:
        return 0, 0
    return driver.registrations, sum(plugin.connected for plugin in driver.plugins)


def starts(node: DraBench, reps: int, env: Mapping[str, str]) -> tuple[Sample, Sample]:
    """(wall time to registered, the agent's CPU by then) over ``reps`` starts."""
    walls, cpus = [], []
    for _ in range(reps):
        wanted = (_plugins(node.kubelet.snapshot())[0] + 1, 1)
        started = node.agent.start(env)

        def registered(view: KubeletView, wanted: tuple[int, int] = wanted) -> bool:
            return _plugins(view) == wanted

        node.kubelet.wait_for(registered, timeout=TIMEOUT)
        walls.append(time.monotonic() - started)
        cpus.append(cpu_seconds(node.agent.pid))
        assert node.agent.stop() == 0, node.agent.log()[-2000:]
        node.kubelet.wait_for(lambda view: _plugins(view)[1] == 0, timeout=TIMEOUT)
    return Sample.of(walls), Sample.of(cpus)


def dra_start_section(scale: Scale) -> Section:
    section = Section("DRA start (process spawned → the kubelet has the driver registered)")
    for label, env in (("alone", {}), ("a rollout's instance", INSTANCE)):
        reps = scale.reps(10)
        print(f"DRA start, {label} x {reps}", flush=True)
        with ExitStack() as stack:
            node = DraBench(stack, 1)
            node.write(node.counts)
            wall, cpu = starts(node, reps, env)
        section.add(f"1 resource, {label}: start → registered", ms(wall))
        section.add(f"1 resource, {label}: the agent's own CPU by then", seconds(cpu))
    section.notes.append(
        "Most of it is Python starting and importing gRPC and protobuf; a rollout's instance "
        "also reads its Node (one HTTPS request) to learn the kubelet's version before it "
        "registers. A DaemonSet pod adds the runtime's container start before this, and its "
        "readiness (the startup probe) comes after; neither delays the registration."
    )
    return section
