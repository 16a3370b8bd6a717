"""A ResourceSlice's node selector as the real 1.37 API server validates it
(tests/standin/apiserver/placement.py): one term, each expression's values as its operator
wants. The messages are the real server's (asked by tests/kube/test_cp_cluster_publisher.py's
author with the same requests)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.standin.apiserver import ApiServerStandin, CertificateAuthority
from tests.standin.apiserver.test_apiserver_standin import Client

SLICES = "/apis/resource.k8s.io/v1/resourceslices"
TERM = {"matchExpressions": [{"key": "a", "operator": "In", "values": ["x"]}]}


@pytest.fixture
def client(ca: CertificateAuthority) -> Iterator[Client]:
    with ApiServerStandin(ca, tokens={"admin": True}) as standin:
        made = Client(standin, token="admin")
        yield made
        made.close()


def cluster_slice(name: str, terms: list[Any]) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {
            "driver": "d.example.com",
            "pool": {"name": "example.com/license", "generation": 1, "resourceSliceCount": 1},
            "nodeSelector": {"nodeSelectorTerms": terms},
            "devices": [{"name": "token-0"}],
        },
    }


def post(client: Client, body: dict[str, Any]) -> tuple[int, Any]:
    return client.request("POST", SLICES, json.dumps(body), "application/json")


def test_one_term_of_good_expressions_is_accepted(client: Client) -> None:
    exists = {"matchExpressions": [{"key": "a", "operator": "Exists"}]}
    assert post(client, cluster_slice("in", [TERM]))[0] == 201
    assert post(client, cluster_slice("exists", [exists]))[0] == 201


@pytest.mark.parametrize(
    ("terms", "message"),
    [
        (
            [TERM, TERM],
            "spec.nodeSelector.nodeSelectorTerms: Invalid value: "
            '[{"MatchExpressions":[{"Key":"a","Operator":"In","Values":["x"]}],"MatchFields":null},'
            '{"MatchExpressions":[{"Key":"a","Operator":"In","Values":["x"]}],"MatchFields":null}]'
            ": must have exactly one node selector term",
        ),
        (
            [{"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["x"]}]}],
            "spec.nodeSelector.nodeSelectorTerms[0].matchExpressions[0].values: Forbidden: may "
            "not be specified when `operator` is 'Exists' or 'DoesNotExist'",
        ),
        (
            [{"matchExpressions": [{"key": "a", "operator": "In"}]}],
            "spec.nodeSelector.nodeSelectorTerms[0].matchExpressions[0].values: Required value: "
            "must be specified when `operator` is 'In' or 'NotIn'",
        ),
        (
            [],
            "[spec.nodeSelector.nodeSelectorTerms: Required value: must have at least one node "
            "selector term, spec.nodeSelector.nodeSelectorTerms: Invalid value: []: must have "
            "exactly one node selector term]",
        ),
        (
            [
                {"matchExpressions": [{"key": "a", "operator": "Exists"}]},
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n"]}]},
            ],
            "spec.nodeSelector.nodeSelectorTerms: Invalid value: "
            '[{"MatchExpressions":[{"Key":"a","Operator":"Exists","Values":null}],'
            '"MatchFields":null},{"MatchExpressions":null,"MatchFields":[{"Key":"metadata.name",'
            '"Operator":"In","Values":["n"]}]}]: must have exactly one node selector term',
        ),
    ],
)
def test_a_bad_selector_is_refused_in_the_real_words(
    client: Client, terms: list[Any], message: str
) -> None:
    status, body = post(client, cluster_slice("bad", terms))
    assert (status, body["reason"]) == (422, "Invalid"), body
    assert body["message"] == f'ResourceSlice.resource.k8s.io "bad" is invalid: {message}'
