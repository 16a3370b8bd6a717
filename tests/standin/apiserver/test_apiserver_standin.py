"""The API server stand-in answers Node and Node-status requests as the real one does.

The client here is Python's own http.client and ssl: nothing of the agent is involved.
"""

from __future__ import annotations

import base64
import http.client
import json
import socket
import ssl
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, ClassVar

import pytest
import yaml

from tests.standin.apiserver import (
    JSON_PATCH,
    MERGE_PATCH,
    STRATEGIC_MERGE_PATCH,
    ApiServerStandin,
    ApiServerView,
    CertificateAuthority,
    KeyPair,
    canonical_quantity,
    client_context,
)

NODE = "node-a"
OTHER = "node-b"
DONGLE = "example.com/dongle"
DONGLE_PATH = "/status/capacity/example.com~1dongle"
STATUS = f"/api/v1/nodes/{NODE}/status"
GOOD_TOKEN = "good-token"
USELESS_TOKEN = "useless-token"
TIMEOUT = 10.0


@pytest.fixture
def apiserver(ca: CertificateAuthority) -> Iterator[ApiServerStandin]:
    standin = ApiServerStandin(
        ca, nodes=(NODE, OTHER), tokens={GOOD_TOKEN: True, USELESS_TOKEN: False}
    )
    with standin:
        yield standin


class Client:
    """One HTTPS connection (kept alive between requests) with fixed credentials; closed
    at the end of the test (by ``close_clients``) even if the test fails."""

    opened: ClassVar[list[Client]] = []

    def __init__(
        self,
        server: ApiServerStandin,
        *,
        certificate: KeyPair | None = None,
        token: str | None = None,
        context: ssl.SSLContext | None = None,
        host: str = "127.0.0.1",
    ) -> None:
        self.token = token
        self.context = context or client_context(server.ca, certificate)
        self.connection = http.client.HTTPSConnection(
            host, server.port, context=self.context, timeout=TIMEOUT
        )
        Client.opened.append(self)

    def close(self) -> None:
        self.connection.close()

    def request(
        self,
        method: str,
        path: str,
        body: bytes | str | Iterator[bytes] | None = None,
        content_type: str | None = None,
    ) -> tuple[int, Any]:
        headers = {}
        if content_type is not None:
            headers["Content-Type"] = content_type
        if self.token is not None:
            headers["Authorization"] = f"Bearer {self.token}"
        chunked = body is not None and not isinstance(body, (bytes, str))
        self.connection.request(method, path, body, headers, encode_chunked=chunked)
        response = self.connection.getresponse()
        data = response.read()
        assert response.getheader("Content-Type") == "application/json"
        return response.status, json.loads(data)

    def get(self, path: str = STATUS) -> tuple[int, Any]:
        return self.request("GET", path)

    def patch(
        self, operations: Any, path: str = STATUS, content_type: str = JSON_PATCH
    ) -> tuple[int, Any]:
        body = operations if isinstance(operations, (bytes, str)) else json.dumps(operations)
        return self.request("PATCH", path, body, content_type)


@pytest.fixture(autouse=True)
def close_clients() -> Iterator[None]:
    yield
    while Client.opened:
        Client.opened.pop().close()


@pytest.fixture
def node_client(apiserver: ApiServerStandin) -> Client:
    """The kubelet's identity for node-a."""
    return Client(apiserver, certificate=apiserver.ca.node_certificate(NODE))


@pytest.fixture
def admin(apiserver: ApiServerStandin) -> Client:
    """A bearer token allowed on every node."""
    return Client(apiserver, token=GOOD_TOKEN)


def add(value: str, path: str = DONGLE_PATH) -> list[dict[str, str]]:
    return [{"op": "add", "path": path, "value": value}]


def assert_status(answer: tuple[int, Any], code: int, reason: str) -> dict[str, Any]:
    """The answer is a Status object, as the real API server sends for errors."""
    status, body = answer
    assert (status, body["code"], body["reason"]) == (code, code, reason), body
    assert (body["kind"], body["apiVersion"], body["status"]) == ("Status", "v1", "Failure")
    assert body["metadata"] == {}
    assert isinstance(body["message"], str)
    return dict(body)


def has_dongle(count: str) -> Any:
    def predicate(view: ApiServerView) -> bool:
        return view.extended(NODE, "allocatable").get(DONGLE) == count

    return predicate


# --- reading --------------------------------------------------------------------------------


