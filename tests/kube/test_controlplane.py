"""The agent against a real 1.37 control plane: etcd, kube-apiserver (Node,RBAC,
NodeRestriction), kube-scheduler and kube-controller-manager (tests/kube/controlplane.py).
Node-status mode here; DRA mode, the scheduler and the admission policy in test_cp_dra.py."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.test_manifests import DEPLOY, KUSTOMIZATIONS
from tests.harness import AgentProcess
from tests.kube.client import wait_until
from tests.kube.controlplane import ControlPlane
from tests.kube.programs import crd

ANNOTATION = "token-resource/extended-resources"
PROMETHEUS_RULES = "monitoring.coreos.com_prometheusrules.yaml"
MONITORING = DEPLOY / "overlays" / "metrics" / "monitoring"
DONGLE, SEAT, FOREIGN = "example.com/dongle", "example.com/seat", "other.example/thing"


@pytest.fixture
def agent(tmp_path: Path, device_plugin_dir: Path) -> Iterator[AgentProcess]:
    process = AgentProcess(tmp_path / "agent", device_plugin_dir)
    try:
        yield process
    finally:
        process.kill()


def test_identities(control_plane: ControlPlane) -> None:
    """The node identity reads its own Node; a bound service-account token names its node."""
    control_plane.add_node("cp-identities")
    node = control_plane.node_client("cp-identities")
    assert node.get("/api/v1/nodes/cp-identities")["status"]["allocatable"]["pods"] == "110"
    token = control_plane.service_account_token("kube-system", "cp-identities", "cp-identities")
    claims = json.loads(base64.urlsafe_b64decode(token.split(".")[1] + "=="))
    assert claims["kubernetes.io"]["node"]["name"] == "cp-identities"
    status, _ = control_plane.client(token=token).request("GET", "/api/v1/nodes")
    assert status == 403


def node_status_config(kubeconfig: Path, node: str, resources: dict[str, int]) -> str:
    text = f'[kubernetes]\nkubeconfig = "{kubeconfig}"\nnode_name = "{node}"\nresync_seconds = 30\n'
    for name, count in resources.items():
        text += f'[resources."{name}"]\ncount = {count}\nadvertise = "node-status"\n'
    return text


def test_node_status_with_the_nodes_own_identity(
    control_plane: ControlPlane, agent: AgentProcess, tmp_path: Path
) -> None:
    """The agent's JSON patches of its Node, made with the kubelet's identity, are accepted:
    capacity and the annotation listing its resources. A resource taken out of its files goes,
    one it never listed stays; stopping the agent leaves its capacity (docs/node-status.md)."""
    node = "cp-status"
    control_plane.add_node(node)
    nodes = f"/api/v1/nodes/{node}"
    # Another tool's extended resource, which the agent must never touch.
    control_plane.admin.ok(
        "PATCH",
        f"{nodes}/status",
        {"status": {"capacity": {FOREIGN: "2"}}},
        content_type="application/merge-patch+json",
    )
    kubeconfig = control_plane.node_kubeconfig(node, tmp_path / "kubelet.conf")
    agent.write_config(node_status_config(kubeconfig, node, {DONGLE: 4}))
    agent.start()

    def node_with(capacity: dict[str, str], listed: str) -> Any:
        def probe() -> Any:
            found = control_plane.admin.get(nodes)
            have = found["status"]["capacity"]
            annotations = found["metadata"].get("annotations", {})
            matches = all(have.get(k) == v for k, v in capacity.items())
            gone = all(k in capacity for k in (DONGLE, SEAT) if k in have)
            return found if matches and gone and annotations.get(ANNOTATION) == listed else None

        return wait_until(
            f"Node {node} with {capacity}, listing {listed!r}",
            probe,
            show=lambda: shown(control_plane.admin.get(nodes)),
        )

    node_with({DONGLE: "4", FOREIGN: "2"}, DONGLE)
    # The capacity dropped behind its back (as a kubelet has done): the watch of its Node,
    # which the Node authorizer allows by metadata.name, shows it, and the agent puts it back.
    control_plane.admin.ok(
        "PATCH",
        f"{nodes}/status",
        [{"op": "remove", "path": f"/status/capacity/{DONGLE.replace('/', '~1')}"}],
        content_type="application/json-patch+json",
    )
    node_with({DONGLE: "4", FOREIGN: "2"}, DONGLE)
    watched = [
        e
        for e in control_plane.audit_events(f"system:node:{node}")
        if e["verb"] == "watch" and e["objectRef"]["resource"] == "nodes"
    ]
    assert watched, "no watch of the Node"
    assert {e["responseStatus"]["code"] for e in watched} == {200}
    assert f"fieldSelector=metadata.name%3D{node}" in watched[0]["requestURI"]
    assert "cannot watch it" not in agent.log()
    # The dongle leaves the files, a seat comes: the dongle's capacity and name go.
    agent.write_config(node_status_config(kubeconfig, node, {SEAT: 1}))
    found = node_with({SEAT: "1", FOREIGN: "2"}, SEAT)
    assert DONGLE not in found["status"]["capacity"]
    assert found["status"]["allocatable"] == {"cpu": "4", "memory": "8Gi", "pods": "110"}
    assert agent.stop() == 0
    after = control_plane.admin.get(nodes)
    assert after["status"]["capacity"][SEAT] == "1"
    assert after["metadata"]["annotations"][ANNOTATION] == SEAT


def shown(node: Any) -> Any:
    """What a failed wait shows of a Node: its capacity and annotations."""
    return node["status"]["capacity"], node["metadata"].get("annotations")


def test_a_node_identity_may_not_patch_another_nodes_status(control_plane: ControlPlane) -> None:
    """What holds the agent's kubelet credentials to its own Node: NodeRestriction (the Node
    authorizer and RBAC's system:node role let every node patch nodes/status)."""
    control_plane.add_node("cp-status-a")
    control_plane.add_node("cp-status-b")
    node = control_plane.node_client("cp-status-a")
    patch = [{"op": "add", "path": "/status/capacity/example.com~1dongle", "value": "1"}]
    status, answer = node.request(
        "PATCH", "/api/v1/nodes/cp-status-b/status", patch, "application/json-patch+json"
    )
    assert status == 403, answer
    assert answer["message"] == (
        'nodes "cp-status-b" is forbidden: node "cp-status-a" is not allowed to modify node '
        '"cp-status-b"'
    )
    status, answer = node.request(
        "PATCH", "/api/v1/nodes/cp-status-a/status", patch, "application/json-patch+json"
    )
    assert status == 200, answer


