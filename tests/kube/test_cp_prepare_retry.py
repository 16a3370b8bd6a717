"""The DRA overlay's second admission policy on the real 1.37 API server: the DaemonSet's
service account may change one annotation (``<driver>/prepare-retry``) of the pods of its own
node, which makes the kubelet retry their prepare at once (apiserver/nudge.py), and nothing
else of any pod."""

from __future__ import annotations

from typing import Any

from tests.kube.client import KubeClient, wait_until
from tests.kube.controlplane import ControlPlane
from tests.kube.test_cp_dra import BASE_RBAC, NAMESPACE_YAML, OVERLAY

RETRY = "tokens.example.com/prepare-retry"
POLICY = (
    "ValidatingAdmissionPolicy 'token-resource-own-node-pod-nudges' with binding "
    "'token-resource-own-node-pod-nudges' denied request: "
)


def pod_on(name: str, node: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"app": "web"}, "annotations": {"note": "kept"}},
        "spec": {
            "nodeName": node,
            "containers": [{"name": "main", "image": "token-resource:test"}],
        },
    }


def merge(client: KubeClient, pod: str, patch: dict[str, Any]) -> tuple[int, Any]:
    return client.request(
        "PATCH",
        f"/api/v1/namespaces/default/pods/{pod}",
        patch,
        content_type="application/merge-patch+json",
    )


def annotation(value: str, key: str = RETRY) -> dict[str, Any]:
    return {"metadata": {"annotations": {key: value}}}


def test_the_agent_may_change_only_the_retry_annotation_of_its_own_nodes_pods(
    control_plane: ControlPlane,
) -> None:
    own, other = "cp-retry-a", "cp-retry-b"
    for node in (own, other):
        control_plane.add_node(node)
    for manifest in (NAMESPACE_YAML, BASE_RBAC, OVERLAY / "rbac.yaml", OVERLAY / "admission.yaml"):
        control_plane.kubectl("apply", "-f", str(manifest))
    for name, node in (("web-a", own), ("web-b", other)):
        control_plane.ensure("/api/v1/namespaces/default/pods", pod_on(name, node))
    agent = control_plane.client(
        token=control_plane.service_account_token("token-resource", "token-resource", own)
    )

    # Until the API server's informer has the new policy, RBAC alone decides: wait for it.
    def refused() -> tuple[int, Any] | None:
        status, answer = merge(agent, "web-b", annotation("2026-12-03T07:00:00Z"))
        return (status, answer) if status != 200 else None

    status, answer = wait_until("the policy refusing node b's pod", refused)
    assert (status, answer["reason"]) == (422, "Invalid"), answer
    assert answer["message"] == (
        'pods "web-b" is forbidden: ' + POLICY + "the agent on node cp-retry-a may only nudge "
        "the pods of its own node, not one on cp-retry-b"
    ), answer

    status, answer = merge(agent, "web-a", annotation("2026-12-03T07:00:01Z"))
    assert status == 200, answer
    changed = control_plane.admin.get("/api/v1/namespaces/default/pods/web-a")["metadata"]
    assert changed["annotations"] == {"note": "kept", RETRY: "2026-12-03T07:00:01Z"}

    only_the_annotation = "the agent may only set annotations ending in /prepare-retry"
    for patch, why in (
        ({"metadata": {"labels": {"app": "other"}}}, "the agent may not change a pod's labels"),
        (annotation("changed", key="note"), only_the_annotation),
        (annotation("added", key="example.com/other"), only_the_annotation),
        ({"metadata": {"annotations": {"note": None}}}, only_the_annotation),
        ({"spec": {"activeDeadlineSeconds": 5}}, "the agent may not change a pod's spec"),
    ):
        status, answer = merge(agent, "web-a", patch)
        assert status == 422, (patch, answer)
        assert answer["message"].endswith(POLICY + why), (patch, answer)
    # Reading, creating or deleting pods: RBAC's 403 before any policy.
    assert agent.request("GET", "/api/v1/namespaces/default/pods/web-a")[0] == 403
    assert agent.request("DELETE", "/api/v1/namespaces/default/pods/web-a")[0] == 403
    assert control_plane.admin.get("/api/v1/namespaces/default/pods/web-a")["metadata"][
        "labels"
    ] == {"app": "web"}
