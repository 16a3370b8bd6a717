"""The publisher of cluster pools (``token-resource run --role publisher``) as real processes
against the API-server stand-in: one writer elected among two or three, hand-over on SIGTERM
and after SIGKILL, the new holder adopting the pool with one generation, nothing deleted, the
free-seats probe, and status."""

from __future__ import annotations

import re
import signal
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import parse_qs

import pytest

from tests.harness import AgentProcess
from tests.publisher.cluster_publishers import (
    DRIVER,
    LEASE_SECONDS,
    LICENSE,
    POOL,
    RETRY_SECONDS,
    authors,
    cluster_slices,
    devices,
    generation,
    holder,
    holder_and_generation,
    newest_devices,
    publisher_config,
    publishers,
    status_of,
    writer_of,
)
from tests.standin.apiserver import ApiServerStandin, ApiServerView, CertificateAuthority
from token_resource.apiserver.keeping.cluster_slices import lease_name


@pytest.fixture
def apiserver(ca: CertificateAuthority) -> Iterator[ApiServerStandin]:
    with ApiServerStandin(ca, nodes=("node-a",)) as standin:
        yield standin


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


def test_the_publisher_reads_no_nodes_slices(apiserver: ApiServerStandin, tmp_path: Path) -> None:
    # One slice per node of its driver: at scale, their changes would wake it for nothing.
    with publishers(apiserver, tmp_path, 1):
        view = apiserver.wait_for(lambda v: devices(v) == [f"token-{i}" for i in range(5)])
    reads = [r for r in view.requests if r.method == "GET" and r.path.endswith("/resourceslices")]
    assert reads
    selectors = {parse_qs(r.query, keep_blank_values=True)["fieldSelector"][0] for r in reads}
    assert selectors == {f"spec.driver={DRIVER},spec.nodeName="}


def test_without_lease_namespace_the_lease_is_in_the_kubeconfig_contexts_namespace(
    apiserver: ApiServerStandin, tmp_path: Path
) -> None:
    # As kubectl: a publisher run with a kubeconfig elects in its context's namespace, not in
    # token-resource, which need not exist where its account lives.
    with publishers(
        apiserver, tmp_path, 1, tokens=2, context_namespace="licenses", lease_namespace=None
    ) as running:
        view = apiserver.wait_for(lambda v: devices(v) == ["token-0", "token-1"])
        lease = f"licenses/{lease_name(DRIVER)}"
        assert list(view.leases) == [lease]
        assert status_of(running["p0"])["cluster_pools"]["lease"] == lease


def test_sigterm_of_the_holder_hands_the_pool_over_within_a_retry_period(
    apiserver: ApiServerStandin, tmp_path: Path
) -> None:
    with publishers(apiserver, tmp_path, 3) as running:
        first, before = holder_and_generation(apiserver)
        stopped = time.monotonic()
        assert running[first].stop() == 0
        view = apiserver.wait_for(lambda v: generation(v) == before + 1, timeout=10)
        handed_over = time.monotonic() - stopped
        assert handed_over <= 3.0, handed_over
        (second,) = authors(view, before + 1)
        assert second != first
        # Adopted where they were: updated, never deleted and made again.
        assert {write.type for write in view.slice_writes(DRIVER)} == {"ADDED", "MODIFIED"}
        assert devices(view) == [f"token-{i}" for i in range(5)]
        assert "giving up the lease" in running[first].log()


def test_sigkill_of_the_holder_another_writes_within_lease_duration_and_retry(
    apiserver: ApiServerStandin, tmp_path: Path
) -> None:
    with publishers(apiserver, tmp_path, 2) as running:
        first, before = holder_and_generation(apiserver)
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
            return [device["name"] for device in newest_devices(view) if device.get("taints")]

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


def refused_start(tmp_path: Path, config: str) -> str:
    """The log of a publisher started on ``config``, which must exit 1. Its device-plugin
    directory is far too long for sockets: a publisher serves none, and never says so."""
    process = AgentProcess(tmp_path / "p", tmp_path / ("unused" * 20), role="publisher")
    process.write_config(config)
    try:
        process.start(wait_ready=False)
        assert process.process is not None
        assert process.process.wait(30) == 1
        return process.log()
    finally:
        process.kill()


def test_a_publisher_without_cluster_resources_refuses_to_start(tmp_path: Path) -> None:
    log = refused_start(tmp_path, '[resources."example.com/token"]\ncount = 2\n')
    assert 'no resource with scope = "cluster"' in log


def test_the_metrics_say_who_leads_and_what_each_pool_offers(
    apiserver: ApiServerStandin, tmp_path: Path
) -> None:
    with publishers(apiserver, tmp_path, 2) as running:
        writer, _ = holder_and_generation(apiserver)
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


def test_a_publisher_in_a_pod_without_its_namespace_refuses_to_start(tmp_path: Path) -> None:
    """In a pod the Lease is in the pod's namespace; guessing another would elect a second
    publisher there."""
    assert not Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace").exists()
    log = refused_start(
        tmp_path,
        "[kubernetes]\nin_cluster = true\n"
        f'[resources."{LICENSE}"]\ncount = 2\nadvertise = "dra"\nscope = "cluster"\n',
    )
    assert "cannot read the pod's namespace" in log
