"""What the API server stand-in does for cluster-scoped ResourceSlices (``spec.allNodes``,
``spec.nodeSelector``) as a 1.37 server does: their validation (placement.py), NodeRestriction
and the Node authorizer keeping node identities to their own node's slices, field selectors on
``spec.driver``; and what tests of a leader-elected publisher need of it: the record of who
wrote which pool generation (``ApiServerView.slice_writes``) and clients cut off as by a
network partition (``cut_off``/``reconnect``, partition.py)."""

from __future__ import annotations

import queue
import socket
import threading
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import pytest

from tests.standin.apiserver import (
    DAEMONSET_RULES,
    MERGE_PATCH,
    ApiServerStandin,
    ApiServerView,
    CertificateAuthority,
)
from tests.standin.apiserver.test_apiserver_dra import DRIVER, SLICES, TIMEOUT, Client, a_slice

NODE, OTHER = "node-a", "node-b"
ADMIN, PUBLISHER, SECOND_PUBLISHER = "admin-token", "publisher-token", "second-publisher-token"
PUBLISHER_USER = "system:serviceaccount:kube-system:token-resource-publisher"
OTHER_DRIVER = "other.example.com"
POOL = "cluster"
NODE_USER = f"system:node:{NODE}"
GAVE_UP = 0.5  # how long a cut-off client waits for an answer before it gives up


@pytest.fixture
def apiserver(ca: CertificateAuthority) -> Iterator[ApiServerStandin]:
    standin = ApiServerStandin(ca, nodes=(NODE, OTHER), tokens={ADMIN: True})
    # Two replicas of one publisher: one service account, a token each.
    for token in (PUBLISHER, SECOND_PUBLISHER):
        standin.add_token(token, user=PUBLISHER_USER, rules=DAEMONSET_RULES)
    with standin:
        yield standin


@pytest.fixture
def clients(apiserver: ApiServerStandin) -> Iterator[dict[str, Client]]:
    made = {
        "node": Client(apiserver, apiserver.ca.node_certificate(NODE)),
        "admin": Client(apiserver, token=ADMIN),
        "publisher": Client(apiserver, token=PUBLISHER),
        "second": Client(apiserver, token=SECOND_PUBLISHER),
    }
    yield made
    for client in made.values():
        client.close()


def cluster_slice(
    name: str, generation: int = 0, driver: str = DRIVER, **placement: Any
) -> dict[str, Any]:
    """A slice of the cluster's pool, on every node unless ``placement`` says otherwise."""
    body = a_slice(name=name, count=2, generation=generation)
    del body["spec"]["nodeName"]
    body["spec"]["driver"] = driver
    body["spec"]["pool"]["name"] = POOL
    body["spec"].update(placement or {"allNodes": True})
    return body


def selector(*requirements: dict[str, Any], fields: Any = None) -> dict[str, Any]:
    term: dict[str, Any] = {"matchExpressions": list(requirements)}
    if fields is not None:
        term["matchFields"] = fields
    return {"nodeSelectorTerms": [term]}


def copy_spec(obj: dict[str, Any], **changes: Any) -> dict[str, Any]:
    """``obj`` with those spec fields set, or removed where None."""
    spec = {key: value for key, value in obj["spec"].items() if changes.get(key, 0) is not None}
    spec.update({key: value for key, value in changes.items() if value is not None})
    return {**obj, "spec": spec}


def with_selector(selector_text: str) -> str:
    return f"{SLICES}?fieldSelector=" + quote(selector_text)


def names(answer: dict[str, Any]) -> list[str]:
    return sorted(item["metadata"]["name"] for item in answer["items"])


# --- validation --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "placement",
    [
        {"allNodes": True},
        {"nodeSelector": selector({"key": "tokens", "operator": "In", "values": ["yes"]})},
        {
            "nodeSelector": selector(
                {"key": "example.com/tier", "operator": "Exists"},
                {"key": "cores", "operator": "Gt", "values": ["4"]},
                fields=[{"key": "metadata.name", "operator": "NotIn", "values": [OTHER]}],
            )
        },
    ],
)
def test_a_cluster_scoped_slice_is_stored_as_given(
    clients: dict[str, Client], placement: dict[str, Any]
) -> None:
    status, created = clients["admin"].request("POST", SLICES, cluster_slice("seats", **placement))
    assert status == 201, created
    assert "nodeName" not in created["spec"]
    for key, value in placement.items():
        assert created["spec"][key] == value


