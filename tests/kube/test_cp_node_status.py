"""The node-status overlay (deploy/kubernetes/overlays/node-status) against the real 1.37 API
server (tests/kube/controlplane.py): its RBAC and ValidatingAdmissionPolicy, applied with
kubectl, let the DaemonSet's service account, its token bound to a pod on node a, write exactly
what the agent writes (agent/token_resource/apiserver/node.py: JSON patches of node a's
status.capacity and of its annotation token-resource/extended-resources) and nothing else: no
other Node, no cpu or memory, no label, taint or condition. The agent itself then keeps node
a's capacity with that account. The chart's copy of the policy: test_cp_chart.py."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.harness import AGENT_USER_AGENT, AgentProcess
from tests.kube.client import JSON_PATCH, KubeClient, wait_until
from tests.kube.controlplane import ControlPlane
from tests.kube.test_controlplane import ANNOTATION, node_status_config, shown
from token_resource.apiserver.objects.node import Ownership

ROOT = Path(__file__).resolve().parents[2]
OVERLAY = ROOT / "deploy" / "kubernetes" / "overlays" / "node-status"
NAMESPACE_YAML = ROOT / "deploy" / "kubernetes" / "base" / "namespace" / "namespace.yaml"
BASE_RBAC = ROOT / "deploy" / "kubernetes" / "base" / "agent" / "rbac.yaml"
TOKEN = "example.com/token"
ESCAPED_ANNOTATION = ANNOTATION.replace("/", "~1")


def capacity(name: str, count: str, field: str = "capacity") -> dict[str, str]:
    """The agent's operation: an RFC 6902 "add" of one resource (docs/node-status.md)."""
    return {"op": "add", "path": f"/status/{field}/{name.replace('/', '~1')}", "value": count}


def patch(
    account: KubeClient, node: str, operations: list[dict[str, Any]], status: bool = True
) -> tuple[int, Any]:
    path = f"/api/v1/nodes/{node}" + ("/status" if status else "")
    return account.request("PATCH", path, operations, JSON_PATCH)


def policy_enforced(
    control_plane: ControlPlane, account: KubeClient, node: str, policy: str
) -> None:
    """Wait until the API server applies ``policy`` (once its informer has it and its binding;
    until then RBAC alone lets a write through): a label the account sets meanwhile is taken
    off again by the admin."""

    def refused() -> bool:
        status, answer = patch(
            account, node, [{"op": "add", "path": "/metadata/labels/probe", "value": "x"}], False
        )
        if status == 200:
            control_plane.admin.ok(
                "PATCH",
                f"/api/v1/nodes/{node}",
                [{"op": "remove", "path": "/metadata/labels/probe"}],
                content_type=JSON_PATCH,
            )
            return False
        return status == 422 and f"'{policy}'" in answer["message"]

    wait_until(f"the admission policy {policy} enforced", refused)


def check_the_account_writes_only_its_nodes_extended_resources(
    control_plane: ControlPlane, account: KubeClient, own: str, other: str, policy: str
) -> None:
    """What ``policy`` lets ``account`` (its token bound to a pod on ``own``) do, and refuses:
    each refusal is the policy's (422, its message), each write the agent makes goes through."""
    policy_enforced(control_plane, account, own, policy)
    denied = f"ValidatingAdmissionPolicy '{policy}' with binding '{policy}' denied request: "

    def refused(node: str, operations: list[dict[str, Any]], status: bool, message: str) -> None:
        code, answer = patch(account, node, operations, status)
        assert code == 422, (node, operations, code)
        assert answer["reason"] == "Invalid", answer
        assert answer["message"].endswith(denied + message), answer

    # What the agent writes: capacity added, changed and removed; its annotation.
    for count in ("3", "5"):
        assert patch(account, own, [capacity(TOKEN, count)])[0] == 200
    assert patch(account, own, [capacity(TOKEN, "5", "allocatable")])[0] == 200
    node = control_plane.admin.get(f"/api/v1/nodes/{own}")
    assert (node["status"]["capacity"][TOKEN], node["status"]["allocatable"][TOKEN]) == ("5", "5")
    # The agent's own patch of its list (a "test" op guarding it, as node.Ownership makes it).
    code, answer = patch(account, own, Ownership.of(node).change_to(frozenset({TOKEN})), False)
    assert code == 200, answer.get("message")
    assert answer["metadata"]["annotations"][ANNOTATION] == TOKEN

    refused(
        other,
        [capacity(TOKEN, "3")],
        True,
        f"the agent on node {own} may only change its own Node, not {other}",
    )
    # (Node b has no annotations at all: the whole map.)
    listing = {"op": "add", "path": "/metadata/annotations", "value": {ANNOTATION: TOKEN}}
    refused(
        other,
        [listing],
        False,
        f"the agent on node {own} may only change its own Node, not {other}",
    )
    native = (
        "the agent may only change extended resources (example.com/token), not cpu, memory, "
        "pods, ephemeral-storage, hugepages-* or a kubernetes.io resource"
    )
    for name in ("cpu", "memory", "pods", "example.kubernetes.io/thing", "requests.example.com/x"):
        refused(own, [capacity(name, "64")], True, native)
    refused(own, [capacity("memory", "1Gi", "allocatable")], True, native)
    refused(own, [{"op": "remove", "path": "/status/capacity/cpu"}], True, native)
    refused(
        own,
        [{"op": "add", "path": "/status/conditions/0/status", "value": "False"}],
        True,
        "the agent may only change the Node's status.capacity and status.allocatable",
    )
    label = {"op": "add", "path": "/metadata/labels/example.com~1pool", "value": "large"}
    labels_refused = "the agent may not change a Node's labels, finalizers or owners"
    # Through nodes/status too: the API server keeps a status update's metadata changes.
    for through_status in (False, True):
        refused(own, [label], through_status, labels_refused)
    refused(
        own,
        [{"op": "add", "path": "/spec/unschedulable", "value": True}],
        False,
        "the agent may not change a Node's spec",
    )
    taint = {"key": "example.com/broken", "effect": "NoSchedule"}
    refused(
        own,
        [{"op": "add", "path": "/spec/taints", "value": [taint]}],
        False,
        "the agent may not change a Node's spec",
    )
    annotation = (
        "the agent may only set the annotation token-resource/extended-resources, through nodes"
    )
    other_annotation = {"op": "add", "path": "/metadata/annotations/example.com~1x", "value": "1"}
    refused(own, [other_annotation], False, annotation)
    relisted = {"op": "add", "path": f"/metadata/annotations/{ESCAPED_ANNOTATION}", "value": "x/y"}
    refused(own, [relisted], True, annotation)
    # The agent takes its resource off again: remove ops.
    for field in ("capacity", "allocatable"):
        removed = {"op": "remove", "path": f"/status/{field}/{TOKEN.replace('/', '~1')}"}
        assert patch(account, own, [removed])[0] == 200
    after = control_plane.admin.get(f"/api/v1/nodes/{own}")
    assert TOKEN not in after["status"]["capacity"], after["status"]
    assert after["status"]["capacity"]["cpu"] == "4"
    assert "example.com/pool" not in after["metadata"]["labels"]
    assert not after["spec"].get("taints")
    assert not after["spec"].get("unschedulable")


