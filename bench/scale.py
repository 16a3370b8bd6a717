"""At fleet scale: what the agents and the cluster pools' publisher ask of the real 1.37 API
server when the cluster has 100, 1,000 and 5,000 Nodes.

The control plane is tests/kube's (etcd, kube-apiserver, scheduler, controller manager); kwok
(``sigs.k8s.io/kwok``, built by ``make kwok``) keeps every Node alive as kubelets would (its
Lease renewed, Ready), the simulated ones and the real agents' alike. Each simulated node gets
the ResourceSlice its agent would publish, and a ResourceClaim allocated one of its tokens
(bench/claims.py; no pods: kwok would run them, and no agent reads them in steady state). Real
agent processes run as nodes of their own (node identities signed by the test CA, the host
form: one DRA resource and one node-status resource each), each beside a kubelet stand-in
whose plugin watcher registers its driver (tests/standin/kubelet.py's DRA side) and with a pod
holding one of its tokens (placed by the real scheduler), and one publisher with a cluster
pool, as itself (its service account).

What they ask is counted from the API server's audit log (bench/audit.py: its policy logs only
them and kwok's Lease renewals; each request once, a watch when it was opened), per user, over
a steady window, and scaled to an hour; the bytes they receive from the TCP sockets' own
counters (``ss``'s ``bytes_received``, sampled every second for the agents' processes); CPU
from each process's rusage. At each size 1,000 claims are
created, allocated a seat of the publisher's pool and deleted, three times (what a claim's
change costs the publisher, beside as many standing claims as nodes); at the largest, every
real agent is then restarted at once (what a mass reboot asks of the API server, per agent).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

from bench.audit import AUDIT_POLICY, Requests, audit_time
from bench.claims import (
    CLAIMS,
    RESOURCE_API,
    allocated_claim,
    delete_claim,
    ensure_class,
    token_pod,
)
from bench.counts import RESTART_WINDOW, Counts, Restart, SocketBytes
from bench.kwok import kwok, new_node, node_slice
from bench.plot import line_chart
from bench.scenarios import Scale, Section
from bench.support import cpu_seconds, rss_kib
from tests.harness import AgentProcess
from tests.kube.client import KubeClient, wait_until
from tests.kube.controlplane import ControlPlane
from tests.kube.publishers import (
    ACCOUNT,
    NAMESPACE,
    account_kubeconfig,
    cluster_resource,
    publisher_config,
    rbac,
)
from tests.standin.kubelet import KubeletStandin
from token_resource.apiserver.objects.slices import cluster_pool_name
from token_resource.config.names import token_id

DRIVER = "scale.example.com"
TOKEN = "example.com/token"
DONGLE = "example.com/dongle"
SEAT = "example.com/seat"
SEATS = 20  # the publisher's cluster pool
PUBLISHER_USER = f"system:serviceaccount:{NAMESPACE}:{ACCOUNT}"
REPO = Path(__file__).resolve().parents[1]
PLOTS = tuple(
    REPO / "docs" / f"fleet-scale-{name}.svg" for name in ("requests", "bytes", "publisher")
)
WRITERS = 8  # connections that create the simulated objects side by side
CHURN = 1000  # claims created, allocated, deleted at each size, in each of CHURN_ROUNDS rounds
# A churned claim's changes, each an event of the publisher's claims watch: created,
# allocated (its status written), deleted.
CHANGES_PER_CLAIM = 3
CHURN_CHANGES = CHANGES_PER_CLAIM * CHURN  # a round's
CHURN_ROUNDS = 3


@dataclass(frozen=True)
class Sizes:
    nodes: tuple[int, ...]
    agents: int
    window: float  # seconds of steady state measured at each size

    @classmethod
    def of(cls, scale: Scale) -> Sizes:
        if scale.quick:
            return cls((100, 300), 3, 120.0)
        seconds = float(os.environ.get("TOKEN_RESOURCE_BENCH_SCALE_WINDOW", "900"))
        return cls((100, 1000, 5000), 10, seconds)


def scale_section(scale: Scale) -> Section:
    # A SIGTERM (make's, timeout's) unwinds the with-blocks: the control plane, kwok and the
    # agents stop instead of staying behind.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("bench: terminated"))
    sizes = Sizes.of(scale)
    section = Section("At fleet scale: requests to the real API server (1.37) per agent")
    with tempfile.TemporaryDirectory(prefix="trb-scale-") as scratch, ExitStack() as stack:
        directory = Path(scratch)
        (directory / "cp").mkdir()
        cp = stack.enter_context(ControlPlane(directory / "cp", audit_policy=AUDIT_POLICY))
        stack.enter_context(kwok(cp, directory))
        fleet = stack.enter_context(Fleet.started(cp, directory, sizes.agents))
        measured: dict[int, Counts] = {}
        churned: dict[int, Counts] = {}
        for size in sizes.nodes:
            fleet.grow(size)
            steady = measured[size] = fleet.measure(sizes.window)
            section.add(f"{size} nodes: steady state, per agent", steady.agent_line())
            section.add(f"{size} nodes: the publisher", steady.publisher_line())
            section.add(f"{size} nodes: a kubelet's Lease (kwok)", steady.lease_line())
            # The least of a few rounds: what another process's load on the machine adds to
            # the publisher's CPU time is not its own cost.
            rounds = [fleet.claim_churn(CHURN) for _ in range(CHURN_ROUNDS)]
            churned[size] = min(rounds, key=lambda counts: counts.publisher_cpu)
            each = ", ".join(f"{r.publisher_cpu * 1000 / CHURN_CHANGES:.2f}" for r in rounds)
            section.add(
                f"{size} nodes, {size} claims standing: {CHURN:,} more created, allocated, deleted",
                f"{churned[size].churn_line(CHURN_CHANGES)} (the least of rounds of {each} ms)",
            )
        fleet.mass_restart().report(section, sizes.nodes[-1])
    if not scale.quick:
        write_plots(measured, churned)
        section.notes.append(f"Plots: {', '.join(str(p.relative_to(REPO)) for p in PLOTS)}.")
    section.notes.append(
        "Requests from the API server's audit log, per hour of the window (steady) or as "
        "counted (after a restart, during the claims' churn); bytes: what the agents' sockets "
        "received (`ss` bytes_received, sampled each second); CPU: the processes' own rusage."
    )
    return section


def write_plots(measured: dict[int, Counts], churned: dict[int, Counts]) -> None:
    sizes = sorted(measured)
    requests = line_chart(
        "Requests to the API server per hour, steady state",
        "Nodes in the cluster",
        "requests per hour",
        {
            "an agent (busiest)": [(n, measured[n].agent_requests) for n in sizes],
            "a kubelet's Lease": [(n, measured[n].lease_requests) for n in sizes],
            "the publisher": [(n, measured[n].publisher_requests) for n in sizes],
        },
    )
    received = line_chart(
        "What the API server sends, steady state",
        "Nodes in the cluster",
        "KiB per hour",
        {
            "an agent (busiest)": [(n, measured[n].agent_kib) for n in sizes],
            "the publisher": [(n, measured[n].publisher_kib) for n in sizes],
        },
    )
    publisher = line_chart(
        "The publisher's own cost, steady state",
        "Nodes in the cluster",
        "CPU s per hour / RSS MiB",
        {
            "CPU, s per hour": [(n, measured[n].publisher_cpu_hourly) for n in sizes],
            "RSS, MiB": [(n, measured[n].publisher_rss_kib / 1024) for n in sizes],
            "CPU, ms per claim change": [
                (n, churned[n].publisher_cpu * 1000 / CHURN_CHANGES) for n in sizes
            ],
        },
    )
    for path, chart in zip(PLOTS, (requests, received, publisher)):
        path.write_text(chart)


def popen_of(process: AgentProcess | None) -> subprocess.Popen[bytes]:
    assert process is not None
    assert isinstance(process.process, subprocess.Popen)
    return process.process


def pid_of(process: AgentProcess | None) -> int:
    return popen_of(process).pid


class Fleet:
    """The simulated nodes, the real agents and the publisher on one control plane."""

    def __init__(self, cp: ControlPlane, directory: Path, agents: list[AgentProcess]) -> None:
        self.cp = cp
        self.directory = directory
        self.agents = agents
        self.kubelets: list[KubeletStandin] = []  # the agents', in their order
        self.publisher: AgentProcess | None = None
        self.nodes = 0

    @classmethod
    @contextmanager
    def started(cls, cp: ControlPlane, directory: Path, count: int) -> Iterator[Fleet]:
        agents: list[AgentProcess] = []
        fleet = cls(cp, directory, agents)
        try:
            fleet._start_publisher()
            for index in range(count):
                agents.append(fleet._start_agent(f"real-{index}"))
            wait_until("every agent's slice and capacity", fleet._agents_published, 120)
            fleet._token_pods()
            wait_until("every agent's driver registered", lambda: fleet._registered(0.0), 60)
            yield fleet
        finally:
            for process in [*agents, *([fleet.publisher] if fleet.publisher else [])]:
                process.kill()
            for kubelet in fleet.kubelets:
                kubelet.stop()

    def _start_publisher(self) -> None:
        rbac(self.cp)
        kubeconfig = account_kubeconfig(self.cp, self.directory / "publisher.conf")
        process = AgentProcess(self.directory / "publisher", self.directory / "unused", "publisher")
        process.write_config(publisher_config(kubeconfig, DRIVER, cluster_resource(SEAT, SEATS)))
        for resource in (TOKEN, SEAT):
            ensure_class(self.cp, DRIVER, resource)
        process.start()
        self.publisher = process

    def _start_agent(self, node: str) -> AgentProcess:
        self.cp.ensure("/api/v1/nodes", new_node(node))
        workdir = self.directory / node
        workdir.mkdir()
        kubeconfig = self.cp.node_kubeconfig(node, workdir / "kubelet.conf")
        process = AgentProcess(workdir, workdir / "device-plugins")
        # The node's kubelet: its plugin watcher registers the agent's driver, as on a real
        # node, and again after a restart (then the agent reads its node's pods and their
        # claims). No API access: its own requests (the slices' wipes) are the kubelet's.
        kubelet = KubeletStandin(
            workdir / "device-plugins", plugins_registry_dir=workdir / "reg", node=node
        )
        kubelet.start()
        self.kubelets.append(kubelet)
        process.write_config(
            f'[dra]\ndriver = "{DRIVER}"\nplugins_registry_dir = "{workdir / "reg"}"\n'
            f'plugins_dir = "{workdir / "plugins"}"\ncdi_dir = "{workdir / "cdi"}"\n'
            f'[kubernetes]\nkubeconfig = "{kubeconfig}"\nnode_name = "{node}"\n'
            f'[resources."{TOKEN}"]\ncount = 2\nadvertise = "dra"\n'
            f'[resources."{DONGLE}"]\ncount = 4\nadvertise = "node-status"\n'
        )
        process.start()
        return process

    def _agents_published(self) -> bool:
        slices = self.cp.admin.get(
            f"{RESOURCE_API}/resourceslices?fieldSelector=spec.driver={DRIVER}"
        )
        nodes = {item["spec"].get("nodeName") for item in slices["items"]}
        return all(f"real-{i}" in nodes for i in range(len(self.agents)))

    def _token_pods(self) -> None:
        """A pod on each real node with a claim for one of its agent's tokens, placed by the
        real scheduler (which allocates the claim from the agent's slice and reserves it for
        the pod); kwok runs it. The agent reads both after its driver registers."""
        for index in range(len(self.agents)):
            token_pod(self.cp.admin, f"real-{index}", TOKEN)

        def reserved() -> bool:
            claims = self.cp.admin.get(CLAIMS)["items"]
            return sum(1 for c in claims if c.get("status", {}).get("reservedFor")) >= len(
                self.agents
            )

        wait_until("every real node's token pod scheduled", reserved, 120)

    def _registered(self, since: float) -> bool:
        return all(at is not None for at in self.registrations(since))

    def registrations(self, since: float) -> list[float | None]:
        """Per agent, how long after ``since`` (time.monotonic()) its driver registered, if it
        did and its plugin is connected."""
        seconds: list[float | None] = []
        for kubelet in self.kubelets:
            dra = kubelet.snapshot().dra
            assert dra is not None
            driver = dra.drivers.get(DRIVER)
            at = None if driver is None else driver.registered_at
            connected = driver is not None and any(p.connected for p in driver.plugins)
            seconds.append(at - since if at is not None and at > since and connected else None)
        return seconds

    def grow(self, size: int) -> None:
        """Simulated nodes up to ``size``, each with its slice and a claim."""

        def add(client: KubeClient, name: str) -> None:
            client.request("POST", "/api/v1/nodes", new_node(name))
            client.request("POST", f"{RESOURCE_API}/resourceslices", node_slice(name, DRIVER))
            allocated_claim(client, f"{name}-claim", TOKEN, DRIVER, f"{name}-token", token_id(0))

        side_by_side(self.cp, [f"kwok-{index}" for index in range(self.nodes, size)], add)
        self.nodes = size
        wait_until(f"{size} simulated nodes Ready", lambda: self._ready() >= size, 600)

    def _ready(self) -> int:
        nodes = self.cp.admin.get("/api/v1/nodes?labelSelector=type%3Dkwok")["items"]
        return sum(
            1
            for node in nodes
            if any(
                c["type"] == "Ready" and c["status"] == "True"
                for c in node.get("status", {}).get("conditions", [])
            )
        )

    def measure(self, seconds: float) -> Counts:
        start = self._audit_mark()
        cpu_before = [cpu_seconds(pid_of(a)) for a in self.agents]
        publisher_cpu = cpu_seconds(pid_of(self.publisher))
        with SocketBytes(self._pids(), self.cp.port) as received:
            time.sleep(seconds)
        return self._counts(start, seconds, received.totals(), cpu_before, publisher_cpu)

    def mass_restart(self) -> Restart:
        """Every agent stopped (SIGTERM), then all started at once: what they ask in their
        first RESTART_WINDOW seconds, and when each driver registered again."""
        for agent in self.agents:
            agent.signal(15)
        for agent in self.agents:
            popen_of(agent).wait(30)
        start = self._audit_mark()
        began = time.monotonic()
        for agent in self.agents:
            agent.start(wait_ready=False)
        cpu_before = [0.0 for _ in self.agents]
        publisher_cpu = cpu_seconds(pid_of(self.publisher))
        with SocketBytes(self._pids(), self.cp.port) as received:
            time.sleep(RESTART_WINDOW)
        counts = self._counts(start, RESTART_WINDOW, received.totals(), cpu_before, publisher_cpu)
        return Restart(counts, self.registrations(began))

    def claim_churn(self, count: int) -> Counts:
        start = self._audit_mark()
        publisher_cpu = cpu_seconds(pid_of(self.publisher))
        cpu_before = [cpu_seconds(pid_of(a)) for a in self.agents]
        began = time.monotonic()
        # A seat of the publisher's pool each, as the scheduler would allocate it.
        pool = cluster_pool_name(SEAT)
        for index in range(count):
            name = f"churn-{index}"
            device = token_id(index % SEATS)
            allocated_claim(self.cp.admin, name, SEAT, DRIVER, pool, device)
            if index == 0:
                # The claims are what the publisher keeps, not what it drops: it counts this
                # one among its pool's allocated seats.
                wait_until("the publisher counts the churned claim", self._seat_allocated, 30)
            delete_claim(self.cp.admin, name)
        elapsed = time.monotonic() - began
        # The publisher handles the last events after the last DELETE has returned.
        settle_cpu(pid_of(self.publisher))
        return self._counts(start, elapsed, [0] * len(self._pids()), cpu_before, publisher_cpu)

    def _seat_allocated(self) -> bool:
        assert self.publisher is not None
        [pool] = self.publisher.status_json()["cluster_pools"]["pools"]
        return bool(pool["allocated"] == 1)

    def _audit_mark(self) -> str:
        return audit_time()

    def _pids(self) -> list[int]:
        """The agents', then the publisher's: the order of ``received`` in _counts."""
        return [pid_of(a) for a in self.agents] + [pid_of(self.publisher)]

    def _counts(
        self,
        start: str,
        seconds: float,
        received: Sequence[int],  # by _pids()
        cpu_before: Sequence[float],
        publisher_cpu_before: float,
    ) -> Counts:
        requests = Requests.read(self.cp.directory, start, audit_time())
        agents = [requests.of(f"system:node:real-{i}") for i in range(len(self.agents))]
        assert self.publisher is not None
        return Counts(
            seconds,
            agents,
            list(received[: len(self.agents)]),
            [cpu_seconds(pid_of(a)) - before for a, before in zip(self.agents, cpu_before)],
            requests.of(PUBLISHER_USER),
            received[len(self.agents)],
            cpu_seconds(pid_of(self.publisher)) - publisher_cpu_before,
            rss_kib(pid_of(self.publisher)),
            requests.leases,
            self.nodes + len(self.agents),
        )


def side_by_side(
    cp: ControlPlane, names: Sequence[str], write: Callable[[KubeClient, str], None]
) -> None:
    """``write(client, name)`` for each of ``names``, WRITERS at a time, each writer thread on
    a connection of its own (as the admin)."""
    local = threading.local()

    def one(name: str) -> None:
        if not hasattr(local, "client"):
            local.client = cp.client(cp.ca.client_certificate("admin", ("system:masters",)))
        write(local.client, name)

    with ThreadPoolExecutor(WRITERS) as pool:
        list(pool.map(one, names))


def settle_cpu(pid: int, quiet: float = 0.01, timeout: float = 30.0) -> None:
    """Until the process used less than ``quiet`` s of CPU in a second."""
    last = cpu_seconds(pid)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        time.sleep(1.0)
        now = cpu_seconds(pid)
        if now - last < quiet:
            return
        last = now