def test_get_node_and_status(node_client: Client) -> None:
    status, node = node_client.get(f"/api/v1/nodes/{NODE}")
    assert status == 200
    assert (node["apiVersion"], node["kind"], node["metadata"]["name"]) == ("v1", "Node", NODE)
    assert node["status"]["capacity"] == {"cpu": "4", "memory": "8Gi", "pods": "110"}
    assert node["status"]["allocatable"] == node["status"]["capacity"]
    # What the agent reads to know whether the kubelet takes two instances of a DRA driver.
    assert node["status"]["nodeInfo"]["kubeletVersion"] == "v1.36.2"
    assert int(node["metadata"]["resourceVersion"]) > 0
    assert node_client.get() == (200, node)


def test_version_needs_no_credentials(apiserver: ApiServerStandin) -> None:
    client = Client(apiserver)
    assert client.get("/version")[1]["major"] == "1"


# --- JSON patch -----------------------------------------------------------------------------


def test_add_replace_remove_with_escaped_name(
    apiserver: ApiServerStandin, node_client: Client
) -> None:
    version = apiserver.snapshot().resource_version(NODE)
    status, node = node_client.patch(add("4"))
    assert status == 200
    assert node["status"]["capacity"][DONGLE] == "4"
    # The kubelet copies it to allocatable at its sync, after the PATCH was answered.
    assert DONGLE not in node["status"]["allocatable"]
    view = apiserver.wait_for(has_dongle("4"), TIMEOUT)
    assert view.extended(NODE) == {DONGLE: "4"}
    assert view.resource_version(NODE) > int(node["metadata"]["resourceVersion"]) > version

    status, node = node_client.patch([{"op": "replace", "path": DONGLE_PATH, "value": "2"}])
    assert (status, node["status"]["capacity"][DONGLE]) == (200, "2")
    apiserver.wait_for(has_dongle("2"), TIMEOUT)

    status, node = node_client.patch([{"op": "remove", "path": DONGLE_PATH}])
    assert status == 200
    assert DONGLE not in node["status"]["capacity"]
    view = apiserver.wait_for(lambda v: not v.extended(NODE, "allocatable"), TIMEOUT)
    assert view.capacity(NODE) == {"cpu": "4", "memory": "8Gi", "pods": "110"}
    # Without the escape the path names a map "example.com" that does not exist.
    answer = node_client.patch(add("4", "/status/capacity/example.com/dongle"))
    assert_status(answer, 422, "Invalid")


def test_test_op_guards_a_patch(node_client: Client, apiserver: ApiServerStandin) -> None:
    version = node_client.get()[1]["metadata"]["resourceVersion"]
    guarded = [{"op": "test", "path": "/metadata/resourceVersion", "value": version}, *add("3")]
    assert node_client.patch(guarded)[0] == 200
    # The same guard again is stale now: the whole patch is refused.
    assert_status(node_client.patch(guarded), 422, "Invalid")
    assert apiserver.snapshot().extended(NODE) == {DONGLE: "3"}


def test_stale_resource_version_in_patch_is_a_conflict(node_client: Client) -> None:
    version = node_client.get()[1]["metadata"]["resourceVersion"]
    node_client.patch(add("1"))
    stale = [{"op": "replace", "path": "/metadata/resourceVersion", "value": version}, *add("2")]
    body = assert_status(node_client.patch(stale), 409, "Conflict")
    assert "the object has been modified" in body["message"]
    fresh = node_client.get()[1]["metadata"]["resourceVersion"]
    current = [{"op": "replace", "path": "/metadata/resourceVersion", "value": fresh}, *add("2")]
    assert node_client.patch(current)[0] == 200


def test_status_patch_ignores_everything_but_status(
    apiserver: ApiServerStandin, node_client: Client
) -> None:
    before = apiserver.node(NODE)
    operations = [
        {"op": "add", "path": "/metadata/labels/sneaky", "value": "yes"},
        {"op": "add", "path": "/spec/unschedulable", "value": True},
        *add("4"),
    ]
    status, node = node_client.patch(operations)
    assert status == 200
    assert "sneaky" not in node["metadata"]["labels"]
    assert node["spec"] == before["spec"] == {}
    assert node["status"]["capacity"][DONGLE] == "4"


def test_patching_the_node_instead_of_its_status_changes_no_capacity(
    apiserver: ApiServerStandin, node_client: Client
) -> None:
    """The real server ignores status in a patch of the main resource: a classic mistake."""
    path = f"/api/v1/nodes/{NODE}"
    operations = [{"op": "add", "path": "/metadata/labels/tokens", "value": "4"}, *add("4")]
    status, node = node_client.patch(operations, path)
    assert status == 200
    assert node["metadata"]["labels"]["tokens"] == "4"
    assert DONGLE not in node["status"]["capacity"]
    assert apiserver.snapshot().extended(NODE) == {}


