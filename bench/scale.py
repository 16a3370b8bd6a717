"""At fleet scale: what the agents and the cluster pools' publisher ask of the real 1.37 API
server when the cluster has 100, 1,000 and 5,000 Nodes.

The control plane is tests/kube's (etcd, kube-apiserver, scheduler, controller manager); kwok
(``sigs.k8s.io/kwok``, built by ``make kwok``) keeps every Node alive as kubelets would (its
Lease renewed, Ready), the simulated ones and the real agents' alike. Each simulated node gets
the ResourceSlice its agent would publish, and a ResourceClaim allocated one of its tokens
(bench/claims.py; no pods: kwok would run them, and no agent reads them in steady state). Real
agent processes run as nodes of their own (node identities signed by the test CA, the host
form: one DRA resource and one node-status resource each), and one publisher with a cluster
pool, as itself (its service account).

What they ask is counted from the API server's audit log (its policy logs only them and
kwok's Lease renewals), per user, over a steady window, and scaled to an hour; the bytes they
receive from the TCP sockets' own counters (``ss``'s ``bytes_received``, sampled every second
for the agents' processes); CPU from each process's rusage. At each size 1,000 claims are
created, allocated a seat of the publisher's pool and deleted, three times (what a claim's
change costs the publisher, beside as many standing claims as nodes); at the largest, every
real agent is then restarted at once (what a mass reboot asks of the API server, per agent).
"""

from __future__ import annotations

import datetime
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.claims import RESOURCE_API, allocated_claim, delete_claim, ensure_class
from bench.plot import line_chart
from bench.scenarios import Scale, Section
from bench.support import cpu_seconds, rss_kib
from tests.harness import AgentProcess
from tests.kube.client import KubeClient, wait_until
from tests.kube.controlplane import ControlPlane
from tests.kube.programs import built
from tests.kube.publishers import (
    ACCOUNT,
    NAMESPACE,
    account_kubeconfig,
    cluster_resource,
    publisher_config,
    rbac,
)
from token_resource.apiserver.objects.slices import cluster_pool_name
from token_resource.config.names import token_id

DRIVER = "scale.example.com"
TOKEN = "example.com/token"
DONGLE = "example.com/dongle"
SEAT = "example.com/seat"
SEATS = 20  # the publisher's cluster pool
KWOK_ANNOTATION = "kwok.x-k8s.io/node"
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
# The audit log: the real agents and the publisher (everything of theirs), kwok's Lease
# renewals (the kubelets' own traffic, for comparison), nothing else: at 5,000 nodes the rest
# would be most of the disk and CPU.
AUDIT_POLICY = """\
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived, ResponseStarted]
rules:
- level: Metadata
  userGroups: ["system:nodes", "system:serviceaccounts"]
- level: Metadata
  users: ["kwok"]
  resources: [{group: coordination.k8s.io, resources: [leases]}]
- level: None
"""


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
        section.add(
            f"{sizes.nodes[-1]} nodes: every agent restarted at once, first minute per agent",
            fleet.mass_restart().agent_line(),
        )
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


@contextmanager
def kwok(cp: ControlPlane, directory: Path) -> Iterator[subprocess.Popen[bytes]]:
    """kwok managing the Nodes annotated ``kwok.x-k8s.io/node: fake``, as user ``kwok``."""
    kubeconfig = cp.write_kubeconfig(
        directory / "kwok.conf", identity=cp.ca.client_certificate("kwok", ("system:masters",))
    )
    log = (directory / "kwok.log").open("ab")
    process = subprocess.Popen(
        [
            str(built("kwok", "kwok")),
            *(f"--config={stage}" for stage in sorted(built("kwok", "stages").glob("*.yaml"))),
            f"--kubeconfig={kubeconfig}",
            "--manage-all-nodes=false",
            f"--manage-nodes-with-annotation-selector={KWOK_ANNOTATION}=fake",
            "--node-lease-duration-seconds=40",
            "--cidr=10.0.0.1/16",
            "--node-ip=10.0.0.1",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        yield process
    finally:
        process.terminate()
        process.wait(20)
        log.close()


def popen_of(process: AgentProcess | None) -> subprocess.Popen[bytes]:
    assert process is not None
    assert process.process is not None
    return process.process


def pid_of(process: AgentProcess | None) -> int:
    return popen_of(process).pid


def new_node(name: str) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "labels": {"kubernetes.io/hostname": name, "type": "kwok"},
            "annotations": {KWOK_ANNOTATION: "fake"},
        },
    }


