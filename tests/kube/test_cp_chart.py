"""The Helm chart against the real 1.37 API server (tests/kube/controlplane.py): every object
it renders for every example values file passes the server's validation, and the DRA and
node-status examples' admission policies, installed for a release of another name in another
namespace, hold the release's account to its own node's ResourceSlices and extended resources;
the cluster-pools example's hold the publisher's account to its driver's cluster slices."""

from __future__ import annotations

import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.kube.chart import CHART, EXAMPLES, Helm
from tests.kube.controlplane import ControlPlane
from tests.kube.test_chart_publisher import OVERLAYS_DRIVER, cluster_pools_values
from tests.kube.test_cp_cluster_pools import ALL_NODES, PREFIX, assert_denied, cluster_slice
from tests.kube.test_cp_dra import SLICES, a_slice, slice_refused
from tests.kube.test_cp_node_status import (
    TOKEN,
    capacity,
    check_the_account_writes_only_its_nodes_extended_resources,
    patch,
)

RELEASE, NAMESPACE = "tr-chart", "tr-chart"
ACCOUNT = "tr-chart-token-resource"
PUBLISHER = f"{ACCOUNT}-publisher"
# What the tests may create for real: no DaemonSet (its pods would go to other tests' nodes).
ACCOUNT_KINDS = {
    "Namespace",
    "ServiceAccount",
    "ClusterRole",
    "ClusterRoleBinding",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
    "Role",
    "RoleBinding",
}


def rendered(helm: Helm, values: list[Path], *settings: str) -> list[dict[str, Any]]:
    return helm.objects(values, release=RELEASE, namespace=NAMESPACE, settings=settings)


def apply(control_plane: ControlPlane, objects: list[dict[str, Any]], *args: str) -> list[str]:
    printed = control_plane.kubectl("apply", *args, "-f", "-", stdin=yaml.safe_dump_all(objects))
    return printed.splitlines()


def release_notes(helm: Helm, values: list[Path]) -> str:
    """The NOTES that `helm install` of RELEASE with ``values`` prints (a client dry run)."""
    printed = helm.output(
        "install",
        RELEASE,
        str(CHART),
        "--namespace",
        NAMESPACE,
        "--dry-run=client",
        *(f"--values={path}" for path in values),
    )
    return printed.split("NOTES:", 1)[1]


def test_every_example_passes_the_real_api_servers_validation(
    control_plane: ControlPlane, helm: Helm
) -> None:
    namespace = rendered(helm, [], "namespace.create=true")
    apply(control_plane, [item for item in namespace if item["kind"] == "Namespace"])
    for values in [None, *sorted(EXAMPLES.glob("*.yaml"))]:
        objects = rendered(helm, [values] if values else [])
        lines = apply(control_plane, objects, "--dry-run=server")
        assert len(lines) == len(objects), (values, lines)
        assert all(line.endswith("(server dry run)") for line in lines), (values, lines)


def test_helm_installs_against_the_server_and_says_how_to_check(
    control_plane: ControlPlane, helm: Helm, tmp_path: Path
) -> None:
    """`helm install --dry-run=server`: the chart's kubeVersion against the server's, and the
    NOTES an operator reads."""
    kubeconfig = control_plane.admin_kubeconfig(tmp_path / "admin.kubeconfig")
    printed = helm.output(
        "install",
        "tr-notes",
        str(CHART),
        "--namespace",
        NAMESPACE,
        "--create-namespace",
        "--values",
        str(EXAMPLES / "dra.yaml"),
        "--dry-run=server",
        "--kubeconfig",
        str(kubeconfig),
    )
    notes = printed.split("NOTES:", 1)[1]
    for check in (
        "kubectl get resourceslices",
        "kubectl get node NODE -o jsonpath='{.status.allocatable}'",
        f"kubectl -n {NAMESPACE} exec daemonset/tr-notes-token-resource -- token-resource status",
    ):
        assert check in notes, notes


def test_the_charts_admission_policy_holds_its_account_to_its_node(
    control_plane: ControlPlane, helm: Helm
) -> None:
    own, other, driver = "chart-policy-a", "chart-policy-b", "chart.example.com"
    for node in (own, other):
        control_plane.add_node(node)
    objects = rendered(helm, [EXAMPLES / "dra.yaml"], "namespace.create=true")
    apply(control_plane, [item for item in objects if item["kind"] in ACCOUNT_KINDS])
    token = control_plane.service_account_token(NAMESPACE, ACCOUNT, own)
    account = control_plane.client(token=token)

    status, answer = slice_refused(control_plane, account, a_slice(other, driver, "chart-b"))
    assert status == 422, answer
    assert answer["message"].endswith(
        f"denied request: the agent on node {own} may only write the ResourceSlices of its "
        f"own node, not of {other}"
    ), answer
    assert f"'{ACCOUNT}-own-node-slices'" in answer["message"], answer
    status, answer = account.request("POST", SLICES, a_slice(own, driver, "chart-a"))
    assert status == 201, answer
    control_plane.admin.delete(f"{SLICES}/chart-a")