def test_node_may_annotate_its_own_node(apiserver: ApiServerStandin, node_client: Client) -> None:
    """NodeRestriction leaves a node's own annotations alone: the agent keeps its list there."""
    path = f"/api/v1/nodes/{NODE}"
    operations = [
        {"op": "add", "path": "/metadata/annotations", "value": {"acme/owned": "a,b"}},
        {"op": "add", "path": "/metadata/labels/acme~1plain", "value": "yes"},
        {"op": "add", "path": "/metadata/labels/node.kubernetes.io~1instance-type", "value": "x"},
    ]
    assert node_client.patch(operations, path)[0] == 200
    node = apiserver.node(NODE)
    assert node["metadata"]["annotations"] == {"acme/owned": "a,b"}
    assert node["metadata"]["labels"]["acme/plain"] == "yes"
    removal = [{"op": "remove", "path": "/metadata/annotations/acme~1owned"}]
    assert node_client.patch(removal, path)[0] == 200
    assert apiserver.node(NODE)["metadata"]["annotations"] == {}


@pytest.mark.parametrize(
    ("operation", "reason"),
    [
        (
            {"op": "add", "path": "/metadata/labels/node-role.kubernetes.io~1gpu", "value": ""},
            "is not allowed to modify labels: node-role.kubernetes.io/gpu",
        ),
        (
            {
                "op": "add",
                "path": "/metadata/labels/x.node-restriction.kubernetes.io~1a",
                "value": "",
            },
            "is not allowed to modify labels: x.node-restriction.kubernetes.io/a",
        ),
        (
            {"op": "add", "path": "/metadata/labels/example.k8s.io~1b", "value": "1"},
            "is not allowed to modify labels: example.k8s.io/b",
        ),
        (
            {"op": "remove", "path": "/metadata/labels/kubernetes.io~1os"},
            None,  # a kubelet label: allowed
        ),
        (
            {"op": "add", "path": "/spec/taints", "value": [{"key": "k", "effect": "NoSchedule"}]},
            f'node "{NODE}" is not allowed to modify taints',
        ),
    ],
    ids=["node-role", "node-restriction", "k8s-io", "kubelet-label", "taints"],
)
def test_node_restriction_on_its_own_node(
    apiserver: ApiServerStandin,
    node_client: Client,
    admin: Client,
    operation: dict[str, Any],
    reason: str | None,
) -> None:
    path = f"/api/v1/nodes/{NODE}"
    before = apiserver.node(NODE)
    answer = node_client.patch([operation], path)
    if reason is None:
        assert answer[0] == 200
        return
    body = assert_status(answer, 403, "Forbidden")
    assert body["message"] == f'nodes "{NODE}" is forbidden: {reason}'
    assert apiserver.node(NODE) == before
    # Only nodes are held to it.
    assert admin.patch([operation], path)[0] == 200


def test_quantities_are_stored_canonically_and_validated(node_client: Client) -> None:
    assert node_client.patch(add("1000"))[1]["status"]["capacity"][DONGLE] == "1k"
    assert node_client.patch(add(4))[1]["status"]["capacity"][DONGLE] == "4"  # type: ignore[arg-type]
    for bad, complaint in [
        ("-1", "must be greater than or equal to 0"),
        ("1.5", "must be an integer"),
        ("lots", "quantities must match"),
    ]:
        body = assert_status(node_client.patch(add(bad)), 422, "Invalid")
        assert body["message"].startswith(f'Node "{NODE}" is invalid: status.capacity[{DONGLE}]')
        assert complaint in body["message"]
        assert body["details"]["causes"][0]["field"] == f"status.capacity[{DONGLE}]"
    assert node_client.get()[1]["status"]["capacity"][DONGLE] == "4"


@pytest.mark.parametrize(
    ("given", "stored"),
    [
        ("4", "4"),
        ("04", "4"),
        ("0", "0"),
        ("1000", "1k"),
        ("1500", "1500"),
        ("100000", "100k"),
        ("2000000", "2M"),
        ("8Gi", "8Gi"),
        ("1024Ki", "1Mi"),
        ("1536Ki", "1536Ki"),
        ("1024", "1024"),
        ("0.5", "500m"),
        ("2000m", "2"),
        ("1.5k", "1500"),
        ("1e3", "1e3"),
        (" 7 ", "7"),
        ("seven", None),
        ("", None),
        ("1Z", None),
    ],
)
def test_canonical_quantity(given: str, stored: str | None) -> None:
    assert canonical_quantity(given) == stored