def test_per_device_node_selection_places_each_device(clients: dict[str, Client]) -> None:
    body = cluster_slice("per-device", perDeviceNodeSelection=True)
    body["spec"]["devices"][0]["allNodes"] = True
    body["spec"]["devices"][1]["nodeName"] = NODE
    assert clients["admin"].request("POST", SLICES, body)[0] == 201


TWO_TERMS = {"nodeSelectorTerms": [{"matchExpressions": [{"key": "a", "operator": "Exists"}]}, {}]}


@pytest.mark.parametrize(
    ("placement", "errors"),
    [
        (
            {"allNodes": False},
            [
                "spec.allNodes: Invalid value: false: must be either unset or set to true",
                "spec: Required value: exactly one of `nodeName`, `nodeSelector`, `allNodes`, "
                "`perDeviceNodeSelection` is required",
            ],
        ),
        (
            {"allNodes": True, "nodeName": NODE},
            [
                'spec: Invalid value: "{`nodeName`, `allNodes`}": exactly one of `nodeName`, '
                "`nodeSelector`, `allNodes`, `perDeviceNodeSelection` is required, but multiple "
                "fields are set"
            ],
        ),
        (
            {"nodeSelector": TWO_TERMS},
            [
                "spec.nodeSelector.nodeSelectorTerms: Invalid value: "
                '[{"MatchExpressions":[{"Key":"a","Operator":"Exists","Values":null}],'
                '"MatchFields":null},{"MatchExpressions":null,"MatchFields":null}]: '
                "must have exactly one node selector term"
            ],
        ),
        (
            {"nodeSelector": {}},
            [
                "spec.nodeSelector.nodeSelectorTerms: Required value: must have at least one "
                "node selector term",
                "spec.nodeSelector.nodeSelectorTerms: Invalid value: null: must have exactly one "
                "node selector term",
            ],
        ),
        (
            {"nodeSelector": selector({"key": "a", "operator": "Near", "values": ["b"]})},
            [
                "spec.nodeSelector.nodeSelectorTerms[0].matchExpressions[0].operator: "
                'Invalid value: "Near": not a valid selector operator'
            ],
        ),
        (
            {"nodeSelector": selector({"key": "a", "operator": "NotIn"})},
            [
                "spec.nodeSelector.nodeSelectorTerms[0].matchExpressions[0].values: "
                "Required value: must be specified when `operator` is 'In' or 'NotIn'"
            ],
        ),
        (
            {"nodeSelector": selector({"key": "a", "operator": "DoesNotExist", "values": ["b"]})},
            [
                "spec.nodeSelector.nodeSelectorTerms[0].matchExpressions[0].values: "
                "Forbidden: may not be specified when `operator` is 'Exists' or 'DoesNotExist'"
            ],
        ),
        (
            {"nodeSelector": selector({"key": "a", "operator": "Lt", "values": ["1", "2"]})},
            [
                "spec.nodeSelector.nodeSelectorTerms[0].matchExpressions[0].values: "
                "Required value: must be specified single value when `operator` is 'Lt' or 'Gt'"
            ],
        ),
        (
            {"nodeSelector": selector({"key": "a", "operator": "In", "values": ["-b"]})},
            [
                "spec.nodeSelector.nodeSelectorTerms[0].matchExpressions[0].values[0]: "
                'Invalid value: "-b": a valid label must be an empty string or consist of '
                "alphanumeric characters, '-', '_' or '.', and must start and end with an "
                "alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used "
                "for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
            ],
        ),
        (
            {"nodeSelector": selector({"key": "a/b/c", "operator": "Exists"})},
            [
                "spec.nodeSelector.nodeSelectorTerms[0].matchExpressions[0].key: "
                'Invalid value: "a/b/c": a valid label key must consist of alphanumeric '
                "characters, '-', '_' or '.', and must start and end with an alphanumeric "
                "character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for "
                "validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an optional DNS "
                "subdomain prefix and '/' (e.g. 'example.com/MyName')"
            ],
        ),
        (
            {
                "nodeSelector": selector(
                    fields=[{"key": "spec.nodeName", "operator": "In", "values": ["a", "b"]}]
                )
            },
            [
                "spec.nodeSelector.nodeSelectorTerms[0].matchFields[0].values: Required value: "
                "must be only one value when `operator` is 'In' or 'NotIn' for node field "
                "selector",
                "spec.nodeSelector.nodeSelectorTerms[0].matchFields[0].key: Invalid value: "
                '"spec.nodeName": not a valid field selector key',
            ],
        ),
    ],
)
def test_a_bad_placement_is_invalid_in_the_real_words(
    clients: dict[str, Client], placement: dict[str, Any], errors: list[str]
) -> None:
    status, answer = clients["admin"].request("POST", SLICES, cluster_slice("bad", **placement))
    assert (status, answer["reason"]) == (422, "Invalid"), answer
    shown = errors[0] if len(errors) == 1 else f"[{', '.join(errors)}]"
    assert answer["message"] == f'ResourceSlice.resource.k8s.io "bad" is invalid: {shown}'
    assert [f"{c['field']}: {c['message']}" for c in answer["details"]["causes"]] == errors


