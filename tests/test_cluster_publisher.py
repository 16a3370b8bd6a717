"""The publisher of cluster pools (``token-resource run --role publisher``) as real processes
against the API-server stand-in: one writer elected among two or three, hand-over on SIGTERM
and after SIGKILL, the new holder adopting the pool with one generation, nothing deleted, the
free-seats probe, and status."""

from __future__ import annotations

import json
import re
import signal
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.harness import AgentProcess
from tests.standin.apiserver import ApiServerStandin, ApiServerView, CertificateAuthority
from tests.standin.apiserver.authz import Rule
from tests.standin.apiserver.leases import LEASE_RULES
from token_resource.apiserver.cluster_pools import lease_name
from token_resource.apiserver.slices import cluster_pool_name

NAMESPACE = "token-resource"
DRIVER = "tokens.example.com"
LICENSE = "example.com/license"
POOL = cluster_pool_name(LICENSE)
LEASE = f"{NAMESPACE}/{lease_name(DRIVER)}"
PUBLISHER_RULES = (
    *LEASE_RULES,
    Rule(
        ("resource.k8s.io",),
        ("resourceslices",),
        ("get", "list", "watch", "create", "update", "delete"),
    ),
    Rule(("resource.k8s.io",), ("resourceclaims",), ("get", "list")),
)
# Short enough for tests; client-go's rule (lease > renew > 1.2 x retry) holds.
LEASE_SECONDS, RENEW_SECONDS, RETRY_SECONDS = 2.0, 1.2, 0.2
FAST = (
    f"lease_duration_seconds = {LEASE_SECONDS}\n"
    f"renew_deadline_seconds = {RENEW_SECONDS}\n"
    f"retry_period_seconds = {RETRY_SECONDS}\n"
)
SLICE_WRITES = ("POST", "PUT", "DELETE")


@pytest.fixture
def apiserver(ca: CertificateAuthority) -> Iterator[ApiServerStandin]:
    with ApiServerStandin(ca, nodes=("node-a",)) as standin:
        yield standin


def publisher_config(kubeconfig: Path, count: int, extra: str = "", timing: str = FAST) -> str:
    return (
        f'[kubernetes]\nkubeconfig = "{kubeconfig}"\nlease_namespace = "{NAMESPACE}"\n{timing}'
        f'[dra]\ndriver = "{DRIVER}"\n'
        f'[resources."{LICENSE}"]\ncount = {count}\nadvertise = "dra"\nscope = "cluster"\n'
        f"{extra}"
    )


@contextmanager
def publishers(
    apiserver: ApiServerStandin, tmp_path: Path, count: int, *, tokens: int = 5, timing: str = FAST
) -> Iterator[dict[str, AgentProcess]]:
    """``count`` publishers p0, p1, ..., each with a service account of its own (so that the
    stand-in's log says who wrote what), started one after the other; killed at the end."""
    started: dict[str, AgentProcess] = {}
    try:
        for index in range(count):
            name = f"p{index}"
            token = f"token-{name}"
            user = f"system:serviceaccount:{NAMESPACE}:{name}"
            apiserver.add_token(token, user=user, rules=PUBLISHER_RULES)
            kubeconfig = apiserver.write_kubeconfig(tmp_path / f"{name}.conf", token=token)
            process = AgentProcess(tmp_path / name, tmp_path / "unused", role="publisher")
            process.write_config(publisher_config(kubeconfig, tokens, timing=timing))
            started[name] = process
            process.start()
        yield started
    finally:
        for process in started.values():
            process.kill()


def cluster_slices(view: ApiServerView) -> list[dict[str, Any]]:
    return [
        obj
        for obj in view.slices.values()
        if obj["spec"]["driver"] == DRIVER and obj["spec"].get("allNodes")
    ]


def generation(view: ApiServerView) -> int | None:
    generations = {obj["spec"]["pool"]["generation"] for obj in cluster_slices(view)}
    return max(generations) if generations else None


def devices(view: ApiServerView) -> list[str]:
    newest = generation(view)
    return [
        device["name"]
        for obj in cluster_slices(view)
        if obj["spec"]["pool"]["generation"] == newest
        for device in obj["spec"]["devices"]
    ]


