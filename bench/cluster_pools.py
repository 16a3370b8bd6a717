"""The publisher of cluster pools (``token-resource run --role publisher``) with client-go's
default lease settings (lease 15 s, renew deadline 10 s, retry 2 s): how long the pools go
unwritten when the holder dies (SIGKILL) or stops (SIGTERM), and what a holder and a stand-by
cost while idle.

Two publishers run as real processes against the API-server stand-in in this process, each
with a service account of its own (tests/publisher/cluster_publishers.py), so that the stand-in's
request log says who wrote what and when it served it (``LoggedRequest.at``). A failover is
timed from the signal to the stand-in serving the new holder's first slice write (its new
pool generation); the publisher stopped is started again as the next stand-by.
"""

from __future__ import annotations

import random
import signal
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

from bench.cpu import CpuMeter, CpuUse
from bench.scenarios import Scale, Section, ms
from bench.support import TIMEOUT, Sample, resource_names
from tests.harness import AgentProcess
from tests.publisher.cluster_publishers import (
    DEFAULT_TIMING,
    DRIVER,
    LEASES_PATH,
    account,
    lease_writes,
    name_of,
    publishers,
)
from tests.standin.apiserver import ApiServerStandin, ApiServerView, CertificateAuthority
from token_resource.apiserver.election.record import JITTER_FACTOR
from token_resource.config.model import KubernetesSettings

POOLS = 10
TOKENS = 4
_DEFAULTS = KubernetesSettings()
LEASE, RETRY = _DEFAULTS.lease_duration, _DEFAULTS.retry_period
# After SIGKILL the Lease must look expired on the survivor's clock first: a lease duration,
# then its next try (retry period x up to 2.2, client-go's jitter): about 20 s.
KILL_TARGET = 20.0
TERM_TARGET = 3.0  # a released Lease is taken at the stand-by's next try


class Publishers:
    """Two publishers of ``POOLS`` cluster pools against the stand-in."""

    def __init__(self, apiserver: ApiServerStandin, running: dict[str, AgentProcess]) -> None:
        self.apiserver = apiserver
        self.running = running

    def holder(self) -> str:
        """The publisher holding the Lease once every pool is written by it: the author of the
        newest Lease write, who also wrote the newest slice."""

        def settled(view: ApiServerView) -> bool:
            leases, slices = lease_writes(view), view.slice_writes(DRIVER)
            pools = {write.pool for write in slices}
            return (
                bool(leases and slices)
                and len(pools) == POOLS
                and leases[-1].holder != ""
                and name_of(slices[-1].author) == leases[-1].author
            )

        view = self.apiserver.wait_for(settled, timeout=TIMEOUT)
        return lease_writes(view)[-1].author

    def failover(self, how: signal.Signals) -> float:
        """Stop the holder with ``how``; seconds to the other's first slice write."""
        leader = self.holder()
        process = self.running[leader]
        assert process.process is not None
        # At a random point of the stand-by's tries (every retry period x 1 to 2.2), as a stop
        # would come in a cluster; not just after the restarted one's first try.
        time.sleep(random.uniform(0, RETRY * (1 + JITTER_FACTOR)))
        stopped = time.monotonic()
        process.signal(how)
        status = process.process.wait(TIMEOUT)
        assert status == (0 if how == signal.SIGTERM else -signal.SIGKILL), process.log()[-2000:]

        def first_write(view: ApiServerView) -> float | None:
            return next(
                (
                    write.at
                    for write in view.slice_writes(DRIVER)
                    if write.at > stopped and name_of(write.author) != leader
                ),
                None,
            )

        view = self.apiserver.wait_for(lambda v: first_write(v) is not None, timeout=TIMEOUT)
        written = first_write(view)
        assert written is not None
        restarted = time.monotonic()
        process.start()  # the next stand-by, once it has read the Lease
        user = account(leader)
        self.apiserver.wait_for(
            lambda v: any(
                r.identity == user and LEASES_PATH in r.path and r.at > restarted
                for r in v.requests
            ),
            timeout=TIMEOUT,
        )
        return written - stopped

    def idle(self, seconds: float) -> tuple[CpuUse, CpuUse]:
        """(the holder's, the stand-by's) CPU over ``seconds`` of nothing to do."""
        leader = self.holder()
        (standby,) = (name for name in self.running if name != leader)
        pids = [self.running[name].process for name in (leader, standby)]
        meters = [CpuMeter(process.pid) for process in pids if process is not None]
        time.sleep(seconds)
        holder_use, standby_use = (meter.stop() for meter in meters)
        assert self.holder() == leader, "the Lease changed hands while idle"
        return holder_use, standby_use


