"""The publisher of cluster pools (``token-resource run --role publisher``) against a real 1.37
control plane (tests/kube/controlplane.py): publishers under a ServiceAccount with the RBAC the
docs ask for, one holding the real Lease, hand-over on SIGTERM and after SIGKILL; and the real
scheduler holding unchanged pods on two Nodes to the pool's count, to the nodes a pool is for,
and to the seats the free-seats probe leaves untainted. No kubelet runs: the scheduler needs
none, and the pods it binds never start."""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from tests.kube.client import wait_until
from tests.kube.controlplane import ControlPlane
from tests.kube.publishers import (
    NAMESPACE,
    PODS,
    RBAC_API,
    account_kubeconfig,
    allocated,
    cluster_resource,
    devices_of,
    generation,
    holder_of,
    lease_of,
    make_pod,
    pool_slices,
    publisher_config,
    publishers,
    rbac,
    status_of,
    stored_pool,
    tokens,
    wait_for_placement,
)
from tests.kube.test_cp_dra import RESOURCE_API, SLICES, unschedulable
from token_resource.apiserver.objects.slices import cluster_pool_name

# The scheduling tests' driver, and the election test's own (its Lease and slices apart).
DRIVER, ELECTION_DRIVER = "seats.example.com", "election.example.com"
LICENSE, ZONE_LICENSE, SEAT = "example.com/license", "example.com/zone-license", "example.com/seat"
ZONE_A, ZONE_B = "cp-pub-a", "cp-pub-b"  # Nodes; only a has license-zone=a
# Short enough for a test, long enough for a busy 2-core machine's API server to answer a
# renewal in time; client-go's rule (lease > renew > 1.2 x retry) holds.
LEASE_SECONDS, RENEW_SECONDS, RETRY_SECONDS = 3.0, 2.0, 0.5
FAST = (
    f"lease_duration_seconds = {LEASE_SECONDS}\n"
    f"renew_deadline_seconds = {RENEW_SECONDS}\n"
    f"retry_period_seconds = {RETRY_SECONDS}\n"
)


def remove_everything(control_plane: ControlPlane) -> None:
    """What the tests made on the shared control plane, whatever state they left it in."""
    admin = control_plane.admin
    status, listing = admin.request("GET", PODS)
    for pod in listing["items"] if status == 200 else []:
        admin.request("DELETE", f"{PODS}/{pod['metadata']['name']}", {"gracePeriodSeconds": 0})
    for driver in (DRIVER, ELECTION_DRIVER):
        admin.request("DELETE", f"{SLICES}?fieldSelector=spec.driver={driver}")
    for resource in (LICENSE, ZONE_LICENSE, SEAT):
        admin.delete(f"{RESOURCE_API}/deviceclasses/{device_class_name(resource)}")
    for node in (ZONE_A, ZONE_B):
        control_plane.delete_node(node)
    admin.delete(f"{RBAC_API}/clusterrolebindings/cp-publisher")
    admin.delete(f"{RBAC_API}/clusterroles/cp-publisher")
    # The namespace controller takes its Leases, claims and account with it.
    admin.delete(f"/api/v1/namespaces/{NAMESPACE}")


def device_class_name(resource: str) -> str:
    domain, _, name = resource.partition("/")
    return f"{name}.{domain}"


@pytest.fixture(scope="module")
def kubeconfig(
    control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Path]:
    """The publisher account's kubeconfig, two Ready Nodes (a with license-zone=a), the
    namespace's pods admitted; everything removed afterwards."""
    try:
        rbac(control_plane)
        for node in (ZONE_A, ZONE_B):
            control_plane.add_node(node)
        control_plane.admin.ok(
            "PATCH",
            f"/api/v1/nodes/{ZONE_A}",
            {"metadata": {"labels": {"license-zone": "a"}}},
            content_type="application/merge-patch+json",
        )
        wait_until(
            "the namespace's default ServiceAccount",
            lambda: (
                control_plane.admin.request(
                    "GET", f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/default"
                )[0]
                == 200
            ),
        )
        yield account_kubeconfig(control_plane, tmp_path_factory.mktemp("publisher") / "sa.conf")
    finally:
        remove_everything(control_plane)