def holder(view: ApiServerView) -> str | None:
    lease = view.leases.get(LEASE)
    return None if lease is None else (lease.get("spec") or {}).get("holderIdentity")


def slice_writes(view: ApiServerView) -> list[tuple[str, str, int | None]]:
    """(author, method, pool generation written) of every successful write of a slice."""
    writes = []
    for request in view.requests:
        if (
            request.method in SLICE_WRITES
            and "/resourceslices" in request.path
            and 200 <= request.status < 300
        ):
            spec = (request.response or {}).get("spec") or {}
            written = (spec.get("pool") or {}).get("generation")
            writes.append((str(request.identity), request.method, written))
    return writes


def writer_of(view: ApiServerView) -> str:
    """The one publisher whose account wrote slices (p0, p1, ...)."""
    authors = {author.rsplit(":", 1)[-1] for author, _, _ in slice_writes(view)}
    assert len(authors) == 1, authors
    return authors.pop()


def status_of(process: AgentProcess) -> dict[str, Any]:
    answer = process.cli("status", "--json")
    assert answer.returncode == 0, answer.stderr
    report: dict[str, Any] = json.loads(answer.stdout)
    return report


def test_of_two_publishers_one_holds_the_lease_and_writes_the_pool(
    apiserver: ApiServerStandin, tmp_path: Path
) -> None:
    with publishers(apiserver, tmp_path, 2) as running:
        view = apiserver.wait_for(lambda v: devices(v) == [f"token-{i}" for i in range(5)])
        (item,) = cluster_slices(view)
        assert item["spec"]["allNodes"] is True
        assert "nodeName" not in item["spec"]
        assert item["spec"]["pool"]["name"] == POOL
        writer = writer_of(view)
        assert holder(view) is not None
        assert holder(view) == status_of(running[writer])["cluster_pools"]["identity"]
        other = next(name for name in running if name != writer)
        standby = status_of(running[other])["cluster_pools"]
        assert standby["leading"] is False
        assert standby["holder"] == holder(view)
        leader = status_of(running[writer])
        assert leader["cluster_pools"]["leading"] is True
        assert leader["cluster_pools"]["pools"][0]["generation"] == generation(view)
        assert "publishing (holds the lease)" in leader["summary"]
        # The stand-by writes nothing, however long it runs: a change of the count is the
        # holder's to write.
        for name in (writer, other):
            running[name].write_config(publisher_config(tmp_path / f"{name}.conf", 3))
        view = apiserver.wait_for(lambda v: devices(v) == ["token-0", "token-1", "token-2"])
        assert writer_of(view) == writer


def test_sigterm_of_the_holder_hands_the_pool_over_within_a_retry_period(
    apiserver: ApiServerStandin, tmp_path: Path
) -> None:
    with publishers(apiserver, tmp_path, 3) as running:
        view = apiserver.wait_for(lambda v: generation(v) is not None)
        first, before = writer_of(view), generation(view)
        assert before is not None
        stopped = time.monotonic()
        assert running[first].stop() == 0
        view = apiserver.wait_for(lambda v: generation(v) == before + 1, timeout=10)
        handed_over = time.monotonic() - stopped
        assert handed_over <= 3.0, handed_over
        authors = {a.rsplit(":", 1)[-1] for a, _, g in slice_writes(view) if g == before + 1}
        assert len(authors) == 1, authors
        assert first not in authors
        # Adopted where they were: updated, never deleted and made again.
        assert not [w for w in slice_writes(view) if w[1] == "DELETE"]
        assert devices(view) == [f"token-{i}" for i in range(5)]
        assert "giving up the lease" in running[first].log()


def test_sigkill_of_the_holder_another_writes_within_lease_duration_and_retry(
    apiserver: ApiServerStandin, tmp_path: Path
) -> None:
    with publishers(apiserver, tmp_path, 2) as running:
        view = apiserver.wait_for(lambda v: generation(v) is not None)
        first, before = writer_of(view), generation(view)
        assert before is not None
        killed = time.monotonic()
        running[first].signal(signal.SIGKILL)
        view = apiserver.wait_for(lambda v: generation(v) == before + 1, timeout=20)
        took = time.monotonic() - killed
        # The Lease must look expired on the survivor's own clock first: never sooner.
        assert LEASE_SECONDS - RETRY_SECONDS <= took <= LEASE_SECONDS + 4 * RETRY_SECONDS + 2, took
        survivor = next(name for name in running if name != first)
        assert holder(view) == status_of(running[survivor])["cluster_pools"]["identity"]
        assert generation(view) == before + 1  # one generation: adopted, not rewritten twice