def node_slice(node: str) -> dict[str, Any]:
    """The slice a node's agent publishes for two tokens (apiserver/objects/slices.py's shape)."""
    devices = [{"name": f"token-{i}"} for i in range(2)]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-{DRIVER}"},
        "spec": {
            "driver": DRIVER,
            "nodeName": node,
            "pool": {"name": f"{node}-token", "generation": 1, "resourceSliceCount": 1},
            "devices": devices,
        },
    }


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


class Fleet:
    """The simulated nodes, the real agents and the publisher on one control plane."""

    def __init__(self, cp: ControlPlane, directory: Path, agents: list[AgentProcess]) -> None:
        self.cp = cp
        self.directory = directory
        self.agents = agents
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
            yield fleet
        finally:
            for process in [*agents, *([fleet.publisher] if fleet.publisher else [])]:
                process.kill()

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
        (workdir / "device-plugins").mkdir(parents=True, exist_ok=True)
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

    def grow(self, size: int) -> None:
        """Simulated nodes up to ``size``, each with its slice and a claim."""

        def add(client: KubeClient, name: str) -> None:
            client.request("POST", "/api/v1/nodes", new_node(name))
            client.request("POST", f"{RESOURCE_API}/resourceslices", node_slice(name))
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

    def mass_restart(self) -> Counts:
        for agent in self.agents:
            agent.signal(15)
        for agent in self.agents:
            popen_of(agent).wait(30)
        start = self._audit_mark()
        for agent in self.agents:
            agent.start(wait_ready=False)
        cpu_before = [0.0 for _ in self.agents]
        with SocketBytes(self._pids(), self.cp.port) as received:
            time.sleep(60)
        publisher_cpu = cpu_seconds(pid_of(self.publisher))
        return self._counts(start, 60, received.totals(), cpu_before, publisher_cpu)

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
        events = audit_events(self.cp.directory, start, audit_time())
        per_user: dict[str, Counter[str]] = {}
        leases = 0
        for event in events:
            user = event["user"]["username"]
            ref = event.get("objectRef") or {}
            what = f"{event['verb']} {ref.get('resource', '?')}"
            if user == "kwok":
                leases += 1
                continue
            per_user.setdefault(user, Counter())[what] += 1
        agents = [per_user.get(f"system:node:real-{i}", Counter()) for i in range(len(self.agents))]
        assert self.publisher is not None
        return Counts(
            seconds,
            agents,
            list(received[: len(self.agents)]),
            [cpu_seconds(pid_of(a)) - before for a, before in zip(self.agents, cpu_before)],
            per_user.get(PUBLISHER_USER, Counter()),
            received[len(self.agents)],
            cpu_seconds(pid_of(self.publisher)) - publisher_cpu_before,
            rss_kib(pid_of(self.publisher)),
            leases,
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


# The API server's audit events are stamped in RFC 3339 with microseconds, which sort as text.
_COMPLETED_AT = re.compile(rb'"stageTimestamp":"([^"]+)"')


def audit_time() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def audit_events(directory: Path, start: str, end: str) -> list[dict[str, Any]]:
    """The audit events of the requests completed from ``start`` to ``end`` (their stage's time:
    a watch is logged once, when it ends), from the log and the copies it was
    rotated into (the API server rotates it at 100 MB: at 5,000 Nodes kwok's Lease renewals
    fill that in minutes, and a window read from an offset in the file found nothing)."""
    events = []
    for path in sorted(directory.glob("audit*.log")):
        with path.open("rb") as log:
            for line in log:
                stamp = _COMPLETED_AT.search(line)
                if stamp and start <= stamp[1].decode() < end:
                    events.append(json.loads(line))
    return events


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
