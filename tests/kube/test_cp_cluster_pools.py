"""The cluster-pools overlay (deploy/kubernetes/overlays/cluster-pools) against the real 1.37
API server (tests/kube/controlplane.py): its RBAC and ValidatingAdmissionPolicy, applied with
kubectl beside the DRA overlay's, let the publisher's service account write exactly what the
publisher writes (its Lease; the driver's cluster-wide ResourceSlices) and refuse it node-bound
slices, other drivers' and other Leases; and the DRA overlay's own-node policy refuses the
DaemonSet's account a cluster slice. The requests are the ones the publisher makes
(apiserver/leader.py, apiserver/publisher.py), made here with its account's token; and the real
publisher, on the overlay's own file, publishes its pool and hands its Lease back with that
account."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.harness import AgentProcess
from tests.kube.client import KubeClient, wait_until
from tests.kube.controlplane import ControlPlane
from tests.kube.test_cp_dra import BASE_RBAC, NAMESPACE_YAML, OVERLAY, SLICES, slice_refused
from token_resource.apiserver.keeping.cluster_slices import lease_name

CLUSTER_POOLS = OVERLAY.parent / "cluster-pools"
NAMESPACE = "token-resource"
PUBLISHER = "token-resource-publisher"
AGENT = "token-resource"
DRIVER = "tokens.example.com"
POLICY = "token-resource-publisher-cluster-slices"
AGENT_POLICY = "token-resource-own-node-slices"
NODE = "cp-pools"
# Every name the test gives a slice or a Lease starts so: the clean-up finds them by it.
PREFIX = "cp-pools-"
LEASES = f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases"
# The publishers' Lease.
LEASE = lease_name(DRIVER)
ALL_NODES: dict[str, Any] = {"allNodes": True}
LICENSED: dict[str, Any] = {
    "nodeSelector": {
        "nodeSelectorTerms": [
            {"matchExpressions": [{"key": "example.com/licensed", "operator": "Exists"}]}
        ]
    }
}


def documents() -> list[dict[str, Any]]:
    """What the test applies: the namespace, the base's and the DRA overlay's RBAC and
    policies, and the publisher's ServiceAccount, RBAC and policy (not its Deployment: its pods
    would go to other tests' nodes)."""
    found: list[dict[str, Any]] = []
    for path in (
        NAMESPACE_YAML,
        BASE_RBAC,
        OVERLAY / "rbac.yaml",
        OVERLAY / "admission.yaml",
        CLUSTER_POOLS / "publisher.yaml",
        CLUSTER_POOLS / "publisher-rbac.yaml",
        CLUSTER_POOLS / "publisher-admission.yaml",
    ):
        found += [item for item in yaml.safe_load_all(path.read_text()) if item]
    return [item for item in found if item["kind"] not in ("Deployment", "PodDisruptionBudget")]


def key(item: dict[str, Any]) -> tuple[str, str, str]:
    metadata = item["metadata"]
    return item["kind"], metadata.get("namespace", ""), metadata["name"]


@pytest.fixture
def applied(control_plane: ControlPlane) -> Iterator[None]:
    """The overlays' objects applied; afterwards everything the test made is gone again: the
    pods its tokens are bound to (at once: no kubelet would confirm a graceful deletion), its
    slices and Leases, its node, and the applied objects that were not there before (other
    tests leave the DRA overlay's), the namespace last."""
    items = documents()
    stream = yaml.safe_dump_all(items)
    listed = control_plane.kubectl(
        "get", "--ignore-not-found", "-o", "json", "-f", "-", stdin=stream
    )
    before = {key(item) for item in yaml.safe_load(listed)["items"]} if listed.strip() else set()
    control_plane.kubectl("apply", "-f", "-", stdin=stream)
    control_plane.add_node(NODE)
    try:
        yield
    finally:
        for account in (PUBLISHER, AGENT):
            control_plane.admin.request(
                "DELETE",
                f"/api/v1/namespaces/{NAMESPACE}/pods/{account}-{NODE}?gracePeriodSeconds=0",
            )
        for item in control_plane.admin.get(SLICES)["items"]:
            # The test's, and the real publisher's pools (the driver's slices of no node).
            spec = item["spec"]
            pool = spec["driver"] == DRIVER and not spec.get("nodeName")
            if item["metadata"]["name"].startswith(PREFIX) or pool:
                control_plane.admin.delete(f"{SLICES}/{item['metadata']['name']}")
        for name in (LEASE, f"{PREFIX}other"):
            control_plane.admin.delete(f"{LEASES}/{name}")
        control_plane.delete_node(NODE)
        created = [item for item in items if key(item) not in before]
        if created:
            # Dependents before what they are in: the namespace, listed first, goes last.
            control_plane.kubectl(
                "delete", "--ignore-not-found", "-f", "-", stdin=yaml.safe_dump_all(created[::-1])
            )