def test_one_of_two_publishers_holds_the_real_lease_and_hands_it_over(
    control_plane: ControlPlane, kubeconfig: Path, tmp_path: Path
) -> None:
    """Two publishers under the ServiceAccount: one holds the real Lease and has the real API
    server store the allNodes pool; SIGTERM of the holder hands it over within seconds (one
    new generation of the same slices, none made again), SIGKILL within the lease duration and
    a retry period."""
    pool = cluster_pool_name(LICENSE)
    config = publisher_config(kubeconfig, ELECTION_DRIVER, cluster_resource(LICENSE, 3), FAST)
    with publishers(tmp_path, config, "p0", "p1") as (p0, p1):
        items = wait_until(
            "the pool's three tokens in the real API server",
            lambda: stored_pool(control_plane, ELECTION_DRIVER, pool, 3),
            show=lambda: pool_slices(control_plane, ELECTION_DRIVER, pool),
        )
        assert [item["spec"].get("allNodes") for item in items] == [True]
        assert ["nodeName" in item["spec"] for item in items] == [False]
        lease = lease_of(control_plane, ELECTION_DRIVER)
        assert lease is not None
        holder = lease["spec"]["holderIdentity"]
        identities = {status_of(p)["identity"]: p for p in (p0, p1)}
        assert holder in identities, (holder, identities)
        first = identities.pop(holder)
        ((standby_identity, standby),) = identities.items()
        assert status_of(first)["leading"] is True
        assert (status_of(standby)["leading"], status_of(standby)["holder"]) == (False, holder)
        assert lease["spec"]["leaseDurationSeconds"] == int(LEASE_SECONDS)
        # The real server's MicroTime: six digits of fraction, UTC.
        assert len(lease["spec"]["renewTime"]) == len("2026-01-02T03:04:05.000000Z"), lease
        before = {item["metadata"]["name"]: item["metadata"]["uid"] for item in items}
        first_generation = items[0]["spec"]["pool"]["generation"]

        stopped = time.monotonic()
        assert first.stop() == 0
        wait_until(
            "a new generation written by the stand-by",
            lambda: generation(control_plane, ELECTION_DRIVER, pool) == first_generation + 1,
            timeout=15,
        )
        handed_over = time.monotonic() - stopped
        assert handed_over <= 3.0, handed_over
        assert holder_of(control_plane, ELECTION_DRIVER) == standby_identity
        after = pool_slices(control_plane, ELECTION_DRIVER, pool)
        # Taken over where they were: the same objects (uids), updated, none made again.
        assert {item["metadata"]["name"]: item["metadata"]["uid"] for item in after} == before
        assert devices_of(after) == tokens(3)
        assert "giving up the lease" in first.log()

        # Two stand-bys this time: on the holder's death both find the Lease expired, and
        # the real server lets one update through (the other's resourceVersion is stale).
        with publishers(tmp_path, config, "p2", "p3") as later:
            wait_until(
                "the new publishers seeing the holder",
                lambda: [status_of(p)["holder"] for p in later] == [standby_identity] * 2,
            )
            killed = time.monotonic()
            standby.signal(signal.SIGKILL)
            wait_until(
                "a new generation written by one of the new publishers",
                lambda: generation(control_plane, ELECTION_DRIVER, pool) == first_generation + 2,
                timeout=20,
            )
            took = time.monotonic() - killed
            # The Lease must look expired on the survivor's own clock first: never sooner.
            assert LEASE_SECONDS - RETRY_SECONDS <= took <= LEASE_SECONDS + 3 * RETRY_SECONDS + 2
            lease = lease_of(control_plane, ELECTION_DRIVER)
            assert lease is not None
            winner = lease["spec"]["holderIdentity"]

            def agreeing() -> list[dict[str, Any]] | None:
                reports = [status_of(process) for process in later]
                return reports if all(r["holder"] == winner for r in reports) else None

            reports = wait_until("both new publishers agreeing on the holder", agreeing)
            assert sorted(report["leading"] for report in reports) == [False, True], reports
            assert lease["spec"]["leaseTransitions"] == 2, lease
            assert generation(control_plane, ELECTION_DRIVER, pool) == first_generation + 2
            # The stand-by first, then the holder, which gives the Lease up.
            for report, process in sorted(zip(reports, later), key=lambda rp: rp[0]["leading"]):
                assert process.stop() == 0, report
    released = lease_of(control_plane, ELECTION_DRIVER)
    assert released is not None
    assert released["spec"].get("holderIdentity") in (None, ""), released


@pytest.fixture(scope="module")
def seats(
    control_plane: ControlPlane, kubeconfig: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Path]:
    """One publisher of three pools of DRIVER: LICENSE (2 tokens, every node), ZONE_LICENSE (2,
    the nodes labelled license-zone=a) and SEAT (3, with a free-seats probe reading the file
    this yields, 3 at first); their DeviceClasses (`token-resource device-classes`) applied."""
    workdir = tmp_path_factory.mktemp("seats")
    free = workdir / "free-seats"
    free.write_text("3\n")
    probe = f'probe = {{ command = ["cat", "{free}"], interval = 1, failure_threshold = 1 }}\n'
    resources = (
        cluster_resource(LICENSE, 2)
        + cluster_resource(ZONE_LICENSE, 2, 'nodes = "license-zone=a"\n')
        + cluster_resource(SEAT, 3, probe)
    )
    config = publisher_config(kubeconfig, DRIVER, resources)
    with publishers(workdir, config, "p") as (process,):
        printed = process.cli("device-classes", "--config", str(process.config_path))
        assert printed.returncode == 0, printed.stderr
        control_plane.kubectl("apply", "-f", "-", stdin=printed.stdout)
        for resource, count in ((LICENSE, 2), (ZONE_LICENSE, 2), (SEAT, 3)):
            pool = cluster_pool_name(resource)
            wait_until(
                f"the pool of {resource}", partial(stored_pool, control_plane, DRIVER, pool, count)
            )
        yield free