@contextmanager
def two_publishers() -> Iterator[Publishers]:
    with ExitStack() as stack:
        root = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="trb-cp-")))
        apiserver = stack.enter_context(ApiServerStandin(CertificateAuthority(), nodes=("n",)))
        running = stack.enter_context(
            publishers(
                apiserver,
                root,
                2,
                tokens=TOKENS,
                timing=DEFAULT_TIMING,
                resources=resource_names(POOLS),
            )
        )
        yield Publishers(apiserver, running)


def seconds_of(sample: Sample) -> str:
    return (
        f"median {sample.median:.2f} s, max {sample.high:.2f} s (min {sample.low:.2f}; "
        f"n={len(sample.values)})"
    )


def per_minute(use: CpuUse) -> str:
    return (
        f"{use.threads * 60 / use.wall:.3f} s (threads' schedstat; "
        f"{use.ticks * 60 / use.wall:.2f} s from /proc/<pid>/stat ticks)"
    )


def cluster_pools_section(scale: Scale) -> Section:
    kills, terms = (2, 3) if scale.quick else (3, 10)
    seconds = scale.idle_seconds
    section = Section(
        f"Cluster pools: the publisher's failover and idle cost ({POOLS} pools of {TOKENS} "
        f"tokens, two publishers, client-go's default lease: {LEASE:g} s, renew deadline "
        f"{_DEFAULTS.renew_deadline:g} s, retry {RETRY:g} s)"
    )
    with two_publishers() as pair:
        print(f"cluster pools: idle, {seconds:g} s", flush=True)
        holder_use, standby_use = pair.idle(seconds)
        print(f"cluster pools: SIGTERM x {terms}", flush=True)
        termed = Sample.of(pair.failover(signal.SIGTERM) for _ in range(terms))
        print(f"cluster pools: SIGKILL x {kills} (~{LEASE + RETRY:g} s each)", flush=True)
        killed = Sample.of(pair.failover(signal.SIGKILL) for _ in range(kills))
    section.add(
        "SIGKILL of the holder → the other's first write (its new pool generation)",
        seconds_of(killed),
        f"≤ {KILL_TARGET:g} s (lease + a jittered retry)",
        killed.high <= KILL_TARGET,
    )
    section.add(
        "SIGTERM of the holder (it gives the Lease up) → the other's first write",
        f"{seconds_of(termed)}; {ms(termed)}",
        f"≤ {TERM_TARGET:g} s",
        termed.high <= TERM_TARGET,
    )
    section.add(
        "idle: the holder's own CPU per minute",
        per_minute(holder_use),
        "≤ 0.1 s",
        holder_use.threads * 60 / holder_use.wall <= 0.1,
    )
    section.add(
        "idle: the stand-by's own CPU per minute",
        per_minute(standby_use),
        "≤ 0.1 s",
        standby_use.threads * 60 / standby_use.wall <= 0.1,
    )
    section.notes.append(
        f"Failover is timed from the signal to the stand-in serving the survivor's first slice "
        f"write. After SIGKILL the survivor takes the Lease only once its record has stood "
        f"unchanged for {LEASE:g} s on its own clock, at a try (every {RETRY:g} s to "
        f"{RETRY * (1 + JITTER_FACTOR):g} s, client-go's jitter), so it lands between "
        f"{LEASE - RETRY:g} and "
        f"~{LEASE + (1 + JITTER_FACTOR) * RETRY:g} s after the last renewal; after SIGTERM the "
        "holder empties the Lease as it stops and the stand-by takes it at its next try, up to "
        f"{RETRY * (1 + JITTER_FACTOR):g} s later. Each stop comes at a random point of the "
        "stand-by's tries (the stopped publisher is started again as the next stand-by, and the "
        "next stop waits for its first try and then a random time up to that). Idle: over "
        f"{seconds:g} s with nothing changing, the holder renews every {RETRY:g} s and "
        "watches the slices; the stand-by reads the Lease every 2 to 4.4 s and watches too. "
        "Own CPU as in the other idle sections (the threads' schedstat, beside the ticks of "
        "/proc/<pid>/stat); the stand-in's CPU (this process) is not counted."
    )
    return section