def test_every_kustomization_passes_the_real_api_servers_validation(
    control_plane: ControlPlane,
) -> None:
    """Each of deploy/kubernetes's kustomizations, rendered by the real kubectl's kustomize and
    checked by the real API server (a server-side dry run: nothing is created), in the
    namespace it creates. The monitoring kustomization's PrometheusRule against the Prometheus
    Operator's own CRD, installed first as a cluster with the Operator has it."""
    control_plane.kubectl("apply", "-f", str(DEPLOY / "base" / "namespace" / "namespace.yaml"))
    install_prometheus_rules_crd(control_plane)
    for kustomization in KUSTOMIZATIONS:
        printed = control_plane.kubectl(
            "apply", "--dry-run=server", "-k", str(DEPLOY / kustomization)
        )
        lines = printed.splitlines()
        assert lines, kustomization
        assert all(line.endswith("(server dry run)") for line in lines), (kustomization, printed)


def test_the_prometheus_operators_schema_refuses_a_broken_rule(control_plane: ControlPlane) -> None:
    """The CRD the kustomizations are checked against validates a rule, not just its kind: the
    shipped PrometheusRule with a `for:` that is no Prometheus duration is refused."""
    control_plane.kubectl("apply", "-f", str(DEPLOY / "base" / "namespace" / "namespace.yaml"))
    install_prometheus_rules_crd(control_plane)
    rule = yaml.safe_load((MONITORING / "prometheusrule.yaml").read_text())
    rule["spec"]["groups"][0]["rules"][0]["for"] = "five minutes"
    with pytest.raises(AssertionError, match=r"spec\.groups\[0\]\.rules\[0\]\.for"):
        control_plane.kubectl("apply", "--dry-run=server", "-f", "-", stdin=json.dumps(rule))


def install_prometheus_rules_crd(control_plane: ControlPlane) -> None:
    path = str(crd(PROMETHEUS_RULES))
    control_plane.kubectl("apply", "--server-side", "-f", path)
    control_plane.kubectl("wait", "--for=condition=Established", "--timeout=60s", "-f", path)