@pytest.mark.parametrize(
    ("per_device", "device", "error"),
    [
        (
            False,
            {"nodeName": NODE},
            "spec.devices[0]: Invalid value: null: `nodeName`, `nodeSelector` and `allNodes` can "
            "only be set if `perDeviceNodeSelection` is set to true in the ResourceSlice spec",
        ),
        (
            True,
            {},
            "spec.devices[0]: Required value: exactly one of `nodeName`, `nodeSelector`, or "
            "`allNodes` is required when `perDeviceNodeSelection` is set to true in the "
            "ResourceSlice spec",
        ),
        (
            True,
            {"nodeName": ""},
            'spec.devices[0].nodeName: Invalid value: "": must not be empty',
        ),
        (
            True,
            {"nodeSelector": {"nodeSelectorTerms": []}},
            "spec.devices[0].nodeSelector.nodeSelectorTerms: Required value: must have at least "
            "one node selector term",
        ),
    ],
)
def test_a_devices_placement_is_checked_against_the_slices(
    clients: dict[str, Client], per_device: bool, device: dict[str, Any], error: str
) -> None:
    placement: dict[str, Any] = {"perDeviceNodeSelection" if per_device else "allNodes": True}
    body = cluster_slice("bad", **placement)
    body["spec"]["devices"] = [{"name": "seat-0", **device}]
    status, answer = clients["admin"].request("POST", SLICES, body)
    assert status == 422, answer
    causes = [f"{c['field']}: {c['message']}" for c in answer["details"]["causes"]]
    assert error in causes


def test_a_cluster_slice_may_change_its_selector_but_not_become_a_nodes(
    clients: dict[str, Client],
) -> None:
    admin = clients["admin"]
    created = admin.request("POST", SLICES, cluster_slice("seats"))[1]
    narrowed = copy_spec(
        created, allNodes=None, nodeSelector=selector({"key": "a", "operator": "Exists"})
    )
    status, updated = admin.request("PUT", f"{SLICES}/seats", narrowed)
    assert status == 200, updated
    assert updated["metadata"]["generation"] == 2
    assert "allNodes" not in updated["spec"]
    bound = copy_spec(updated, nodeSelector=None, nodeName=NODE)
    status, answer = admin.request("PUT", f"{SLICES}/seats", bound)
    assert status == 422
    assert answer["message"] == (
        'ResourceSlice.resource.k8s.io "seats" is invalid: spec.nodeName: Invalid value: '
        f'"{NODE}": field is immutable'
    )


# --- NodeRestriction and the Node authorizer ---------------------------------------------