@pytest.fixture
def agent(tmp_path: Path, device_plugin_dir: Path) -> Iterator[AgentProcess]:
    process = AgentProcess(tmp_path / "agent", device_plugin_dir)
    try:
        yield process
    finally:
        process.kill()


def test_the_overlays_policy_holds_the_daemonsets_account_to_its_nodes_extended_resources(
    control_plane: ControlPlane, agent: AgentProcess, tmp_path: Path
) -> None:
    own, other = "cp-ns-policy-a", "cp-ns-policy-b"
    for node in (own, other):
        control_plane.add_node(node)
    for manifest in (NAMESPACE_YAML, BASE_RBAC, OVERLAY / "rbac.yaml", OVERLAY / "admission.yaml"):
        control_plane.kubectl("apply", "-f", str(manifest))
    token = control_plane.service_account_token("token-resource", "token-resource", own)
    account = control_plane.client(token=token)
    check_the_account_writes_only_its_nodes_extended_resources(
        control_plane, account, own, other, "token-resource-own-node-status"
    )
    # Unbound to a pod, the token names no node.
    unbound = control_plane.admin.create(
        "/api/v1/namespaces/token-resource/serviceaccounts/token-resource/token",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}},
    )["status"]["token"]
    code, answer = patch(control_plane.client(token=unbound), own, [capacity(TOKEN, "1")])
    assert code == 422, answer
    assert answer["message"].endswith(
        "denied request: the agent's token names no node (a token not bound to a pod?)"
    ), answer

    # The agent with that account: its capacity and its list on node a, then both gone again.
    kubeconfig = control_plane.token_kubeconfig(token, tmp_path / "agent.conf")
    agent.write_config(node_status_config(kubeconfig, own, {TOKEN: 2}))
    agent.start()
    nodes = f"/api/v1/nodes/{own}"

    def node_holds(count: str | None) -> Any:
        def probe() -> Any:
            found = control_plane.admin.get(nodes)
            listed = found["metadata"].get("annotations", {}).get(ANNOTATION)
            held = found["status"]["capacity"].get(TOKEN)
            return found if (held, listed) == (count, count and TOKEN) else None

        return wait_until(
            f"node {own} holding {count} {TOKEN}",
            probe,
            show=lambda: shown(control_plane.admin.get(nodes)),
        )

    node_holds("2")
    agent.write_config(node_status_config(kubeconfig, own, {}))
    node_holds(None)
    # The API server's own record names the agent as client-go's clients name themselves.
    # (The test's own client asks with the same token, under another name.)
    asked = control_plane.audit_events("system:serviceaccount:token-resource:token-resource")
    agents = {e["userAgent"] for e in asked if e.get("userAgent", "").startswith("token-resource")}
    assert len(agents) == 1, agents
    assert AGENT_USER_AGENT.fullmatch(agents.pop())
    # Its Node watched, with the base's list and watch of nodes (no periodic read instead).
    assert any(e["verb"] == "watch" and e["objectRef"]["resource"] == "nodes" for e in asked)
    # Neither RBAC's refusal nor the policy's ("... is forbidden: ... denied request: ...").
    log = agent.log()
    assert "forbidden" not in log, log
    assert "cannot watch it" not in log, log
