"""deploy/kubernetes/overlays/node-status, rendered as tests/deploy/test_manifests.py renders every
kustomization: the base's DaemonSet advertising by Node status, its account allowed to patch
Nodes and their status and held by an admission policy to its own Node's extended resources
(the real API server enforcing it: tests/kube/test_cp_node_status.py)."""

from __future__ import annotations

from tests.deploy.test_manifests import (
    ACCOUNT,
    BASE,
    NODE_STATUS_OVERLAY,
    agent_config,
    granted,
    of_kind,
    rendered,
)


def test_the_node_status_overlay_advertises_by_node_status_with_the_bases_daemonset() -> None:
    """Nothing to mount: the agent only talks to the API server, with the pod's account."""
    objects = rendered(NODE_STATUS_OVERLAY)
    [daemon_set] = of_kind(objects, "DaemonSet")
    config = agent_config(objects, daemon_set)
    assert {spec.advertise for spec in config.resources.values()} == {"node-status"}
    assert config.kubernetes.in_cluster
    assert config.manages_node_status
    assert daemon_set == of_kind(rendered(BASE), "DaemonSet")[0]


def test_the_node_status_overlays_rbac_allows_what_the_agent_does_and_no_more() -> None:
    """get, list and watch its Node (the base's), patch it (the annotation listing the agent's
    resources) and its status (the capacity): what docs/node-status.md asks for."""
    objects = rendered(NODE_STATUS_OVERLAY)
    [account] = of_kind(objects, "ServiceAccount")
    assert granted(objects, account) == {
        ("", "nodes"): {"get", "list", "watch", "patch"},
        ("", "nodes/status"): {"patch"},
    }


def test_the_node_status_overlays_policy_holds_the_account_on_every_node_write() -> None:
    objects = rendered(NODE_STATUS_OVERLAY)
    [policy] = of_kind(objects, "ValidatingAdmissionPolicy")
    assert policy["metadata"]["name"] == "token-resource-own-node-status"
    spec = policy["spec"]
    assert spec["failurePolicy"] == "Fail"
    # Both ways the agent writes (PATCH is an UPDATE to admission), for the pods' account.
    assert spec["matchConstraints"]["resourceRules"] == [
        {
            "apiGroups": [""],
            "apiVersions": ["*"],
            "operations": ["UPDATE"],
            "resources": ["nodes", "nodes/status"],
        }
    ]
    [condition] = spec["matchConditions"]
    assert condition["expression"] == f'request.userInfo.username == "{ACCOUNT}"'
    [binding] = of_kind(objects, "ValidatingAdmissionPolicyBinding")
    assert binding["spec"] == {
        "policyName": policy["metadata"]["name"],
        "validationActions": ["Deny"],
    }