@pytest.mark.parametrize(
    "placement",
    [{"allNodes": True}, {"nodeSelector": selector({"key": "a", "operator": "Exists"})}],
)
def test_a_node_may_not_create_a_cluster_scoped_slice(
    clients: dict[str, Client], placement: dict[str, Any]
) -> None:
    status, answer = clients["node"].request("POST", SLICES, cluster_slice("seats", **placement))
    assert (status, answer["reason"]) == (403, "Forbidden"), answer
    assert answer["message"] == (
        'resourceslices.resource.k8s.io "seats" is forbidden: can only create ResourceSlice '
        "with the same NodeName as the requesting node"
    )
    # A service account is held to its RBAC rules (and admission policies) instead.
    assert (
        clients["publisher"].request("POST", SLICES, cluster_slice("seats", **placement))[0] == 201
    )


def test_a_node_may_not_touch_a_cluster_scoped_slice(
    apiserver: ApiServerStandin, clients: dict[str, Client]
) -> None:
    created = clients["publisher"].request("POST", SLICES, cluster_slice("seats"))[1]
    node = clients["node"]
    requests: list[tuple[str, str, Any, str]] = [
        ("GET", "get", None, "application/json"),
        ("PUT", "update", created, "application/json"),
        ("PATCH", "patch", {"metadata": {"labels": {"a": "b"}}}, MERGE_PATCH),
        ("DELETE", "delete", None, "application/json"),
    ]
    for method, verb, body, content_type in requests:
        status, answer = node.request(method, f"{SLICES}/seats", body, content_type)
        assert status == 403, answer
        assert answer["message"] == (
            f'resourceslices.resource.k8s.io "seats" is forbidden: User "{NODE_USER}" cannot '
            f'{verb} resource "resourceslices" in API group "resource.k8s.io" at the cluster '
            f"scope: no relationship found between node '{NODE}' and this object"
        )
    # Its own node's deletecollection never reaches the cluster's slices.
    status, answer = node.request("DELETE", with_selector(f"spec.nodeName={NODE}"))
    assert (status, answer["items"]) == (200, [])
    assert list(apiserver.snapshot().slices) == ["seats"]


# --- field selectors -----------------------------------------------------------------------


def test_slices_are_listed_by_driver_and_by_driver_and_node(clients: dict[str, Client]) -> None:
    admin = clients["admin"]
    admin.request("POST", SLICES, cluster_slice("ours"))
    admin.request("POST", SLICES, cluster_slice("theirs", driver=OTHER_DRIVER))
    admin.request("POST", SLICES, a_slice(name="node-ours"))
    theirs_on_node = a_slice(name="node-theirs")
    theirs_on_node["spec"]["driver"] = OTHER_DRIVER
    admin.request("POST", SLICES, theirs_on_node)
    for text, expected in [
        (f"spec.driver={DRIVER}", ["node-ours", "ours"]),
        (f"spec.driver=={OTHER_DRIVER}", ["node-theirs", "theirs"]),
        (f"spec.driver!={DRIVER}", ["node-theirs", "theirs"]),
        (f"spec.driver={DRIVER},spec.nodeName={NODE}", ["node-ours"]),
        (f"spec.driver={DRIVER},spec.nodeName=", ["ours"]),  # no node: the cluster's
    ]:
        status, answer = admin.request("GET", with_selector(text))
        assert (status, names(answer)) == (200, expected), text
    # A node lists by driver only together with its own node.
    node = clients["node"]
    assert node.request("GET", with_selector(f"spec.driver={DRIVER}"))[0] == 403
    status, answer = node.request(
        "GET", with_selector(f"spec.nodeName={NODE},spec.driver={DRIVER}")
    )
    assert (status, names(answer)) == (200, ["node-ours"])


def test_a_watch_by_driver_sees_that_drivers_slices_only(clients: dict[str, Client]) -> None:
    admin, publisher = clients["admin"], clients["publisher"]
    events: queue.Queue[dict[str, Any]] = queue.Queue()

    def read() -> None:
        query = "fieldSelector=" + quote(f"spec.driver={DRIVER}") + "&timeoutSeconds=5"
        for event in publisher.watch(query):
            events.put(event)

    publisher.request("POST", SLICES, cluster_slice("first"))
    reader = threading.Thread(target=read)
    reader.start()
    assert events.get(timeout=TIMEOUT)["object"]["metadata"]["name"] == "first"
    admin.request("POST", SLICES, cluster_slice("theirs", driver=OTHER_DRIVER))
    admin.request("POST", SLICES, cluster_slice("second"))
    event = events.get(timeout=TIMEOUT)
    assert (event["type"], event["object"]["metadata"]["name"]) == ("ADDED", "second")
    reader.join(TIMEOUT)
    assert events.empty()


