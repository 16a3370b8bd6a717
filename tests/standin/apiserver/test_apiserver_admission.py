"""The API server stand-in enforces the ValidatingAdmissionPolicy of the DRA overlay
(deploy/kubernetes/overlays/dra/admission.yaml) as a real 1.37 API server does
(tests/kube/test_cp_dra.py): the DaemonSet's service account, its token bound to a pod on one
node, writes that node's slices only; refusals are 422 Invalid with the policy's message."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.apiserver.test_dra_in_cluster import ACCOUNT, overlay_rules
from tests.standin.apiserver import (
    DAEMONSET_RULES,
    MERGE_PATCH,
    ApiServerStandin,
    CertificateAuthority,
)
from tests.standin.apiserver.admission import (
    AdmissionPolicies,
    UnsupportedPolicy,
    policy_documents,
)
from tests.standin.apiserver.cel import AdmissionRequest, UnsupportedExpression
from tests.standin.apiserver.test_apiserver_dra import SLICES, Client, a_slice
from tests.standin.apiserver.wire import Fail

ADMISSION = Path(__file__).resolve().parents[3] / "deploy/kubernetes/overlays/dra/admission.yaml"
POLICY = "token-resource-own-node-slices"
OWN, OTHER = "node-a", "node-b"
DENIED = (
    f"ValidatingAdmissionPolicy '{POLICY}' with binding '{POLICY}' denied request: the agent on "
    f"node {OWN} may only write the ResourceSlices of its own node, not of "
)


@pytest.fixture
def apiserver(ca: CertificateAuthority) -> Iterator[ApiServerStandin]:
    standin = ApiServerStandin(ca, nodes=(OWN, OTHER), tokens={"admin": True})
    standin.add_token("agent", user=ACCOUNT, rules=overlay_rules(), node=OWN)
    standin.add_token("unbound", user=ACCOUNT, rules=overlay_rules())
    # Another account with the same rules: the policy's matchCondition leaves it alone.
    standin.add_token("other-account", rules=DAEMONSET_RULES, node=OWN)
    standin.apply_admission_policies(policy_documents(ADMISSION))
    with standin:
        yield standin


@pytest.fixture
def clients(apiserver: ApiServerStandin) -> Iterator[dict[str, Client]]:
    made = {
        name: Client(apiserver, token=name)
        for name in ("admin", "agent", "unbound", "other-account")
    }
    made["node-b"] = Client(apiserver, apiserver.ca.node_certificate(OTHER))
    yield made
    for client in made.values():
        client.close()


def refused(status: int, answer: dict[str, Any], name: str, message: str) -> bool:
    """The real refusal: admission.NewForbidden's words with the policy's reason and code."""
    assert answer["details"] == {
        "name": name,
        "group": "resource.k8s.io",
        "kind": "resourceslices",
        "causes": [{"message": message}],
    }, answer
    full = f'resourceslices.resource.k8s.io "{name}" is forbidden: {message}'
    return (status, answer["code"], answer["reason"], answer["message"]) == (
        422,
        422,
        "Invalid",
        full,
    )


def test_the_agent_writes_its_own_nodes_slices(
    apiserver: ApiServerStandin, clients: dict[str, Client]
) -> None:
    agent = clients["agent"]
    status, created = agent.request("POST", SLICES, a_slice(name="mine", node=OWN))
    assert status == 201, created
    created["spec"]["devices"] = created["spec"]["devices"][:1]
    assert agent.request("PUT", f"{SLICES}/mine", created)[0] == 200
    patch = {"metadata": {"labels": {"a": "b"}}}
    assert agent.request("PATCH", f"{SLICES}/mine", patch, MERGE_PATCH)[0] == 200
    assert agent.request("DELETE", f"{SLICES}/mine")[0] == 200
    assert not apiserver.snapshot().slices


def test_the_agent_may_write_no_slice_of_another_node(
    apiserver: ApiServerStandin, clients: dict[str, Client]
) -> None:
    agent, admin = clients["agent"], clients["admin"]
    status, answer = agent.request("POST", SLICES, a_slice(name="b-1", node=OTHER))
    assert refused(status, answer, "b-1", DENIED + OTHER), answer
    # A generated name is in the refusal: admission comes after the name is made.
    status, answer = agent.request("POST", SLICES, a_slice(node=OTHER))
    generated = answer["details"]["name"]
    assert generated.startswith(f"{OTHER}-tokens.example.com-"), answer
    assert refused(status, answer, generated, DENIED + OTHER), answer
    assert not apiserver.snapshot().slices

    # The admin's slice of node b: the agent can neither change nor delete it.
    status, theirs = admin.request("POST", SLICES, a_slice(name="b-2", node=OTHER))
    assert status == 201, theirs
    changed = copy.deepcopy(theirs)
    changed["spec"]["devices"] = []
    status, answer = agent.request("PUT", f"{SLICES}/b-2", changed)
    assert refused(status, answer, "b-2", DENIED + OTHER), answer
    patch = {"metadata": {"labels": {"a": "b"}}}
    status, answer = agent.request("PATCH", f"{SLICES}/b-2", patch, MERGE_PATCH)
    assert refused(status, answer, "b-2", DENIED + OTHER), answer
    status, answer = agent.request("DELETE", f"{SLICES}/b-2")
    assert refused(status, answer, "b-2", DENIED + OTHER), answer
    assert apiserver.snapshot().slices["b-2"]["spec"] == theirs["spec"]


def test_a_slice_for_every_node_is_no_slice_of_its_own_node(clients: dict[str, Client]) -> None:
    body = a_slice(name="everywhere", node=OWN)
    del body["spec"]["nodeName"]
    body["spec"]["allNodes"] = True
    status, answer = clients["agent"].request("POST", SLICES, body)
    # No nodeName: the message ends in "not of ", trimmed as the real server trims it.
    assert refused(status, answer, "everywhere", DENIED.rstrip()), answer


def test_validation_comes_before_the_policy(clients: dict[str, Client]) -> None:
    agent = clients["agent"]
    created = agent.request("POST", SLICES, a_slice(name="mine", node=OWN))[1]
    moved = {**created, "spec": {**created["spec"], "nodeName": OTHER}}
    status, answer = agent.request("PUT", f"{SLICES}/mine", moved)
    assert (status, answer["reason"]) == (422, "Invalid"), answer
    assert answer["message"].endswith(
        f'spec.nodeName: Invalid value: "{OTHER}": field is immutable'
    )


def test_a_token_bound_to_no_pod_names_no_node(clients: dict[str, Client]) -> None:
    status, answer = clients["unbound"].request("POST", SLICES, a_slice(name="a-1", node=OWN))
    # Both validations fail; the first one's message is the refusal.
    message = (
        f"ValidatingAdmissionPolicy '{POLICY}' with binding '{POLICY}' denied request: the "
        "agent's token names no node (a token not bound to a pod?)"
    )
    assert refused(status, answer, "a-1", message), answer


def test_deletecollection_stops_at_the_first_refused_slice(
    apiserver: ApiServerStandin, clients: dict[str, Client]
) -> None:
    for name, node in (("a-1", OWN), ("b-1", OTHER), ("a-2", OWN)):
        assert clients["admin"].request("POST", SLICES, a_slice(name=name, node=node))[0] == 201
    status, answer = clients["agent"].request("DELETE", SLICES)
    # A deletecollection's admission has no name and no object: "Unknown".
    assert refused(status, answer, "Unknown", DENIED + OTHER), answer
    assert sorted(apiserver.snapshot().slices) == ["a-2", "b-1"]


def test_other_users_and_nodes_are_not_held_by_the_policy(
    apiserver: ApiServerStandin, clients: dict[str, Client]
) -> None:
    for client in ("admin", "other-account", "node-b"):
        status, created = clients[client].request("POST", SLICES, a_slice(node=OTHER))
        assert status == 201, (client, created)
        name = created["metadata"]["name"]
        assert clients[client].request("DELETE", f"{SLICES}/{name}")[0] == 200


def test_without_the_policy_rbac_alone_decides(ca: CertificateAuthority) -> None:
    with ApiServerStandin(ca, nodes=(OWN, OTHER)) as standin:
        standin.add_token("agent", user=ACCOUNT, rules=overlay_rules(), node=OWN)
        client = Client(standin, token="agent")
        try:
            assert client.request("POST", SLICES, a_slice(node=OTHER))[0] == 201
        finally:
            client.close()


# --- what the stand-in can evaluate ----------------------------------------------------------


def test_the_shipped_policy_is_one_the_standin_evaluates() -> None:
    """Applying compiles every expression: one the stand-in cannot evaluate fails here."""
    documents = policy_documents(ADMISSION)
    assert [d["kind"] for d in documents] == [
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    ] * 2
    policies = AdmissionPolicies()
    for document in documents:
        policies.apply(document)


def policy(**spec: Any) -> dict[str, Any]:
    rules = [
        {
            "apiGroups": ["resource.k8s.io"],
            "apiVersions": ["*"],
            "operations": ["CREATE"],
            "resources": ["resourceslices"],
        }
    ]
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": "p"},
        "spec": {"matchConstraints": {"resourceRules": rules}, **spec},
    }


@pytest.mark.parametrize(
    "expression",
    [
        "has(object.spec.nodeName)",
        "object.spec.nodeName.size() == 1",
        "object.spec.?nodeName == 'a'",  # an optional, not a string
        "object.metadata.?annotations.orValue({}).all(k, k.endsWith('/x'))",
        "request.userInfo.username.startsWith('system:')",
        "variables.undeclared == ''",
        "'a\\'b' == 'c'",
    ],
)
def test_an_expression_the_standin_cannot_evaluate_is_refused(expression: str) -> None:
    with pytest.raises(UnsupportedExpression):
        AdmissionPolicies().apply(policy(validations=[{"expression": expression}]))


def binding(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": "b"},
        "spec": {"policyName": "p", "validationActions": ["Deny"], **spec},
    }


@pytest.mark.parametrize(
    "document",
    [
        policy(paramKind={"apiVersion": "v1", "kind": "ConfigMap"}),
        policy(auditAnnotations=[{"key": "k", "valueExpression": "'v'"}]),
        binding(validationActions=["Warn"]),
        binding(paramRef={"name": "x"}),
    ],
    ids=["paramKind", "auditAnnotations", "warn", "paramRef"],
)
def test_a_policy_field_the_standin_does_not_model_is_refused(document: dict[str, Any]) -> None:
    policies = AdmissionPolicies()
    policies.apply(policy())
    with pytest.raises(UnsupportedPolicy):
        policies.apply(document)


def creation(username: str) -> AdmissionRequest:
    obj = {"metadata": {"name": "s"}, "spec": {"nodeName": OWN}}
    return AdmissionRequest(
        "CREATE", "resource.k8s.io", "v1", "resourceslices", "", "s", username, {}, obj, None
    )


def test_a_validations_message_falls_back_and_its_reason_sets_the_code() -> None:
    policies = AdmissionPolicies()
    validation = {
        "expression": "request.userInfo.username != 'mallory'",
        "messageExpression": "'  '",  # blank: the message instead
        "message": " no mallory ",
        "reason": "Forbidden",
    }
    policies.apply(policy(validations=[validation, {"expression": "variables.v == 'x'"}],
                          variables=[{"name": "v", "expression": "'y'"}]))  # fmt: skip
    policies.apply(binding())
    with pytest.raises(Fail) as mallory:
        policies.validate(creation("mallory"))
    status = mallory.value.reply.body
    assert (status["code"], status["reason"]) == (403, "Forbidden")
    assert status["message"].endswith("with binding 'b' denied request: no mallory")
    with pytest.raises(Fail) as alice:
        policies.validate(creation("alice"))
    status = alice.value.reply.body
    assert (status["code"], status["reason"]) == (422, "Invalid")
    assert status["message"].endswith("denied request: failed expression: variables.v == 'x'")
