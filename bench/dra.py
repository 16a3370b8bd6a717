"""DRA resources: config edit → slices republished, NodePrepareResources, and a kubelet restart
(which wipes the node's slices) → slices republished, at 1, 10 and 100 resources.

The agent runs as a real process against the kubelet stand-in's plugin watcher and DRA manager
and the API-server stand-in, both in this process, over real sockets and real HTTPS.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack, contextmanager

from bench.cpu import CpuMeter
from bench.scenarios import Scale, Section, ms
from bench.support import TIMEOUT, Bench, Sample, resource_names
from tests.standin.apiserver import ApiServerStandin, ApiServerView, CertificateAuthority
from tests.standin.kubelet import KubeletStandin, KubeletView
from tests.standin.kubelet_dra import ApiAccess
from token_resource.apiserver.objects.slices import pool_name

NODE = "node-a"
DRIVER = "tokens.example.com"
TOKENS = 4


class DraBench:
    """A node with DRA: the stand-ins and an agent serving ``n`` DRA resources."""

    def __init__(self, stack: ExitStack, n: int) -> None:
        bench = stack.enter_context(Bench())
        bench.kubelet.stop()  # the device-plugin-only stand-in: this one does DRA too
        root = bench.root
        self.dirs = {name: root / name for name in ("reg", "plugins", "cdi")}
        for directory in self.dirs.values():
            directory.mkdir()
        ca = CertificateAuthority()
        self.apiserver = stack.enter_context(ApiServerStandin(ca, nodes=(NODE,)))
        pair = ca.node_certificate(NODE)
        self.kubelet = stack.enter_context(
            KubeletStandin(
                bench.device_plugin_dir,
                plugins_registry_dir=self.dirs["reg"],
                node=NODE,
                apiserver=ApiAccess(self.apiserver.url, ca.cert_pem, pair.cert_pem, pair.key_pem),
            )
        )
        self.kubeconfig = self.apiserver.write_kubeconfig(root / "kubelet.conf", identity=pair)
        self.names = resource_names(n)
        self.counts = dict.fromkeys(self.names, TOKENS)  # as last written
        self.agent = bench.agent()

    def text(self, counts: Mapping[str, int]) -> str:
        return f'[agent]\ndevice_plugin_dir = "{self.agent.device_plugin_dir}"\n' + (
            f'[dra]\ndriver = "{DRIVER}"\nplugins_registry_dir = "{self.dirs["reg"]}"\n'
            f'plugins_dir = "{self.dirs["plugins"]}"\ncdi_dir = "{self.dirs["cdi"]}"\n'
            f'[kubernetes]\nkubeconfig = "{self.kubeconfig}"\nnode_name = "{NODE}"\n'
            + "".join(
                f'[resources."{name}"]\ncount = {count}\nadvertise = "dra"\n'
                for name, count in counts.items()
            )
        )

    def write(self, counts: Mapping[str, int]) -> float:
        """Save the configuration by rename; the time of the rename."""
        self.counts = dict(counts)
        temporary = self.agent.config_path.with_name(".token-resource.toml.tmp")
        temporary.write_text(self.text(counts))
        saved = time.monotonic()
        temporary.replace(self.agent.config_path)
        return saved

    def published(
        self, counts: Mapping[str, int], generations: Mapping[str, int]
    ) -> Callable[[ApiServerView], bool]:
        """Every pool complete with its count, each at a generation above the one given."""

        def holds(view: ApiServerView) -> bool:
            pools = view.pools(NODE, DRIVER)
            for name, count in counts.items():
                pool = pools.get(pool_name(NODE, name))
                if pool is None or not pool.complete or len(pool.devices) != count:
                    return False
                if pool.generation <= generations.get(name, 0):
                    return False
            return True

        return holds

    def generations(self) -> dict[str, int]:
        pools = self.apiserver.snapshot().pools(NODE, DRIVER)
        return {
            name: pools[pool_name(NODE, name)].generation
            for name in self.names
            if pool_name(NODE, name) in pools
        }


def registered(view: KubeletView) -> bool:
    driver = view.dra.drivers.get(DRIVER) if view.dra is not None else None
    return driver is not None and any(plugin.connected for plugin in driver.plugins)


@contextmanager
def dra_node(n: int) -> Iterator[DraBench]:
    with ExitStack() as stack:
        node = DraBench(stack, n)
        node.write(node.counts)
        node.agent.start()
        node.kubelet.wait_for(registered, timeout=TIMEOUT)
        node.apiserver.wait_for(node.published(node.counts, {}), timeout=TIMEOUT)
        try:
            yield node
        finally:
            assert node.agent.stop() == 0, node.agent.log()[-2000:]


def edits(node: DraBench, reps: int) -> Sample:
    target = node.names[0]
    counts = dict(node.counts)
    samples = []
    for rep in range(reps):
        counts[target] = TOKENS + 1 + rep % 2
        before = node.generations()
        saved = node.write(counts)
        node.apiserver.wait_for(node.published({target: counts[target]}, before), timeout=TIMEOUT)
        samples.append(time.monotonic() - saved)
    return Sample.of(samples)


def prepares(node: DraBench, reps: int) -> tuple[Sample, Sample, Sample]:
    """(the first NodePrepareResources of a claim, a repeat of it, the agent's own CPU for the
    first: its threads' schedstat over the call)."""
    first: list[float] = []
    repeat: list[float] = []
    cpu: list[float] = []
    pool = pool_name(NODE, node.names[0])
    for rep in range(reps):
        claim = node.apiserver.allocate_claim(
            "default",
            f"claim-{rep}",
            pod=f"pod-{rep}",
            node=NODE,
            driver=DRIVER,
            results=[("tokens", pool, f"token-{rep % TOKENS}")],
        )
        identity = (
            claim["metadata"]["namespace"],
            claim["metadata"]["uid"],
            claim["metadata"]["name"],
        )
        for samples in (first, repeat):
            meter = CpuMeter(node.agent.pid)
            started = time.monotonic()
            result = node.kubelet.prepare(DRIVER, [identity])
            samples.append(time.monotonic() - started)
            if samples is first:
                cpu.append(meter.stop().threads)
            assert result.error is None, result
            assert not result.claims[identity[1]].error, result
        assert node.kubelet.unprepare(DRIVER, [identity]).error is None
    return Sample.of(first), Sample.of(repeat), Sample.of(cpu)


def restarts(node: DraBench, reps: int) -> Sample:
    samples = []
    for _ in range(reps):
        before = node.generations()
        started = time.monotonic()
        node.kubelet.restart()  # deletes every slice of the node at its start
        node.apiserver.wait_for(node.published(node.counts, before), timeout=TIMEOUT)
        samples.append(time.monotonic() - started)
    return Sample.of(samples)


def dra_section(scale: Scale) -> Section:
    section = Section("DRA (a driver serving its pools as ResourceSlices)")
    for n, reps in ((1, 20), (10, 20), (100, 10)):
        print(f"DRA, {n} resource(s) x {scale.reps(reps)}", flush=True)
        with dra_node(n) as node:
            edit = edits(node, scale.reps(reps))
            first, repeat, cpu = prepares(node, scale.reps(reps))
            restart = restarts(node, scale.reps(max(reps // 2, 2)))
        section.add(
            f"{n} resource(s): config saved → the pool's new generation published", ms(edit)
        )
        section.add(
            f"{n} resource(s): NodePrepareResources, a new claim / a repeat",
            f"{ms(first)} / {ms(repeat)}",
        )
        section.add(
            f"{n} resource(s): NodePrepareResources of a new claim, the agent's CPU", ms(cpu)
        )
        section.add(
            f"{n} resource(s): kubelet restart (slices wiped) → every pool published again",
            ms(restart),
        )
    section.notes.append(
        "A new claim's prepare reads the claim from the API server and writes its CDI spec; a "
        "repeat (the kubelet asking again) is answered from the prepared-claims record. Each "
        "pool is one ResourceSlice here (4 tokens). The agent's CPU is its threads' time on a CPU "
        "(schedstat) over the call. The first new claim makes the agent's connection for claim "
        "reads (a TLS handshake): it is the maximum; the others reuse it."
    )
    return section