def test_the_charts_node_status_policy_holds_its_account_to_its_nodes_extended_resources(
    control_plane: ControlPlane, helm: Helm, tmp_path: Path
) -> None:
    """The checks of the overlay's policy (test_cp_node_status.py), for the release's account;
    then the NOTES' kubectl lines show the node's tokens."""
    own, other = "chart-status-a", "chart-status-b"
    for node in (own, other):
        control_plane.add_node(node)
    values = [EXAMPLES / "node-status.yaml"]
    objects = rendered(helm, values, "namespace.create=true")
    apply(control_plane, [item for item in objects if item["kind"] in ACCOUNT_KINDS])
    token = control_plane.service_account_token(NAMESPACE, ACCOUNT, own)
    account = control_plane.client(token=token)
    check_the_account_writes_only_its_nodes_extended_resources(
        control_plane, account, own, other, f"{ACCOUNT}-own-node-status"
    )

    assert (
        patch(account, own, [capacity(TOKEN, "2"), capacity(TOKEN, "2", "allocatable")])[0] == 200
    )
    notes = release_notes(helm, values)
    queries = [
        line.split("jsonpath=", 1)[1].strip("'")
        for line in notes.splitlines()
        if "kubectl get node NODE -o jsonpath=" in line
    ]
    shown = [
        control_plane.kubectl("get", "node", own, "-o", f"jsonpath={query}") for query in queries
    ]
    assert shown[1:] == ["2", TOKEN], (queries, shown)
    assert '"example.com/token":"2"' in shown[0], shown


NOTES_DRIVER = "chart-seats.example.com"
LEASE = f"{NOTES_DRIVER}-cluster-pools"


@pytest.fixture
def publishers_writes_removed(control_plane: ControlPlane) -> Iterator[None]:
    """The slices the test writes (its names begin with test_cp_cluster_pools' prefix) and the
    publisher's Lease are gone afterwards."""
    yield
    for item in control_plane.admin.get(SLICES)["items"]:
        if item["metadata"]["name"].startswith(PREFIX):
            control_plane.admin.delete(f"{SLICES}/{item['metadata']['name']}")
    control_plane.admin.delete(
        f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases/{LEASE}"
    )


@pytest.mark.usefixtures("publishers_writes_removed")
def test_the_charts_publisher_policy_holds_its_account_to_its_drivers_cluster_slices(
    control_plane: ControlPlane, helm: Helm, tmp_path: Path
) -> None:
    """The cluster-pools example with a driver of its own: the release's publisher account may
    write a cluster slice of that driver and run for its Lease, not write a node's slice nor
    one of the overlays' driver; then the NOTES' kubectl lines show the Lease and the slice."""
    node = "chart-publisher"
    control_plane.add_node(node)
    values = [cluster_pools_values(tmp_path, NOTES_DRIVER)]
    objects = rendered(helm, values, "namespace.create=true")
    apply(control_plane, [item for item in objects if item["kind"] in ACCOUNT_KINDS])
    token = control_plane.service_account_token(NAMESPACE, PUBLISHER, node)
    publisher = control_plane.client(token=token)
    policy = f"{PUBLISHER}-cluster-slices"

    node_slice = cluster_slice("chart-node", {"nodeName": node}, NOTES_DRIVER)
    assert_denied(
        slice_refused(control_plane, publisher, node_slice),
        policy,
        f"the publisher may only write cluster-wide ResourceSlices, not one of node {node}",
    )
    overlays = cluster_slice("chart-overlays", ALL_NODES, OVERLAYS_DRIVER)
    assert_denied(
        slice_refused(control_plane, publisher, overlays),
        policy,
        f"the publisher may only write the ResourceSlices of driver {NOTES_DRIVER}, not of "
        f"{OVERLAYS_DRIVER}",
    )
    status, stored = publisher.request(
        "POST", SLICES, cluster_slice("chart-all", ALL_NODES, NOTES_DRIVER)
    )
    assert status == 201, stored
    leases = f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases"
    lease = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": LEASE},
        "spec": {"holderIdentity": "chart-publisher-a", "leaseDurationSeconds": 15},
    }
    status, made = publisher.request("POST", leases, lease)
    assert status == 201, made
    status, read = publisher.request("GET", f"{leases}/{LEASE}")
    assert status == 200, read

    notes = release_notes(helm, values)
    (lease_line,) = [line for line in notes.splitlines() if "kubectl get lease" in line]
    shown = control_plane.kubectl(*shlex.split(lease_line)[1:]).splitlines()
    assert [row.split()[:2] for row in shown] == [["NAME", "HOLDER"], [LEASE, "chart-publisher-a"]]
    (slices_line,) = [line for line in notes.splitlines() if "--field-selector" in line]
    rows = control_plane.kubectl(*shlex.split(slices_line)[1:]).splitlines()
    assert rows[0].split() == ["NAME", "POOL", "ALL-NODES", "NODE"], rows
    assert [row.split() for row in rows[1:]] == [
        [f"{PREFIX}chart-all", "example.com/license", "true", "<none>"]
    ], rows