@pytest.fixture
def pods(control_plane: ControlPlane) -> Iterator[list[str]]:
    """The names of the pods a test makes; deleted at once afterwards (no kubelet confirms a
    graceful deletion), their claims with them (the garbage collector)."""
    made: list[str] = []
    yield made
    for name in made:
        control_plane.admin.request("DELETE", f"{PODS}/{name}", {"gracePeriodSeconds": 0})


def test_the_real_scheduler_holds_pods_on_two_nodes_to_the_pools_count(
    control_plane: ControlPlane, seats: Path, pods: list[str]
) -> None:
    """Two tokens for the cluster, three pods over two Nodes: two get a claim on the cluster
    pool, wherever they are, the third stays Pending; once a pod on the other Node is gone,
    the third gets its token."""
    pool = cluster_pool_name(LICENSE)
    wanted = {"license-0": ZONE_A, "license-1": ZONE_B, "license-2": ZONE_A}
    for name, node in wanted.items():
        make_pod(control_plane, pods, name, node, LICENSE)
    nodes, (pending,) = wait_for_placement(control_plane, pods, bound=2, refused=1)
    held = {name: allocated(control_plane, name, DRIVER) for name in nodes}
    assert sorted(device for results in held.values() for _, device in results) == [
        "token-0",
        "token-1",
    ], held
    assert {p for results in held.values() for p, _ in results} == {pool}, held
    condition = unschedulable(control_plane.admin.get(f"{PODS}/{pending}"))
    assert condition is not None
    assert "cannot allocate all claims" in condition["message"], condition

    assert nodes == {name: wanted[name] for name in nodes}
    # The token moves from one Node to the other: a pool of the cluster, not of a node.
    leaving = next(name for name, node in nodes.items() if node != wanted[pending])
    ((_, freed),) = held[leaving]
    control_plane.admin.request("DELETE", f"{PODS}/{leaving}", {"gracePeriodSeconds": 0})
    pods.remove(leaving)
    nodes, _ = wait_for_placement(control_plane, pods, bound=2, refused=0)
    assert nodes[pending] == wanted[pending] != wanted[leaving]
    assert allocated(control_plane, pending, DRIVER) == [(pool, freed)]


def test_a_pool_for_labelled_nodes_serves_only_their_pods(
    control_plane: ControlPlane, seats: Path, pods: list[str]
) -> None:
    """``nodes = "license-zone=a"``: the pool's slice has the node selector, the pod on node a
    gets a token from it, the pod on node b (no label) none, though tokens are left."""
    pool = cluster_pool_name(ZONE_LICENSE)
    (item,) = pool_slices(control_plane, DRIVER, pool)
    assert item["spec"]["nodeSelector"] == {
        "nodeSelectorTerms": [
            {"matchExpressions": [{"key": "license-zone", "operator": "In", "values": ["a"]}]}
        ]
    }, item["spec"]
    assert "allNodes" not in item["spec"]
    make_pod(control_plane, pods, "zone-on-a", ZONE_A, ZONE_LICENSE)
    make_pod(control_plane, pods, "zone-on-b", ZONE_B, ZONE_LICENSE)
    nodes, pending = wait_for_placement(control_plane, pods, bound=1, refused=1)
    assert (nodes, pending) == ({"zone-on-a": ZONE_A}, ["zone-on-b"])
    ((result_pool, _),) = allocated(control_plane, "zone-on-a", DRIVER)
    assert result_pool == pool


def test_the_free_seats_probe_leaves_the_scheduler_only_the_free_seats(
    control_plane: ControlPlane, seats: Path, pods: list[str]
) -> None:
    """Three seats, one free by the license server: two are tainted, the real scheduler gives
    one of three pods the untainted one; with two more free, the two others get theirs."""
    pool = cluster_pool_name(SEAT)
    seats.write_text("1\n")

    def tainted() -> list[str]:
        return sorted(
            device["name"]
            for item in pool_slices(control_plane, DRIVER, pool)
            for device in item["spec"]["devices"]
            if device.get("taints")
        )

    wait_until("two seats tainted", lambda: tainted() == ["token-1", "token-2"], show=tainted)
    for index, node in enumerate((ZONE_A, ZONE_B, ZONE_B)):
        make_pod(control_plane, pods, f"seat-{index}", node, SEAT)
    nodes, _ = wait_for_placement(control_plane, pods, bound=1, refused=2)
    assert [allocated(control_plane, name, DRIVER) for name in nodes] == [[(pool, "token-0")]]

    # Two more free: the allocated seat stays as it is, the two others are offered.
    seats.write_text("2\n")
    wait_until("no seat tainted", lambda: tainted() == [], show=tainted)
    nodes, _ = wait_for_placement(control_plane, pods, bound=3, refused=0)
    devices = sorted(
        device for name in nodes for _, device in allocated(control_plane, name, DRIVER)
    )
    assert devices == ["token-0", "token-1", "token-2"]