def cluster_slice(name: str, placement: dict[str, Any], driver: str = DRIVER) -> dict[str, Any]:
    """A cluster pool's slice as the publisher writes it: a placement, no nodeName, no owner."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": PREFIX + name},
        "spec": {
            "driver": driver,
            **placement,
            "pool": {"name": "example.com/license", "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": "token-0"}],
        },
    }


def assert_denied(answer: tuple[int, Any], policy: str, message: str) -> None:
    """A policy's Deny: 422 Invalid, with the policy's message."""
    status, body = answer
    assert (status, body["reason"]) == (422, "Invalid"), body
    assert body["message"].endswith(
        f"ValidatingAdmissionPolicy '{policy}' with binding '{policy}' denied request: {message}"
    ), body


def account(control_plane: ControlPlane, name: str) -> KubeClient:
    """``name``'s token, bound to a pod on the test's node (as a pod's own token is)."""
    return control_plane.client(token=control_plane.service_account_token(NAMESPACE, name, NODE))


@pytest.mark.usefixtures("applied")
def test_the_publisher_writes_its_drivers_cluster_slices_and_no_other(
    control_plane: ControlPlane,
) -> None:
    publisher = account(control_plane, PUBLISHER)
    # Bound to a node, as a node's agent would write it: refused (once the policy is in force).
    node_slice = cluster_slice("node", {"nodeName": NODE})
    assert_denied(
        slice_refused(control_plane, publisher, node_slice),
        POLICY,
        f"the publisher may only write cluster-wide ResourceSlices, not one of node {NODE}",
    )
    assert_denied(
        slice_refused(
            control_plane, publisher, cluster_slice("other", ALL_NODES, "other.example.com")
        ),
        POLICY,
        f"the publisher may only write the ResourceSlices of driver {DRIVER}, not of "
        "other.example.com",
    )
    # Its own: created, replaced with a new generation, deleted; for every node or some.
    for name, placement in (("all", ALL_NODES), ("licensed", LICENSED)):
        item = cluster_slice(name, placement)
        path = f"{SLICES}/{item['metadata']['name']}"
        status, stored = publisher.request("POST", SLICES, item)
        assert status == 201, stored
        stored["spec"]["pool"]["generation"] = 2
        status, replaced = publisher.request("PUT", path, stored)
        assert (status, replaced["spec"]["pool"]["generation"]) == (200, 2), replaced
        status, answer = publisher.request("GET", f"{SLICES}?fieldSelector=spec.driver={DRIVER}")
        assert status == 200, answer
        assert publisher.request("DELETE", path)[0] == 200
    # A node's slice the admin made is neither replaced nor deleted by the publisher.
    stored = control_plane.admin.create(SLICES, node_slice)
    path = f"{SLICES}/{PREFIX}node"
    refusal = f"the publisher may only write cluster-wide ResourceSlices, not one of node {NODE}"
    assert_denied(publisher.request("PUT", path, stored), POLICY, refusal)
    assert_denied(publisher.request("DELETE", path), POLICY, refusal)
    # Every claim read; nothing of the nodes (RBAC: 403, not the policy's 422).
    assert publisher.request("GET", "/apis/resource.k8s.io/v1/resourceclaims")[0] == 200
    assert publisher.request("GET", f"/api/v1/nodes/{NODE}")[0] == 403


@pytest.mark.usefixtures("applied")
def test_the_publisher_runs_for_its_lease_and_no_other(control_plane: ControlPlane) -> None:
    """Created, read and replaced with the resourceVersion it read (client-go's leader
    election); another Lease of the namespace is neither read nor replaced, and none of
    another namespace is made (RBAC holds a create to no name: that one it may make)."""
    publisher = account(control_plane, PUBLISHER)
    spec = {"holderIdentity": "publisher-a", "leaseDurationSeconds": 15}
    lease = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "spec": spec}
    status, stored = publisher.request("POST", LEASES, {**lease, "metadata": {"name": LEASE}})
    assert status == 201, stored
    status, read = publisher.request("GET", f"{LEASES}/{LEASE}")
    assert status == 200, read
    read["spec"]["holderIdentity"] = "publisher-b"
    status, replaced = publisher.request("PUT", f"{LEASES}/{LEASE}", read)
    assert (status, replaced["spec"]["holderIdentity"]) == (200, "publisher-b"), replaced
    # A stale resourceVersion: 409, the other candidate's update came first.
    assert publisher.request("PUT", f"{LEASES}/{LEASE}", read)[0] == 409

    other = f"{LEASES}/{PREFIX}other"
    status, made = publisher.request(
        "POST", LEASES, {**lease, "metadata": {"name": f"{PREFIX}other"}}
    )
    assert status == 201, made
    for method, body in (("GET", None), ("PUT", made), ("DELETE", None)):
        status, answer = publisher.request(method, other, body)
        assert status == 403, (method, answer)
    status, answer = publisher.request(
        "POST",
        "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases",
        {**lease, "metadata": {"name": LEASE}},
    )
    assert status == 403, answer