def test_patch_that_changes_nothing_keeps_the_resource_version(
    apiserver: ApiServerStandin, node_client: Client
) -> None:
    node_client.patch(add("4"))
    view = apiserver.wait_for(has_dongle("4"), TIMEOUT)
    status, node = node_client.patch(add("4"))
    assert status == 200
    assert int(node["metadata"]["resourceVersion"]) == view.resource_version(NODE)
    assert apiserver.snapshot().resource_version(NODE) == view.resource_version(NODE)


def test_manual_kubelet_sync(ca: CertificateAuthority) -> None:
    with ApiServerStandin(ca, kubelet_sync=False, tokens={GOOD_TOKEN: True}) as apiserver:
        client = Client(apiserver, token=GOOD_TOKEN)
        assert client.patch(add("4"))[0] == 200
        assert apiserver.snapshot().extended(NODE, "allocatable") == {}
        apiserver.sync()
        assert apiserver.snapshot().extended(NODE, "allocatable") == {DONGLE: "4"}
        client.patch([{"op": "remove", "path": DONGLE_PATH}])
        assert apiserver.snapshot().extended(NODE, "allocatable") == {DONGLE: "4"}
        apiserver.sync(NODE)
        assert apiserver.snapshot().extended(NODE, "allocatable") == {}


def test_chunked_request_body(node_client: Client) -> None:
    chunks = iter([b'[{"op": "add", "path": "', DONGLE_PATH.encode(), b'", "value": "3"}]'])
    status, node = node_client.request("PATCH", STATUS, chunks, JSON_PATCH)
    assert (status, node["status"]["capacity"][DONGLE]) == (200, "3")


# --- merge patches --------------------------------------------------------------------------


def test_merge_patch(apiserver: ApiServerStandin, node_client: Client) -> None:
    patch: dict[str, Any] = {"status": {"capacity": {DONGLE: "4"}}}
    assert node_client.patch(patch, content_type=MERGE_PATCH)[0] == 200
    apiserver.wait_for(has_dongle("4"), TIMEOUT)
    patch = {"status": {"capacity": {DONGLE: None}}}
    assert node_client.patch(patch, content_type=f"{MERGE_PATCH}; charset=utf-8")[0] == 200
    apiserver.wait_for(lambda v: not v.extended(NODE, "allocatable"), TIMEOUT)
    assert_status(node_client.patch("[]", content_type=MERGE_PATCH), 400, "BadRequest")


def test_strategic_merge_patch_of_maps_only(node_client: Client) -> None:
    patch: dict[str, Any] = {"status": {"capacity": {DONGLE: "2"}}}
    answer = node_client.patch(patch, content_type=STRATEGIC_MERGE_PATCH)
    assert answer[1]["status"]["capacity"][DONGLE] == "2"
    patch = {"status": {"conditions": [{"type": "Ready", "status": "True"}]}}
    assert_status(node_client.patch(patch, content_type=STRATEGIC_MERGE_PATCH), 422, "Invalid")


# --- errors ---------------------------------------------------------------------------------


def test_unknown_node_is_404(admin: Client) -> None:
    body = assert_status(admin.get("/api/v1/nodes/nowhere"), 404, "NotFound")
    assert body["details"] == {"name": "nowhere", "kind": "nodes"}
    body = assert_status(admin.patch(add("1"), "/api/v1/nodes/nowhere/status"), 404, "NotFound")
    assert body["message"] == 'nodes "nowhere" not found'
    assert body["details"] == {"name": "nowhere", "kind": "nodes"}


def test_unknown_path_is_404(admin: Client) -> None:
    body = assert_status(admin.get("/api/v1/services"), 404, "NotFound")
    assert body["message"] == "the server could not find the requested resource"


def test_unsupported_method_is_405(admin: Client) -> None:
    assert_status(admin.request("DELETE", STATUS), 405, "MethodNotAllowed")


