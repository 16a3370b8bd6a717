"""The API server stand-in serves Pods as a 1.36 server does (tests/standin/apiserver/pods.py):
get, list by node, merge-patch with the pod strategy, the Node authorizer's pod rules, and the
DRA overlay's pod-nudge policy (deploy/kubernetes/overlays/dra/admission.yaml) holding the
agent's token to one annotation on its own node's pods."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.apiserver.test_dra_in_cluster import ACCOUNT, overlay_rules
from tests.standin.apiserver import (
    JSON_PATCH,
    MERGE_PATCH,
    ApiServerStandin,
    CertificateAuthority,
    Rule,
)
from tests.standin.apiserver.admission import policy_documents
from tests.standin.apiserver.test_apiserver_admission import ADMISSION
from tests.standin.apiserver.test_apiserver_standin import Client, assert_status

OWN, OTHER = "node-a", "node-b"
DRIVER = "tokens.example.com"
RETRY = f"{DRIVER}/prepare-retry"
POLICY = "token-resource-own-node-pod-nudges"
# What the nudging agent adds to the overlay's rules.
NUDGE_RULES = (
    Rule(("resource.k8s.io",), ("resourceclaims",), ("get", "list")),
    Rule(("",), ("pods",), ("patch",)),
)


def pod_path(name: str) -> str:
    return f"/api/v1/namespaces/default/pods/{name}"


@pytest.fixture
def apiserver(ca: CertificateAuthority) -> Iterator[ApiServerStandin]:
    standin = ApiServerStandin(ca, nodes=(OWN, OTHER), tokens={"admin": True})
    standin.add_token("agent", user=ACCOUNT, rules=(*overlay_rules(), *NUDGE_RULES), node=OWN)
    standin.apply_admission_policies(policy_documents(ADMISSION))
    with standin:
        for pod, node in (("mine", OWN), ("theirs", OTHER)):
            standin.allocate_claim(
                "default",
                f"{pod}-claim",
                pod=pod,
                node=node,
                driver=DRIVER,
                results=[("tokens", node, "t0")],
            )
        yield standin


def merge(client: Client, name: str, patch: Any) -> tuple[int, Any]:
    """A merge patch, or for a list (of operations) a JSON patch."""
    kind = JSON_PATCH if isinstance(patch, list) else MERGE_PATCH
    return client.patch(json.dumps(patch), pod_path(name), kind)


# A new image: the one spec change a pod update may make (merge patches replace whole lists).
NEW_IMAGE = [{"op": "replace", "path": "/spec/containers/0/image", "value": "other"}]


def nudge(value: str = "2026-01-01T00:00:00Z") -> dict[str, Any]:
    return {"metadata": {"annotations": {RETRY: value}}}


def test_the_agent_nudges_its_own_nodes_pod_and_the_version_moves_not_the_generation(
    apiserver: ApiServerStandin,
) -> None:
    before = apiserver.snapshot().pods["default/mine"]
    agent = Client(apiserver, token="agent")
    status, pod = merge(agent, "mine", nudge())
    assert status == 200, pod
    assert pod["metadata"]["annotations"] == {RETRY: "2026-01-01T00:00:00Z"}
    assert int(pod["metadata"]["resourceVersion"]) > int(before["metadata"]["resourceVersion"])
    assert pod["metadata"]["generation"] == before["metadata"]["generation"] == 1
    assert pod["spec"] == before["spec"]
    status, again = merge(agent, "mine", nudge())  # a no-op keeps the version
    assert (status, again["metadata"]["resourceVersion"]) == (
        200,
        pod["metadata"]["resourceVersion"],
    )
    status, listing = agent.get("/apis/resource.k8s.io/v1/resourceclaims")
    assert status == 200
    assert sorted(c["metadata"]["name"] for c in listing["items"]) == ["mine-claim", "theirs-claim"]


@pytest.mark.parametrize(
    ("name", "patch", "message"),
    [
        (
            "theirs",
            nudge(),
            f"the agent on node {OWN} may only nudge the pods of its own node, not one on {OTHER}",
        ),
        ("mine", {"metadata": {"labels": {"a": "b"}}}, "the agent may not change a pod's labels"),
        (
            "mine",
            {"metadata": {"annotations": {"other": "x"}}},
            "the agent may only set annotations ending in /prepare-retry",
        ),
        (
            "mine",
            {"metadata": {"finalizers": ["x/y"]}},
            "the agent may not change a pod's finalizers",
        ),
        (
            "mine",
            NEW_IMAGE,
            "the agent may not change a pod's spec",
        ),
    ],
)
def test_the_policy_refuses_anything_but_the_nudge_on_its_own_node(
    apiserver: ApiServerStandin, name: str, patch: Any, message: str
) -> None:
    body = assert_status(merge(Client(apiserver, token="agent"), name, patch), 422, "Invalid")
    assert body["message"] == (
        f"pods \"{name}\" is forbidden: ValidatingAdmissionPolicy '{POLICY}' with binding "
        f"'{POLICY}' denied request: {message}"
    )
    # The admin may: the policy holds the agent only.
    assert merge(Client(apiserver, token="admin"), name, patch)[0] == 200


def test_a_spec_change_other_than_an_image_is_invalid(apiserver: ApiServerStandin) -> None:
    admin = Client(apiserver, token="admin")
    body = assert_status(merge(admin, "mine", {"spec": {"nodeName": OTHER}}), 422, "Invalid")
    assert "spec: Forbidden: pod updates may not change fields other than" in body["message"]
    status, pod = merge(admin, "mine", NEW_IMAGE)
    assert (status, pod["metadata"]["generation"]) == (200, 2)
    status, pod = merge(admin, "mine", {"status": {"phase": "Running"}})  # the main resource
    assert (status, pod["status"]["phase"]) == (200, "Pending")


def test_a_node_reads_its_own_pods_and_patches_none(apiserver: ApiServerStandin) -> None:
    node = Client(apiserver, certificate=apiserver.ca.node_certificate(OWN))
    status, listing = node.get(f"/api/v1/pods?fieldSelector=spec.nodeName%3D{OWN}")
    assert status == 200
    assert [p["metadata"]["name"] for p in listing["items"]] == ["mine"]
    assert listing["kind"] == "PodList"
    body = assert_status(node.get("/api/v1/pods"), 403, "Forbidden")
    assert body["message"].endswith("can only list/watch pods with spec.nodeName field selector")
    assert node.get(pod_path("mine"))[0] == 200
    body = assert_status(node.get(pod_path("theirs")), 403, "Forbidden")
    assert body["message"].endswith(f"no relationship found between node '{OWN}' and this object")
    body = assert_status(merge(node, "mine", nudge()), 403, "Forbidden")
    assert body["message"] == (
        f'pods "mine" is forbidden: User "system:node:{OWN}" cannot patch resource "pods" in '
        'API group "" in the namespace "default"'
    )
    assert_status(Client(apiserver, token="agent").get(pod_path("mine")), 403, "Forbidden")