@pytest.mark.usefixtures("applied")
def test_the_daemonsets_account_may_not_write_a_cluster_slice(control_plane: ControlPlane) -> None:
    """The nodes' agents prepare claims from the cluster pools and never write them: the DRA
    overlay's own-node policy refuses a slice that names no node (its message ends in the
    slice's node name, "", and the server trims the space before it)."""
    agent = account(control_plane, AGENT)
    for name, placement in (("agent-all", ALL_NODES), ("agent-licensed", LICENSED)):
        assert_denied(
            slice_refused(control_plane, agent, cluster_slice(name, placement)),
            AGENT_POLICY,
            f"the agent on node {NODE} may only write the ResourceSlices of its own node, not of",
        )


def the_pool(control_plane: ControlPlane) -> list[str] | None:
    """The license pool's devices the publisher wrote (None before it has)."""
    items = control_plane.admin.get(f"{SLICES}?fieldSelector=spec.driver={DRIVER}")["items"]
    names = [
        device["name"]
        for item in items
        if item["spec"].get("allNodes") and item["spec"]["pool"]["name"] == "example.com/license"
        for device in item["spec"]["devices"]
    ]
    return names or None


@pytest.mark.usefixtures("applied")
def test_the_real_publisher_publishes_the_overlays_pool_with_its_account(
    control_plane: ControlPlane, tmp_path: Path
) -> None:
    """`token-resource run --role publisher` on the overlay's token-resource.toml (its account's
    token in a kubeconfig instead of the pod's, its Lease in the namespace of the kubeconfig's
    context, as kubectl's) takes the Lease, writes the 20 seats for every node, and gives the
    Lease up as it stops: nothing it does is refused by the overlay's RBAC or policy."""
    token = control_plane.service_account_token(NAMESPACE, PUBLISHER, NODE)
    kubeconfig = control_plane.write_kubeconfig(
        tmp_path / "publisher.conf", token=token, namespace=NAMESPACE
    )
    shipped = (CLUSTER_POOLS / "token-resource.toml").read_text()
    in_pod = "\nin_cluster = true\n"
    assert shipped.count(in_pod) == 1
    assert "lease_namespace" not in shipped
    config = shipped.replace(in_pod, f'\nkubeconfig = "{kubeconfig}"\n')
    publisher = AgentProcess(tmp_path / "publisher", tmp_path / "unused", role="publisher")
    try:
        publisher.write_config(config)
        publisher.start()
        devices = wait_until("the publisher's license pool", lambda: the_pool(control_plane))
        assert sorted(devices) == sorted(f"token-{index}" for index in range(20))
        lease = control_plane.admin.get(f"{LEASES}/{LEASE}")
        assert lease["spec"]["holderIdentity"], lease
        assert publisher.stop() == 0
    finally:
        publisher.kill()
    # Released on a clean stop: the next candidate takes it over at once.
    assert not control_plane.admin.get(f"{LEASES}/{LEASE}")["spec"].get("holderIdentity")
    log = publisher.log()
    # Neither RBAC's refusal nor the policy's ("... is forbidden: ... denied request: ...").
    assert "forbidden" not in log, log