@pytest.mark.parametrize(
    "operations",
    [
        [{"op": "remove", "path": DONGLE_PATH}],
        [{"op": "replace", "path": DONGLE_PATH, "value": "1"}],
        [{"op": "test", "path": "/status/capacity/cpu", "value": "64"}],
        [{"op": "add", "path": "/status/nowhere/example.com~1dongle", "value": "1"}],
        [{"op": "frobnicate", "path": DONGLE_PATH}],
        [{"path": DONGLE_PATH, "value": "1"}],
        [{"op": "add", "path": DONGLE_PATH}],
        [{"op": "remove", "path": "/status/capacity/cpu"}, {"op": "remove", "path": "/x"}],
    ],
    ids=[
        "remove-missing",
        "replace-missing",
        "failing-test",
        "missing-parent",
        "unknown-op",
        "no-op",
        "no-value",
        "second-op-fails",
    ],
)
def test_patch_that_cannot_apply_is_422(
    apiserver: ApiServerStandin, node_client: Client, operations: list[dict[str, Any]]
) -> None:
    before = apiserver.node(NODE)
    body = assert_status(node_client.patch(operations), 422, "Invalid")
    # The real server's words; what went wrong stays in the request log.
    assert body["message"] == "the server rejected our request due to an error in our request"
    assert apiserver.requests[-1].error
    assert apiserver.node(NODE) == before  # all or nothing


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("not json", None),
        ("", None),
        ("{}", "json: cannot unmarshal object into Go value of type jsonpatch.Patch"),
        ("[1]", "json: cannot unmarshal number into Go value of type jsonpatch.Operation"),
    ],
)
def test_patch_that_is_not_a_json_patch_is_400(
    node_client: Client, body: str, message: str | None
) -> None:
    answer = assert_status(node_client.patch(body), 400, "BadRequest")
    assert message is None or answer["message"] == message


@pytest.mark.parametrize(
    "content_type",
    [None, "application/json", "text/plain", "application/apply-patch+yaml"],
)
def test_unsupported_content_type_is_415(node_client: Client, content_type: str | None) -> None:
    answer = node_client.request("PATCH", STATUS, json.dumps(add("1")), content_type)
    body = assert_status(answer, 415, "UnsupportedMediaType")
    assert body["message"].startswith("the body of the request was in an unknown format")
    assert JSON_PATCH in body["message"]


# --- authentication and authorization -------------------------------------------------------


@pytest.mark.parametrize(
    "token", [None, "wrong-token", ""], ids=["no-credentials", "wrong-token", "empty-token"]
)
def test_unauthenticated_is_401(apiserver: ApiServerStandin, token: str | None) -> None:
    client = Client(apiserver, token=token)
    for answer in [client.get(), client.patch(add("1"))]:
        body = assert_status(answer, 401, "Unauthorized")
        assert body["message"] == "Unauthorized"
    assert apiserver.requests[-1].identity is None
    assert apiserver.snapshot().extended(NODE) == {}


def test_a_removed_token_is_401_from_then_on(apiserver: ApiServerStandin) -> None:
    apiserver.add_token("expiring")
    client = Client(apiserver, token="expiring")
    assert client.get()[0] == 200
    apiserver.remove_token("expiring")
    assert_status(client.get(), 401, "Unauthorized")


def test_each_request_is_logged_with_its_user_agent(apiserver: ApiServerStandin) -> None:
    client = Client(apiserver)
    authorization = {"Authorization": f"Bearer {GOOD_TOKEN}"}
    client.connection.request("GET", STATUS, headers={**authorization, "User-Agent": "kubectl/v1"})
    assert client.connection.getresponse().read()
    client.connection.request("GET", STATUS, headers=authorization)  # http.client adds none
    assert client.connection.getresponse().read()
    assert [request.user_agent for request in apiserver.requests[-2:]] == ["kubectl/v1", None]


def test_basic_auth_is_not_a_token(apiserver: ApiServerStandin) -> None:
    client = Client(apiserver)
    credentials = base64.b64encode(b"admin:" + GOOD_TOKEN.encode()).decode()
    client.connection.request("GET", STATUS, headers={"Authorization": f"Basic {credentials}"})
    assert client.connection.getresponse().status == 401


def test_node_may_only_touch_its_own_node(apiserver: ApiServerStandin, node_client: Client) -> None:
    body = assert_status(
        node_client.patch(add("1"), f"/api/v1/nodes/{OTHER}/status"), 403, "Forbidden"
    )
    assert body["message"] == (
        f'nodes "{OTHER}" is forbidden: node "{NODE}" is not allowed to modify node "{OTHER}"'
    )
    assert body["details"] == {"name": OTHER, "kind": "nodes"}
    body = assert_status(node_client.get(f"/api/v1/nodes/{OTHER}"), 403, "Forbidden")
    assert f'User "system:node:{NODE}" cannot get resource "nodes"' in body["message"]
    # Authorization comes before the lookup: a missing node is no different.
    assert_status(node_client.get("/api/v1/nodes/nowhere"), 403, "Forbidden")
    assert apiserver.snapshot().extended(OTHER) == {}
    assert apiserver.requests[-1].identity == f"system:node:{NODE}"


