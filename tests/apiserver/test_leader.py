"""Leader election (token_resource/apiserver/leader.py) against the API-server stand-in's
Leases, with short durations: one leader among several candidates, hand-over on a release,
a leader that cannot renew stopping before anyone can take over, and expiry judged by each
candidate's own clock. The decisions alone (leaderrecord.py) with a fake clock."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest

from tests.standin.apiserver import ApiServerStandin, ApiServerView, CertificateAuthority
from tests.standin.apiserver.leases import LEASE_RULES
from token_resource.apiserver.connection.client import KubeError
from token_resource.apiserver.election.elector import (
    LeaderElector,
    default_identity,
    lease_namespace,
)
from token_resource.apiserver.election.record import (
    LeaderRecord,
    claimed,
    may_take,
    observe,
    released,
    timing_problem,
)
from token_resource.config.model import DEFAULT_LEASE_NAMESPACE, KubernetesSettings

NAMESPACE = "token-resource"
LEASE = "token-resource-publisher"
LEASE_DURATION, RENEW_DEADLINE, RETRY = 2.0, 1.0, 0.2
# How late a candidate can try after it may: its jittered wait, a read and a write.
TRY_SLACK = RETRY * 2.2 + 0.5
_T = TypeVar("_T")


@pytest.fixture
def apiserver(ca: CertificateAuthority) -> Iterator[ApiServerStandin]:
    with ApiServerStandin(ca) as standin:
        yield standin


@dataclass
class Election:
    """Candidates named c0, c1, ... with tokens of their own, and every change they report
    (monotonic time, who, leading), checked as it happens: never two leaders at once."""

    apiserver: ApiServerStandin
    directory: Path
    electors: dict[str, LeaderElector] = field(default_factory=dict)
    changes: list[tuple[float, str, bool]] = field(default_factory=list)
    most_leaders: int = 0
    _changed: asyncio.Event = field(default_factory=asyncio.Event)

    def add(self, name: str) -> LeaderElector:
        token = f"token-{name}"
        user = f"system:serviceaccount:{NAMESPACE}:{name}"
        self.apiserver.add_token(token, user=user, rules=LEASE_RULES)
        kubeconfig = self.apiserver.write_kubeconfig(self.directory / f"{name}.conf", token=token)
        settings = KubernetesSettings(
            kubeconfig=kubeconfig,
            lease_duration=LEASE_DURATION,
            renew_deadline=RENEW_DEADLINE,
            retry_period=RETRY,
        )
        elector = LeaderElector(settings, LEASE, NAMESPACE, name, lambda: self._saw(name))
        self.electors[name] = elector
        elector.start()
        return elector

    def _saw(self, name: str) -> None:
        self.changes.append((time.monotonic(), name, self.electors[name].leading))
        self.most_leaders = max(self.most_leaders, len(self.leaders()))
        self._changed.set()

    def leaders(self) -> list[str]:
        return [name for name, elector in self.electors.items() if elector.leading]

    async def until(self, predicate: Callable[[], _T | None], timeout: float = 10.0) -> _T:
        """The first true value of ``predicate``, checked at every reported change."""
        deadline = time.monotonic() + timeout
        while True:
            self._changed.clear()
            value = predicate()
            if value:
                return value
            remaining = deadline - time.monotonic()
            assert remaining > 0, (self.changes, self.apiserver.lease(NAMESPACE, LEASE))
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._changed.wait(), remaining)

    def one_leader(self) -> str | None:
        leaders = self.leaders()
        return leaders[0] if len(leaders) == 1 else None

    async def close(self) -> None:
        for elector in self.electors.values():
            await elector.close()


def run(
    apiserver: ApiServerStandin, tmp_path: Path, scenario: Callable[[Election], Awaitable[None]]
) -> None:
    async def main() -> None:
        election = Election(apiserver, tmp_path)
        try:
            await scenario(election)
        finally:
            await election.close()
        assert election.most_leaders <= 1, election.changes

    asyncio.run(main())


def stored_spec(apiserver: ApiServerStandin) -> dict[str, Any]:
    lease = apiserver.lease(NAMESPACE, LEASE)
    assert lease is not None
    return dict(lease["spec"])


async def requests_by(apiserver: ApiServerStandin, name: str, method: str, more: int) -> None:
    """Until ``name`` has made ``more`` further ``method`` requests (in a thread: the stand-in
    waits on its own condition)."""
    user = f"system:serviceaccount:{NAMESPACE}:{name}"

    def count(view: ApiServerView) -> int:
        return sum(1 for r in view.requests if r.identity == user and r.method == method)

    start = count(apiserver.snapshot())
    await asyncio.to_thread(apiserver.wait_for, lambda view: count(view) >= start + more)


@pytest.mark.parametrize("candidates", [2, 3])
def test_exactly_one_candidate_leads(
    apiserver: ApiServerStandin, tmp_path: Path, candidates: int
) -> None:
    async def scenario(election: Election) -> None:
        for index in range(candidates):
            election.add(f"c{index}")
        leader = await election.until(election.one_leader)
        # Through several renewals, and the others' tries, the leader stays the one.
        await requests_by(apiserver, leader, "PUT", 8)
        assert election.leaders() == [leader]
        spec = stored_spec(apiserver)
        assert spec["holderIdentity"] == leader
        assert spec["leaseDurationSeconds"] == 2
        for name, elector in election.electors.items():
            state = elector.state
            assert state.leading == (name == leader)
            assert state.holder == leader
            assert state.error is None

    run(apiserver, tmp_path, scenario)


def test_a_released_lease_is_taken_at_the_next_try(
    apiserver: ApiServerStandin, tmp_path: Path
) -> None:
    async def scenario(election: Election) -> None:
        first = election.add("c0")
        await election.until(lambda: first.leading)
        second = election.add("c1")
        await requests_by(apiserver, "c1", "GET", 2)  # a candidate that saw c0 hold it
        await first.close(release=True)
        closed = time.monotonic()
        assert not first.leading
        await election.until(lambda: second.leading, timeout=LEASE_DURATION + 5)
        assert time.monotonic() - closed < TRY_SLACK  # not after the lease's duration
        spec = stored_spec(apiserver)
        assert (spec["holderIdentity"], spec["leaseTransitions"]) == ("c1", 1)

    run(apiserver, tmp_path, scenario)


def test_a_lease_left_without_release_is_taken_after_its_duration(
    apiserver: ApiServerStandin, tmp_path: Path
) -> None:
    async def scenario(election: Election) -> None:
        first = election.add("c0")
        await election.until(lambda: first.leading)
        second = election.add("c1")
        await requests_by(apiserver, "c1", "GET", 2)
        await first.close(release=False)
        closed = time.monotonic()
        await election.until(lambda: second.leading, timeout=LEASE_DURATION + 5)
        # c1 last saw the record change at c0's last renewal, at most a retry period before.
        assert time.monotonic() - closed >= LEASE_DURATION - RETRY - 0.1

    run(apiserver, tmp_path, scenario)


def test_a_leader_that_cannot_renew_stops_before_another_can_take_over(
    apiserver: ApiServerStandin, tmp_path: Path
) -> None:
    async def scenario(election: Election) -> None:
        first = election.add("c0")
        await election.until(lambda: first.leading)
        second = election.add("c1")
        await requests_by(apiserver, "c1", "GET", 2)
        apiserver.remove_token("token-c0")  # 401 from now on, for c0 only
        cut = time.monotonic()
        await election.until(lambda: not first.leading)
        stopped = time.monotonic()
        assert stopped - cut <= RENEW_DEADLINE + 0.3
        assert not second.leading
        await election.until(lambda: second.leading, timeout=LEASE_DURATION + 5)
        took = time.monotonic()
        assert took - stopped >= LEASE_DURATION - RENEW_DEADLINE - RETRY
        assert first.state.error is not None
        assert "401" in first.state.error

    run(apiserver, tmp_path, scenario)


def test_a_partitioned_leader_stops_at_its_deadline_though_its_requests_hang(
    apiserver: ApiServerStandin, tmp_path: Path
) -> None:
    async def scenario(election: Election) -> None:
        first = election.add("c0")
        await election.until(lambda: first.leading)
        second = election.add("c1")
        await requests_by(apiserver, "c1", "GET", 2)
        apiserver.cut_off(token="token-c0")
        cut = time.monotonic()
        await election.until(lambda: not first.leading)
        stopped = time.monotonic()
        assert stopped - cut <= RENEW_DEADLINE + 0.3
        await election.until(lambda: second.leading, timeout=LEASE_DURATION + 5)
        assert time.monotonic() - stopped >= LEASE_DURATION - RENEW_DEADLINE - RETRY
        # Its try ends once its requests time out (each a half renew deadline; one more on a
        # new connection): then it says so.
        await election.until(
            lambda: "timed out" in (first.state.error or ""), timeout=2 * RENEW_DEADLINE + 1
        )
        apiserver.reconnect(token="token-c0")
        # Back, it finds the Lease another's: it stays a candidate.
        await requests_by(apiserver, "c0", "GET", 2)
        assert not first.leading
        assert first.state.holder == "c1"

    run(apiserver, tmp_path, scenario)


def test_a_leader_whose_api_server_is_gone_stops_at_its_deadline(
    apiserver: ApiServerStandin, tmp_path: Path
) -> None:
    async def scenario(election: Election) -> None:
        first = election.add("c0")
        await election.until(lambda: first.leading)
        await asyncio.to_thread(apiserver.stop)
        cut = time.monotonic()
        await election.until(lambda: not first.leading)
        assert time.monotonic() - cut <= RENEW_DEADLINE + 0.3
        await asyncio.to_thread(apiserver.start)
        # Its own record still stands: it takes it back at once.
        await election.until(lambda: first.leading)

    run(apiserver, tmp_path, scenario)


def _micro(moment: datetime.datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def test_a_record_that_keeps_changing_is_never_taken_however_old_its_renew_time(
    apiserver: ApiServerStandin, tmp_path: Path
) -> None:
    """A holder whose clock is far behind: its renewTime looks ancient, but it renews."""
    past = datetime.datetime(2000, 1, 1, tzinfo=datetime.timezone.utc)

    def renew(step: int) -> None:
        moment = _micro(past + datetime.timedelta(microseconds=step))
        spec = {
            "holderIdentity": "elsewhere",
            "leaseDurationSeconds": 1,
            "acquireTime": _micro(past),
            "renewTime": moment,
        }
        apiserver.write_lease(NAMESPACE, LEASE, spec)

    async def scenario(election: Election) -> None:
        renew(0)
        candidate = election.add("c0")
        began = time.monotonic()
        step = 0
        while time.monotonic() - began < 3 * 1.0:  # three of the record's durations
            await requests_by(apiserver, "c0", "GET", 1)
            step += 1
            renew(step)
        assert not candidate.leading
        assert candidate.state.holder == "elsewhere"
        assert not [change for change in election.changes if change[2]]
        spec = stored_spec(apiserver)
        assert spec["holderIdentity"] == "elsewhere"

    run(apiserver, tmp_path, scenario)


def test_a_record_that_stops_changing_is_taken_after_its_duration_however_new(
    apiserver: ApiServerStandin, tmp_path: Path
) -> None:
    """A holder whose clock is far ahead, gone: its renewTime is in the future."""
    future = _micro(datetime.datetime(2100, 1, 1, tzinfo=datetime.timezone.utc))
    spec = {
        "holderIdentity": "elsewhere",
        "leaseDurationSeconds": 1,
        "acquireTime": future,
        "renewTime": future,
        "leaseTransitions": 4,
    }
    apiserver.write_lease(NAMESPACE, LEASE, spec)

    async def scenario(election: Election) -> None:
        began = time.monotonic()
        candidate = election.add("c0")
        await election.until(lambda: candidate.leading)
        waited = time.monotonic() - began
        assert 1.0 <= waited < 1.0 + TRY_SLACK
        assert candidate.state.transitions == 5

    run(apiserver, tmp_path, scenario)


# --- the decisions, with a fake clock --------------------------------------------------------

WALL = datetime.datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=datetime.timezone.utc)


def test_expiry_counts_from_the_last_change_seen() -> None:
    held = LeaderRecord("other", 10, "t0", "t1", 3)
    seen = observe(None, held, now=100.0)
    assert not may_take(seen, "me", 109.9)
    assert observe(seen, held, now=105.0) is seen  # unchanged: the clock does not restart
    renewed = observe(seen, LeaderRecord("other", 10, "t0", "t2", 3), now=105.0)
    assert not may_take(renewed, "me", 114.9)
    assert may_take(renewed, "me", 115.0)
    assert may_take(observe(None, LeaderRecord("", 10), 100.0), "me", 100.0)  # released
    assert may_take(observe(None, LeaderRecord("me", 10), 100.0), "me", 100.0)  # its own


def test_what_a_candidate_writes() -> None:
    held = LeaderRecord("other", 10, "t0", "t1", 3)
    taken = claimed(held, "me", 1.5, WALL)
    assert taken == LeaderRecord(
        "me", 2, "2026-01-02T03:04:05.678901Z", "2026-01-02T03:04:05.678901Z", 4
    )
    later = WALL + datetime.timedelta(seconds=1)
    assert claimed(taken, "me", 1.5, later) == LeaderRecord(
        "me", 2, taken.acquire_time, "2026-01-02T03:04:06.678901Z", 4
    )
    assert released(taken, later) == LeaderRecord(
        "", 1, "2026-01-02T03:04:06.678901Z", "2026-01-02T03:04:06.678901Z", 4
    )
    assert LeaderRecord.from_spec(taken.spec()) == taken


def test_timing_is_checked_as_client_go_does() -> None:
    assert timing_problem(15, 10, 2) is None
    assert timing_problem(10, 10, 2) == "leaseDuration must be greater than renewDeadline"
    assert (
        timing_problem(15, 2.4, 2) == "renewDeadline must be greater than retryPeriod*JitterFactor"
    )
    with pytest.raises(ValueError, match="leaseDuration must be greater"):
        LeaderElector(
            KubernetesSettings(lease_duration=5, renew_deadline=5),
            LEASE,
            NAMESPACE,
            "me",
            lambda: None,
        )


def test_identity_and_namespace(tmp_path: Path) -> None:
    first, second = default_identity(), default_identity()
    assert first != second
    assert first.rpartition("_")[0] == second.rpartition("_")[0]
    # Set, it is read from nowhere: not even a missing kubeconfig matters.
    missing = tmp_path / "missing.conf"
    assert lease_namespace(KubernetesSettings(kubeconfig=missing, lease_namespace="mine")) == "mine"
    pod_namespace = tmp_path / "namespace"
    pod_namespace.write_text("publishers\n")
    in_pod = KubernetesSettings(in_cluster=True)
    assert lease_namespace(in_pod, pod_namespace) == "publishers"
    with pytest.raises(KubeError, match="cannot read the pod's namespace"):
        lease_namespace(in_pod, tmp_path / "missing")


CONTEXT = (
    "clusters: [{name: c, cluster: {server: 'https://h'}}]\n"
    "users: [{name: u, user: {token: t}}]\ncurrent-context: x\n"
    "contexts: [{name: x, context: {cluster: c, user: u%s}}]\n"
)


@pytest.mark.parametrize(
    ("namespace", "expected"),
    [
        (", namespace: licenses", "licenses"),
        ("", DEFAULT_LEASE_NAMESPACE),
        (", namespace: ''", DEFAULT_LEASE_NAMESPACE),
    ],
)
def test_outside_a_pod_the_namespace_is_the_kubeconfig_contexts(
    tmp_path: Path, namespace: str, expected: str
) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(CONTEXT % namespace)
    assert lease_namespace(KubernetesSettings(kubeconfig=kubeconfig)) == expected


@pytest.mark.parametrize(
    ("document", "message"),
    [
        (None, "cannot read kubeconfig"),
        (CONTEXT % ", namespace: [a]", "the current context's namespace must be a string"),
        ("current-context: nowhere\n", "no context named 'nowhere'"),
    ],
)
def test_a_kubeconfig_that_names_no_usable_namespace_is_a_clear_error(
    tmp_path: Path, document: str | None, message: str
) -> None:
    # Guessing would elect a second leader elsewhere.
    kubeconfig = tmp_path / "kubeconfig"
    if document is not None:
        kubeconfig.write_text(document)
    with pytest.raises(KubeError, match=message):
        lease_namespace(KubernetesSettings(kubeconfig=kubeconfig))