# --- the record of writes ------------------------------------------------------------------


def test_every_slice_write_is_recorded_with_its_author_and_pool_generation(
    apiserver: ApiServerStandin, clients: dict[str, Client]
) -> None:
    publisher, second = clients["publisher"], clients["second"]
    created = publisher.request("POST", SLICES, cluster_slice("seats-0", generation=1))[1]
    publisher.request("POST", SLICES, cluster_slice("seats-1", generation=1))
    bumped = {**created, "spec": {**created["spec"], "pool": {**created["spec"]["pool"]}}}
    bumped["spec"]["pool"]["generation"] = 2
    assert second.request("PUT", f"{SLICES}/seats-0", bumped)[0] == 200
    assert second.request("DELETE", f"{SLICES}/seats-1")[0] == 200
    clients["node"].request("POST", SLICES, a_slice(name="node-slice"))
    assert second.request("POST", SLICES, cluster_slice("seats-0"))[0] == 409  # writes nothing
    apiserver.delete_slices(node=NODE)  # a test hook's: no client's write
    writes = apiserver.snapshot().slice_writes()
    assert [(w.author, w.type, w.name, w.pool, w.generation, w.node) for w in writes] == [
        (PUBLISHER_USER, "ADDED", "seats-0", POOL, 1, None),
        (PUBLISHER_USER, "ADDED", "seats-1", POOL, 1, None),
        (PUBLISHER_USER, "MODIFIED", "seats-0", POOL, 2, None),
        (PUBLISHER_USER, "DELETED", "seats-1", POOL, 1, None),
        (NODE_USER, "ADDED", "node-slice", NODE, 0, NODE),
    ]
    assert [w.name for w in apiserver.snapshot().slice_writes(pool=POOL)] == [
        "seats-0",
        "seats-1",
        "seats-0",
        "seats-1",
    ]
    revisions = [w.revision for w in writes]
    assert revisions == sorted(revisions)


def test_a_deletecollection_records_each_slice_it_deleted(
    apiserver: ApiServerStandin, clients: dict[str, Client]
) -> None:
    admin = clients["admin"]
    for name in ("a", "b"):
        admin.request("POST", SLICES, cluster_slice(name, generation=3))
    admin.request("POST", SLICES, cluster_slice("other", driver=OTHER_DRIVER))
    assert admin.request("DELETE", with_selector(f"spec.driver={DRIVER}"))[0] == 200
    deleted = [w for w in apiserver.snapshot().slice_writes(driver=DRIVER) if w.type == "DELETED"]
    assert [(w.author, w.name, w.generation) for w in deleted] == [
        ("system:serviceaccount:kube-system:token-resource", "a", 3),
        ("system:serviceaccount:kube-system:token-resource", "b", 3),
    ]


# --- partitions ----------------------------------------------------------------------------


def held(view: ApiServerView) -> list[str]:
    return [str(request) for request in view.held]


def impatient(apiserver: ApiServerStandin, token: str) -> Client:
    """A client that gives up after GAVE_UP seconds without an answer."""
    client = Client(apiserver, token=token)
    client.connection.timeout = GAVE_UP
    return client