def test_node_name_alone_is_not_a_node_identity(apiserver: ApiServerStandin) -> None:
    """A certificate needs the system:nodes group too for the Node authorizer."""
    certificate = apiserver.ca.client_certificate(f"system:node:{NODE}")
    client = Client(apiserver, certificate=certificate)
    assert_status(client.patch(add("1")), 403, "Forbidden")


def test_token_without_permission_is_403(apiserver: ApiServerStandin) -> None:
    client = Client(apiserver, token=USELESS_TOKEN)
    body = assert_status(client.patch(add("1")), 403, "Forbidden")
    assert 'cannot patch resource "nodes/status" in API group ""' in body["message"]


def test_allowed_token_and_masters_reach_every_node(apiserver: ApiServerStandin) -> None:
    masters = apiserver.ca.client_certificate("admin", ["system:masters"])
    for client in [Client(apiserver, token=GOOD_TOKEN), Client(apiserver, certificate=masters)]:
        for node in (NODE, OTHER):
            assert client.patch(add("1"), f"/api/v1/nodes/{node}/status")[0] == 200


def test_certificate_wins_over_a_bad_token(apiserver: ApiServerStandin) -> None:
    certificate = apiserver.ca.node_certificate(NODE)
    client = Client(apiserver, certificate=certificate, token="wrong-token")
    assert client.patch(add("1"))[0] == 200
    assert apiserver.requests[-1].identity == f"system:node:{NODE}"


# --- TLS ------------------------------------------------------------------------------------


@pytest.mark.parametrize("trusted", ["system", "other-ca"])
def test_tls_refuses_a_client_that_does_not_trust_the_ca(
    apiserver: ApiServerStandin, trusted: str
) -> None:
    context = client_context(None if trusted == "system" else CertificateAuthority())
    client = Client(apiserver, token=GOOD_TOKEN, context=context)
    with pytest.raises(ssl.SSLCertVerificationError):
        client.get()
    assert apiserver.requests == ()


def test_tls_refuses_a_certificate_from_another_ca(apiserver: ApiServerStandin) -> None:
    stranger = CertificateAuthority().node_certificate(NODE)
    context = client_context(apiserver.ca, stranger)
    client = Client(apiserver, context=context)
    # TLS 1.3 clients learn of it at their first read.
    with pytest.raises((ssl.SSLError, ConnectionError)):
        client.get()
    apiserver.wait_for(lambda view: len(view.tls_failures) == 1, TIMEOUT)
    assert apiserver.requests == ()


def test_connections_are_counted_and_each_request_names_its_own(
    apiserver: ApiServerStandin,
) -> None:
    kept = Client(apiserver, token=GOOD_TOKEN)
    assert [kept.get()[0], kept.get()[0]] == [200, 200]  # keep-alive: one connection
    assert Client(apiserver, token=GOOD_TOKEN).get()[0] == 200
    view = apiserver.snapshot()
    assert view.connections == 2
    assert [request.connection for request in view.requests] == [1, 1, 2]
    # Cut, as an idle connection is: the kept one fails once, a new one is the third.
    apiserver.drop_connections()
    with pytest.raises((http.client.RemoteDisconnected, ConnectionError)):
        kept.get()
    kept.close()
    assert kept.get()[0] == 200
    view = apiserver.snapshot()
    assert (view.connections, view.requests[-1].connection) == (3, 3)


def test_server_certificate_names_localhost(apiserver: ApiServerStandin) -> None:
    client = Client(apiserver, token=GOOD_TOKEN, host="localhost")
    assert client.get()[0] == 200


def test_plain_http_gets_no_answer(apiserver: ApiServerStandin) -> None:
    connection = http.client.HTTPConnection("127.0.0.1", apiserver.port, timeout=TIMEOUT)
    connection.request("GET", STATUS)
    with pytest.raises((http.client.RemoteDisconnected, ConnectionResetError)):
        connection.getresponse()
    connection.close()


# --- test hooks -----------------------------------------------------------------------------