def test_the_free_seats_probe_taints_the_seats_not_free(
    apiserver: ApiServerStandin, tmp_path: Path
) -> None:
    seats = tmp_path / "free-seats"
    seats.write_text("2\n")
    probe = f'probe = {{ command = ["cat", "{seats}"], interval = 1, failure_threshold = 1 }}\n'
    with publishers(apiserver, tmp_path, 1) as running:
        (publisher,) = running.values()
        apiserver.wait_for(lambda v: generation(v) is not None)
        # A pod runs with token-3: its seat is checked out, so not among the free ones.
        apiserver.allocate_claim(
            "default",
            "seat",
            pod="solver",
            node="node-a",
            driver=DRIVER,
            results=[("license", POOL, "token-3")],
        )
        kubeconfig = tmp_path / "p0.conf"
        publisher.write_config(publisher_config(kubeconfig, 5, probe))

        def tainted(view: ApiServerView) -> list[str]:
            newest = generation(view)
            return [
                device["name"]
                for obj in cluster_slices(view)
                if obj["spec"]["pool"]["generation"] == newest
                for device in obj["spec"]["devices"]
                if device.get("taints")
            ]

        # Two seats free: token-3 stays as it is, two others are offered, the rest tainted.
        apiserver.wait_for(lambda v: tainted(v) == ["token-2", "token-4"])
        report = status_of(publisher)["cluster_pools"]["pools"][0]
        assert (report["healthy"], report["allocated"]) == (3, 1)
        seats.write_text("0\n")
        apiserver.wait_for(lambda v: len(tainted(v)) == 5)
        seats.write_text("5\n")
        apiserver.wait_for(lambda v: generation(v) is not None and tainted(v) == [])
        report = status_of(publisher)["cluster_pools"]["pools"][0]
        assert (report["healthy"], report["allocated"]) == (5, 1)


def test_a_publisher_without_cluster_resources_refuses_to_start(tmp_path: Path) -> None:
    process = AgentProcess(tmp_path / "p", tmp_path / "unused", role="publisher")
    process.write_config('[resources."example.com/token"]\ncount = 2\n')
    try:
        process.start(wait_ready=False)
        assert process.process is not None
        assert process.process.wait(30) == 1
        assert 'no resource with scope = "cluster"' in process.log()
    finally:
        process.kill()


def test_the_metrics_say_who_leads_and_what_each_pool_offers(
    apiserver: ApiServerStandin, tmp_path: Path
) -> None:
    with publishers(apiserver, tmp_path, 2) as running:
        view = apiserver.wait_for(lambda v: generation(v) is not None)
        writer = writer_of(view)
        for name, process in running.items():
            metrics = '[metrics]\nlisten = "127.0.0.1:0"\n'
            process.write_config(publisher_config(tmp_path / f"{name}.conf", 5, metrics))
        # A change of [metrics] takes a restart: each comes back as what it was.
        for process in running.values():
            assert process.stop() == 0
        for name in sorted(running, key=lambda n: n != writer):
            running[name].start()
        apiserver.wait_for(lambda v: generation(v) is not None and holder(v) is not None)
        for process in running.values():
            found = re.search(r"metrics: serving (http://\S+/metrics)", process.log())
            assert found, process.log()
            with urllib.request.urlopen(found[1], timeout=30) as response:
                text = response.read().decode()
            assert "token_resource_pod_resources_up" not in text
            leading = status_of(process)["cluster_pools"]["identity"] == holder(
                apiserver.snapshot()
            )
            assert f"token_resource_cluster_pools_leader {float(leading)}" in text
            offered = f'token_resource_cluster_pool_tokens_offered{{resource="{LICENSE}"}} 5.0'
            assert offered in text
            assert f'token_resource_tokens_configured{{resource="{LICENSE}"}} 5.0' in text