def test_a_cut_off_client_times_out_and_its_request_is_never_served(
    apiserver: ApiServerStandin, clients: dict[str, Client]
) -> None:
    cut = impatient(apiserver, PUBLISHER)
    try:
        assert cut.request("GET", SLICES)[0] == 200  # connected before the cut
        apiserver.cut_off(token=PUBLISHER)
        with pytest.raises(socket.timeout):
            cut.request("POST", SLICES, cluster_slice("seats"))
        assert held(apiserver.snapshot()) == [f"POST {SLICES} [{PUBLISHER_USER}]"]
        # Everyone else is served meanwhile, the same user with another token included.
        assert clients["second"].request("GET", SLICES)[0] == 200
        assert clients["admin"].request("POST", SLICES, cluster_slice("others"))[0] == 201
    finally:
        cut.close()  # the client gives up, as one does after its timeout
    view = apiserver.wait_for(lambda v: not v.held and len(v.dropped) == 1)
    apiserver.reconnect(token=PUBLISHER)
    assert [str(request) for request in view.dropped] == [f"POST {SLICES} [{PUBLISHER_USER}]"]
    again = Client(apiserver, token=PUBLISHER)
    try:
        assert again.request("GET", SLICES)[0] == 200
    finally:
        again.close()
    assert [w.name for w in apiserver.snapshot().slice_writes()] == ["others"]
    assert not [
        r for r in apiserver.requests if r.method == "POST" and r.identity == PUBLISHER_USER
    ]


def test_a_request_still_waiting_when_the_cut_is_lifted_is_served(
    apiserver: ApiServerStandin, clients: dict[str, Client]
) -> None:
    apiserver.cut_off(user=NODE_USER)
    answers: queue.Queue[tuple[int, Any]] = queue.Queue()
    sender = threading.Thread(
        target=lambda: answers.put(clients["node"].request("POST", SLICES, a_slice(name="mine")))
    )
    sender.start()
    apiserver.wait_for(lambda v: held(v) == [f"POST {SLICES} [{NODE_USER}]"])
    assert "mine" not in apiserver.snapshot().slices
    apiserver.reconnect(user=NODE_USER)
    status, created = answers.get(timeout=TIMEOUT)
    sender.join(TIMEOUT)
    assert status == 201, created
    assert [(w.author, w.name) for w in apiserver.snapshot().slice_writes()] == [
        (NODE_USER, "mine")
    ]


def test_a_cut_off_clients_watch_delivers_nothing_until_the_cut_is_lifted(
    apiserver: ApiServerStandin, clients: dict[str, Client]
) -> None:
    admin, watcher = clients["admin"], clients["publisher"]
    admin.request("POST", SLICES, cluster_slice("first"))
    events: queue.Queue[dict[str, Any]] = queue.Queue()

    def read() -> None:
        for event in watcher.watch("timeoutSeconds=10"):
            events.put(event)
            if event["object"]["metadata"]["name"] == "second":
                return

    reader = threading.Thread(target=read)
    reader.start()
    assert events.get(timeout=TIMEOUT)["object"]["metadata"]["name"] == "first"
    apiserver.cut_off(token=PUBLISHER)
    admin.request("POST", SLICES, cluster_slice("second"))
    apiserver.wait_for(
        lambda v: held(v) == [f"GET {SLICES}?watch=true&timeoutSeconds=10 [{PUBLISHER_USER}]"]
    )
    assert events.empty()  # held before it was sent
    apiserver.reconnect()
    event = events.get(timeout=TIMEOUT)
    assert (event["type"], event["object"]["metadata"]["name"]) == ("ADDED", "second")
    reader.join(TIMEOUT)
    assert not reader.is_alive()


def test_stopping_the_server_drops_what_it_holds(
    apiserver: ApiServerStandin, clients: dict[str, Client]
) -> None:
    apiserver.cut_off(token=PUBLISHER)
    failures: queue.Queue[BaseException] = queue.Queue()

    def send() -> None:
        try:
            clients["publisher"].request("POST", SLICES, cluster_slice("seats"))
        except (OSError, ConnectionError) as error:  # the connection closed unanswered
            failures.put(error)

    sender = threading.Thread(target=send)
    sender.start()
    apiserver.wait_for(lambda v: len(v.held) == 1)
    apiserver.stop()
    assert isinstance(failures.get(timeout=TIMEOUT), (OSError, ConnectionError))
    sender.join(TIMEOUT)
    view = apiserver.snapshot()
    assert (view.held, len(view.dropped), dict(view.slices)) == ((), 1, {})


def test_a_cut_needs_someone_to_cut_off(apiserver: ApiServerStandin) -> None:
    with pytest.raises(ValueError, match="name a user or a token"):
        apiserver.cut_off()