def test_reset_capacity_drops_only_extended_resources(
    apiserver: ApiServerStandin, node_client: Client
) -> None:
    node_client.patch(add("4"))
    view = apiserver.wait_for(has_dongle("4"), TIMEOUT)
    apiserver.reset_capacity(NODE)
    after = apiserver.snapshot()
    assert after.extended(NODE) == after.extended(NODE, "allocatable") == {}
    assert after.capacity(NODE) == {"cpu": "4", "memory": "8Gi", "pods": "110"}
    assert after.resource_version(NODE) > view.resource_version(NODE)
    # The agent's next GET sees it gone, and a patch puts it back.
    assert DONGLE not in node_client.get()[1]["status"]["capacity"]
    node_client.patch(add("4"))
    apiserver.wait_for(has_dongle("4"), TIMEOUT)
    apiserver.reset_capacity(NODE, to_zero=True)
    assert apiserver.snapshot().extended(NODE, "allocatable") == {DONGLE: "0"}


def test_set_capacity_behind_the_agents_back(apiserver: ApiServerStandin) -> None:
    apiserver.set_capacity(NODE, DONGLE, "7")
    assert apiserver.snapshot().extended(NODE, "allocatable") == {DONGLE: "7"}
    apiserver.set_capacity(NODE, DONGLE, None)
    assert apiserver.snapshot().extended(NODE, "allocatable") == {}


def test_add_and_delete_node(apiserver: ApiServerStandin, admin: Client) -> None:
    uid = apiserver.node(NODE)["metadata"]["uid"]
    apiserver.delete_node(NODE)
    assert_status(admin.get(), 404, "NotFound")
    with pytest.raises(KeyError):
        apiserver.node(NODE)
    apiserver.add_node(NODE, {"cpu": "2", DONGLE: "1"})
    status, node = admin.get()
    assert status == 200
    assert node["metadata"]["uid"] != uid
    assert node["status"]["capacity"] == node["status"]["allocatable"] == {"cpu": "2", DONGLE: "1"}


def test_fail_requests(apiserver: ApiServerStandin, node_client: Client) -> None:
    apiserver.fail_requests("PATCH", STATUS)
    body = assert_status(node_client.patch(add("4")), 500, "InternalError")
    assert "etcdserver" in body["message"]
    assert node_client.get()[0] == 200  # other methods and paths are answered
    apiserver.stop_failing()
    assert node_client.patch(add("4"))[0] == 200


def test_port_is_known_before_the_first_start(ca: CertificateAuthority, tmp_path: Path) -> None:
    """An agent can be configured, and fail to connect, before the API server comes up."""
    apiserver = ApiServerStandin(ca, tokens={GOOD_TOKEN: True})
    path = apiserver.write_kubeconfig(tmp_path / "config", token=GOOD_TOKEN)
    server, _, _ = read_kubeconfig(path)
    assert server == apiserver.url != "https://127.0.0.1:0"
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", apiserver.port), timeout=TIMEOUT).close()
    with apiserver:
        assert Client(apiserver, token=GOOD_TOKEN).get()[0] == 200


def test_stop_and_start_on_the_same_port(apiserver: ApiServerStandin, admin: Client) -> None:
    admin.patch(add("4"))
    port = apiserver.port
    apiserver.stop()
    assert not apiserver.running
    # The kept-alive connection is cut, and nobody listens any more.
    with pytest.raises((http.client.RemoteDisconnected, ConnectionError, ssl.SSLError)):
        admin.get()
    admin.close()
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT).close()
    apiserver.stop()  # idempotent
    assert not [t for t in threading.enumerate() if "process_request" in t.name], "left behind"
    apiserver.start()
    assert (apiserver.port, apiserver.snapshot().generation) == (port, 2)
    assert admin.get()[1]["status"]["capacity"][DONGLE] == "4"  # state survives
    with pytest.raises(RuntimeError):
        apiserver.start()


def test_request_log(apiserver: ApiServerStandin, node_client: Client) -> None:
    node_client.patch(add("4"), f"{STATUS}?fieldManager=token-resource")
    request = apiserver.requests[-1]
    assert (request.method, request.path, request.query) == (
        "PATCH",
        STATUS,
        "fieldManager=token-resource",
    )
    assert (request.content_type, request.identity, request.status) == (
        JSON_PATCH,
        f"system:node:{NODE}",
        200,
    )
    assert request.json() == add("4")
    assert request.response["status"]["capacity"][DONGLE] == "4"
    assert apiserver.snapshot().patches(NODE) == [request]
    assert apiserver.snapshot().patches(OTHER) == []


