"""The API server stand-in serves coordination.k8s.io/v1 Leases as a 1.36 server does
(tests/standin/apiserver/leases.py): create, get, list, update with resourceVersion
preconditions, patch, delete, the decoder's MicroTimes, ValidateLease, and who may do what."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.standin.apiserver import MERGE_PATCH, ApiServerStandin, CertificateAuthority
from tests.standin.apiserver.leases import LEASE_RULES, NODE_LEASE_NAMESPACE
from tests.standin.apiserver.microtime import parse_micro_time
from tests.standin.apiserver.test_apiserver_standin import Client, assert_status

NAMESPACE = "token-resource"
NAME = "token-resource-publisher"
ACCOUNT = f"system:serviceaccount:{NAMESPACE}:publisher"
COLLECTION = f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases"
LEASE = f"{COLLECTION}/{NAME}"
NOW = "2026-03-04T05:06:07.123456Z"


def lease(name: str = NAME, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": name},
        "spec": spec,
    }


def held(holder: str = "a", transitions: int = 0) -> dict[str, Any]:
    return lease(
        holderIdentity=holder,
        leaseDurationSeconds=15,
        acquireTime=NOW,
        renewTime=NOW,
        leaseTransitions=transitions,
    )


@pytest.fixture
def apiserver(ca: CertificateAuthority) -> Iterator[ApiServerStandin]:
    standin = ApiServerStandin(ca, tokens={"admin": True, "nobody": False})
    standin.add_token("publisher", user=ACCOUNT, rules=LEASE_RULES)
    with standin:
        yield standin
    while Client.opened:
        Client.opened.pop().close()


@pytest.fixture
def client(apiserver: ApiServerStandin) -> Client:
    return Client(apiserver, token="admin")


def post(client: Client, document: Any, path: str = COLLECTION) -> tuple[int, Any]:
    return client.request("POST", path, json.dumps(document), "application/json")


def put(client: Client, document: Any, path: str = LEASE) -> tuple[int, Any]:
    return client.request("PUT", path, json.dumps(document), "application/json")


def test_a_lease_is_created_read_and_updated_with_its_resource_version(
    apiserver: ApiServerStandin, client: Client
) -> None:
    status, created = post(client, held())
    assert status == 201, created
    metadata = created["metadata"]
    assert (metadata["name"], metadata["namespace"]) == (NAME, NAMESPACE)
    assert metadata["uid"]
    assert metadata["creationTimestamp"]
    assert "generation" not in metadata
    assert created["spec"] == held()["spec"]
    assert client.get(LEASE) == (200, created)
    renewed = {**created, "spec": {**created["spec"], "renewTime": "2026-03-04T05:06:09.000000Z"}}
    status, updated = put(client, renewed)
    assert status == 200, updated
    assert int(updated["metadata"]["resourceVersion"]) > int(metadata["resourceVersion"])
    assert updated["spec"]["renewTime"] == "2026-03-04T05:06:09.000000Z"
    assert apiserver.snapshot().leases[f"{NAMESPACE}/{NAME}"] == updated
    # The same again changes nothing, and keeps the version.
    assert put(client, updated) == (200, updated)
    status, listing = client.get(COLLECTION)
    assert (status, listing["kind"]) == (200, "LeaseList")
    assert [item["metadata"]["name"] for item in listing["items"]] == [NAME]


def test_an_update_with_a_stale_version_is_a_conflict_in_the_real_words(client: Client) -> None:
    _, created = post(client, held("a"))
    _, taken = put(client, {**created, "spec": held("b", 1)["spec"]})
    assert taken["spec"]["holderIdentity"] == "b"
    # "a" renews from what it saw before "b" took the lease: refused, nothing changes.
    body = assert_status(put(client, created), 409, "Conflict")
    assert body["message"] == (
        f'Operation cannot be fulfilled on leases.coordination.k8s.io "{NAME}": the object has '
        "been modified; please apply your changes to the latest version and try again"
    )
    assert body["details"] == {"name": NAME, "group": "coordination.k8s.io", "kind": "leases"}
    assert client.get(LEASE) == (200, taken)


def test_an_update_without_a_version_is_refused(client: Client) -> None:
    """AllowUnconditionalUpdate is false for leases: the version must be given."""
    post(client, held())
    body = assert_status(put(client, held("b")), 422, "Invalid")
    assert body["message"] == (
        f'leases.coordination.k8s.io "{NAME}" is invalid: metadata.resourceVersion: Invalid '
        "value: 0: must be specified for an update"
    )


def test_create_of_an_existing_lease_and_reads_of_a_missing_one(client: Client) -> None:
    assert_status(client.get(LEASE), 404, "NotFound")
    body = assert_status(client.request("DELETE", LEASE), 404, "NotFound")
    assert body["message"] == f'leases.coordination.k8s.io "{NAME}" not found'
    assert_status(client.patch({"spec": {}}, LEASE, MERGE_PATCH), 404, "NotFound")
    assert post(client, held())[0] == 201
    body = assert_status(post(client, held("b")), 409, "AlreadyExists")
    assert body["message"] == f'leases.coordination.k8s.io "{NAME}" already exists'
    assert client.get(LEASE)[1]["spec"]["holderIdentity"] == "a"


def test_a_put_of_a_missing_lease_creates_it(client: Client) -> None:
    """AllowCreateOnUpdate is true for leases."""
    status, created = put(client, held("a"))
    assert status == 201, created
    assert client.get(LEASE) == (200, created)


def test_patch_and_delete(client: Client) -> None:
    _, created = post(client, held("a"))
    status, patched = client.patch({"spec": {"holderIdentity": "b"}}, LEASE, MERGE_PATCH)
    assert status == 200, patched
    assert patched["spec"] == {**created["spec"], "holderIdentity": "b"}
    status, deleted = client.request("DELETE", LEASE)
    assert (status, deleted["status"], deleted["details"]["uid"]) == (
        200,
        "Success",
        created["metadata"]["uid"],
    )
    assert_status(client.get(LEASE), 404, "NotFound")


def test_micro_times_need_six_digits_of_fraction_and_are_stored_in_utc(client: Client) -> None:
    body = assert_status(post(client, lease(renewTime="2026-03-04T05:06:07Z")), 400, "BadRequest")
    assert body["message"] == (
        'Lease in version "v1" cannot be handled as a Lease: parsing time '
        '"2026-03-04T05:06:07Z" as "2006-01-02T15:04:05.000000Z07:00": cannot parse "Z" as '
        '".000000"'
    )
    status, created = post(client, lease(renewTime="2026-03-04T06:06:07.000001+01:00"))
    assert status == 201, created
    assert created["spec"]["renewTime"] == "2026-03-04T05:06:07.000001Z"


@pytest.mark.parametrize(
    ("value", "error"),
    [
        ("2026-03-04T05:06:07.123Z", 'cannot parse ".123Z" as ".000000"'),
        ("2026-03-04T05:06:07.1234567Z", 'cannot parse "7Z" as "Z07:00"'),
        ("2026-13-04T05:06:07.000000Z", "month out of range"),
        ("2026-02-30T05:06:07.000000Z", "day out of range"),
        ("2026-03-04 05:06:07.000000Z", 'cannot parse " 05:06:07.000000Z" as "T"'),
        ("2026-03-04T05:06:07.000000Zjunk", 'extra text: "junk"'),
    ],
)
def test_micro_time_errors_are_go_times(value: str, error: str) -> None:
    with pytest.raises(ValueError, match="parsing time") as caught:
        parse_micro_time(value)
    assert str(caught.value).endswith(error)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (
            {"leaseDurationSeconds": 0},
            "spec.leaseDurationSeconds: Invalid value: 0: must be greater than 0",
        ),
        (
            {"leaseTransitions": -1},
            "spec.leaseTransitions: Invalid value: -1: must be greater than or equal to 0",
        ),
    ],
)
def test_validation(client: Client, spec: dict[str, Any], message: str) -> None:
    body = assert_status(post(client, lease(**spec)), 422, "Invalid")
    assert body["message"] == f'Lease.coordination.k8s.io "{NAME}" is invalid: {message}'


@pytest.mark.parametrize(
    ("document", "words"),
    [
        (lease(leaseDurationSeconds=1.5), "number 1.5 into Go struct field LeaseSpec.spec."),
        (lease(leaseDurationSeconds=2**31), "number 2147483648 into Go struct field LeaseSpec."),
        (lease(leaseDurationSeconds="3"), "string into Go struct field LeaseSpec.spec.lease"),
        # A number where no number goes is named without its text.
        (lease(holderIdentity=3), "number into Go struct field LeaseSpec.spec.holderIdentity "),
        (lease(holderIdentity=True), "bool into Go struct field LeaseSpec.spec.holderIdentity "),
        # MicroTime.UnmarshalJSON reads a string first: the decoder names that type.
        (lease(renewTime=3), "number into Go struct field LeaseSpec.spec.renewTime of type string"),
        (lease(renewTime={}), "object into Go struct field LeaseSpec.spec.renewTime of type s"),
        # A label's wrong value is named by the map's element type.
        (
            {"metadata": {"name": NAME, "labels": {"a": 1}}, "spec": {}},
            "number into Go struct field ObjectMeta.metadata.labels of type string",
        ),
        ({"metadata": {"name": NAME}, "spec": 3}, "number into Go struct field Lease.spec of "),
    ],
)
def test_the_decoder_refuses_fields_of_the_wrong_type_in_its_words(
    client: Client, document: dict[str, Any], words: str
) -> None:
    """The words of the real 1.37 API server for each (tests/kube/test_cp_cluster_publisher.py
    found the stand-in naming numbers and MicroTimes otherwise)."""
    body = assert_status(post(client, document), 400, "BadRequest")
    prefix = 'Lease in version "v1" cannot be handled as a Lease: json: cannot unmarshal '
    assert body["message"].startswith(prefix + words), body["message"]


def test_coordinated_leader_election_fields_are_dropped(client: Client) -> None:
    """The CoordinatedLeaderElection gate is off by default in 1.36."""
    status, created = post(client, lease(holderIdentity="a", strategy="OldestEmulationVersion"))
    assert status == 201, created
    assert created["spec"] == {"holderIdentity": "a"}


def test_rbac_decides_for_tokens(apiserver: ApiServerStandin) -> None:
    body = assert_status(post(Client(apiserver, token="nobody"), held()), 403, "Forbidden")
    assert body["message"] == (
        'leases.coordination.k8s.io is forbidden: User "system:serviceaccount:kube-system:'
        'token-resource" cannot create resource "leases" in API group "coordination.k8s.io" in '
        f'the namespace "{NAMESPACE}"'
    )
    publisher = Client(apiserver, token="publisher")
    _, created = post(publisher, held())
    # LEASE_RULES: get, create, update; not delete.
    assert_status(publisher.request("DELETE", LEASE), 403, "Forbidden")
    assert put(publisher, created)[0] == 200


def test_a_node_may_write_only_its_own_lease_in_kube_node_lease(
    apiserver: ApiServerStandin,
) -> None:
    node = Client(apiserver, certificate=apiserver.ca.node_certificate("node-a"))
    node_leases = f"/apis/coordination.k8s.io/v1/namespaces/{NODE_LEASE_NAMESPACE}/leases"
    assert post(node, lease("node-a", holderIdentity="node-a"), node_leases)[0] == 201
    assert node.get(f"{node_leases}/node-a")[0] == 200
    body = assert_status(post(node, lease("node-b"), node_leases), 403, "Forbidden")
    assert body["message"] == (
        'leases.coordination.k8s.io "node-b" is forbidden: can only access node lease with the '
        "same name as the requesting node"
    )
    body = assert_status(node.get(f"{node_leases}/node-b"), 403, "Forbidden")
    assert body["message"].endswith(
        ": can only access node lease with the same name as the requesting node"
    )
    body = assert_status(post(node, held()), 403, "Forbidden")
    assert body["message"].endswith(
        ': can only access leases in the "kube-node-lease" system namespace'
    )


def test_the_hook_plays_another_writer(apiserver: ApiServerStandin, client: Client) -> None:
    first = apiserver.write_lease(NAMESPACE, NAME, held("elsewhere")["spec"])
    second = apiserver.write_lease(NAMESPACE, NAME, held("elsewhere")["spec"])
    assert int(second["metadata"]["resourceVersion"]) > int(first["metadata"]["resourceVersion"])
    assert client.get(LEASE) == (200, second)
    assert apiserver.lease(NAMESPACE, NAME) == second