def test_wait_for_wakes_at_a_change_and_reports_when_it_times_out(
    apiserver: ApiServerStandin,
) -> None:
    timer = threading.Timer(0.2, apiserver.set_capacity, (NODE, DONGLE, "5"))
    timer.start()
    try:
        assert apiserver.wait_for(has_dongle("5"), TIMEOUT).extended(NODE) == {DONGLE: "5"}
    finally:
        timer.join()
    with pytest.raises(AssertionError, match=r"still false after 0\.1 s") as failure:
        apiserver.wait_for(lambda view: view.capacity("nowhere") == {}, 0.1)
    assert "example.com/dongle" in str(failure.value)


# --- kubeconfig -----------------------------------------------------------------------------


def read_kubeconfig(path: Path) -> tuple[str, ssl.SSLContext, dict[str, str]]:
    """What a kubeconfig client does: URL, TLS context and headers of the current context."""
    config = yaml.safe_load(path.read_text())
    assert (config["apiVersion"], config["kind"]) == ("v1", "Config")
    context = next(
        c["context"] for c in config["contexts"] if c["name"] == config["current-context"]
    )
    cluster = next(c["cluster"] for c in config["clusters"] if c["name"] == context["cluster"])
    user = next(u["user"] for u in config["users"] if u["name"] == context["user"])

    def pem(entry: Mapping[str, str], key: str) -> bytes | None:
        if f"{key}-data" in entry:
            return base64.b64decode(entry[f"{key}-data"])
        if key in entry:
            return (path.parent / entry[key]).read_bytes()  # relative to the kubeconfig
        return None

    ca_pem = pem(cluster, "certificate-authority")
    assert ca_pem is not None
    tls = ssl.create_default_context(cadata=ca_pem.decode())
    cert_pem, key_pem = pem(user, "client-certificate"), pem(user, "client-key")
    if cert_pem is not None and key_pem is not None:
        if cert_pem == key_pem:  # one file holding both, as kubeadm writes it
            key_pem = b""
        certificate = KeyPair(cert_pem, key_pem)
        chain = path.parent / "read-chain.pem"
        certificate.write(chain)
        tls.load_cert_chain(chain)
        chain.unlink()
    headers = {"Authorization": f"Bearer {user['token']}"} if "token" in user else {}
    return cluster["server"], tls, headers


@pytest.mark.parametrize(
    "form", ["inline", "files", "files-relative", "one-pem-file", "token", "token-files"]
)
def test_kubeconfig(apiserver: ApiServerStandin, tmp_path: Path, form: str) -> None:
    path = tmp_path / "kubelet.conf"
    identity = None if form.startswith("token") else apiserver.ca.node_certificate(NODE)
    apiserver.write_kubeconfig(
        path,
        identity=identity,
        token=GOOD_TOKEN if form.startswith("token") else None,
        inline=form in ("inline", "token"),
        relative_paths=form == "files-relative",
        key_in_cert_file=form == "one-pem-file",
    )
    text = path.read_text()
    assert ("-data:" in text) == (form in ("inline", "token"))
    assert (path.stat().st_mode & 0o777) == 0o600
    server, tls, headers = read_kubeconfig(path)
    assert server == apiserver.url
    connection = http.client.HTTPSConnection("127.0.0.1", apiserver.port, context=tls)
    connection.request("GET", STATUS, headers=headers)
    assert connection.getresponse().status == 200
    connection.close()
    expected = "token-resource" if form.startswith("token") else f"system:node:{NODE}"
    assert apiserver.requests[-1].identity.endswith(expected)  # type: ignore[union-attr]


def test_kubeconfig_token_that_looks_like_a_number_stays_a_string(
    apiserver: ApiServerStandin, tmp_path: Path
) -> None:
    apiserver.add_token("12345")
    path = apiserver.write_kubeconfig(tmp_path / "config", token="12345")
    assert read_kubeconfig(path)[2] == {"Authorization": "Bearer 12345"}


def test_service_account_files(apiserver: ApiServerStandin, tmp_path: Path) -> None:
    environment = apiserver.write_service_account(tmp_path / "sa", GOOD_TOKEN)
    assert environment == {
        "KUBERNETES_SERVICE_HOST": "127.0.0.1",
        "KUBERNETES_SERVICE_PORT": str(apiserver.port),
    }
    assert (tmp_path / "sa" / "token").read_text() == GOOD_TOKEN
    assert (tmp_path / "sa" / "ca.crt").read_bytes() == apiserver.ca.cert_pem
