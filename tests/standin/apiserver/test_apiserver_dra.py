"""The API server stand-in serves resource.k8s.io/v1 as a 1.36 server does, with the Node
authorizer's, NodeRestriction's and RBAC's refusals. The client is Python's own http.client."""

from __future__ import annotations

import copy
import datetime
import http.client
import json
import threading
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import pytest

from tests.standin.apiserver import (
    DAEMONSET_RULES,
    EXTENDED_CLAIM_ANNOTATION,
    MERGE_PATCH,
    ApiServerStandin,
    CertificateAuthority,
    KeyPair,
    client_context,
)

NODE, OTHER = "node-a", "node-b"
DRIVER = "tokens.example.com"
SLICES = "/apis/resource.k8s.io/v1/resourceslices"
ADMIN, DAEMONSET, NOTHING = "admin-token", "daemonset-token", "nothing-token"
SA_USER = "system:serviceaccount:kube-system:token-resource"
TIMEOUT = 20.0


@pytest.fixture
def apiserver(ca: CertificateAuthority) -> Iterator[ApiServerStandin]:
    standin = ApiServerStandin(ca, nodes=(NODE, OTHER), tokens={ADMIN: True, NOTHING: False})
    standin.add_token(DAEMONSET, rules=DAEMONSET_RULES, user=SA_USER)
    with standin:
        yield standin


class Client:
    """One HTTPS connection with fixed credentials."""

    def __init__(
        self, server: ApiServerStandin, certificate: KeyPair | None = None, token: str = ""
    ) -> None:
        self.server, self.token = server, token
        self.context = client_context(server.ca, certificate)
        self.connection = self._connect()

    def _connect(self) -> http.client.HTTPSConnection:
        return http.client.HTTPSConnection(
            self.server.host, self.server.port, context=self.context, timeout=TIMEOUT
        )

    def close(self) -> None:
        self.connection.close()

    def request(
        self, method: str, path: str, body: Any = None, content_type: str = "application/json"
    ) -> tuple[int, Any]:
        headers = {"Content-Type": content_type}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        data = None if body is None else json.dumps(body)
        self.connection.request(method, path, data, headers)
        response = self.connection.getresponse()
        return response.status, json.loads(response.read())

    def watch(self, query: str, collection: str = SLICES) -> Iterator[dict[str, Any]]:
        """The events of a watch, read as they come (a connection of its own)."""
        connection = self._connect()
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        try:
            connection.request("GET", f"{collection}?watch=true&{query}", headers=headers)
            response = connection.getresponse()
            assert response.status == 200
            assert response.getheader("Transfer-Encoding") == "chunked"
            while line := response.readline():
                yield json.loads(line)
        finally:
            connection.close()


@pytest.fixture
def clients(apiserver: ApiServerStandin) -> Iterator[dict[str, Client]]:
    made = {
        "node": Client(apiserver, apiserver.ca.node_certificate(NODE)),
        "other": Client(apiserver, apiserver.ca.node_certificate(OTHER)),
        "admin": Client(apiserver, token=ADMIN),
        "daemonset": Client(apiserver, token=DAEMONSET),
        "nothing": Client(apiserver, token=NOTHING),
    }
    yield made
    for client in made.values():
        client.close()


def a_slice(
    name: str = "", node: str = NODE, count: int = 2, generation: int = 0, **spec: Any
) -> dict[str, Any]:
    metadata = {"name": name} if name else {"generateName": f"{node}-{DRIVER}-"}
    body: dict[str, Any] = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": metadata,
        "spec": {
            "driver": DRIVER,
            "nodeName": node,
            "pool": {"name": node, "generation": generation, "resourceSliceCount": 1},
            "devices": [
                {
                    "name": f"token-{i}",
                    "attributes": {
                        "resource": {"string": "example.com/token"},
                        "id": {"int": i},
                    },
                }
                for i in range(count)
            ],
        },
    }
    body["spec"].update(spec)
    return body


def mine(node: str = NODE) -> str:
    return f"{SLICES}?fieldSelector=" + quote(f"spec.nodeName={node}")


def test_a_node_creates_lists_updates_and_deletes_its_slices(clients: dict[str, Client]) -> None:
    node = clients["node"]
    status, created = node.request("POST", SLICES, a_slice())
    assert status == 201, created
    name = created["metadata"]["name"]
    assert name.startswith(f"{NODE}-{DRIVER}-")
    assert len(name) == len(f"{NODE}-{DRIVER}-") + 5
    assert created["metadata"]["generation"] == 1
    assert created["metadata"]["uid"]
    status, listed = node.request("GET", mine())
    assert (status, listed["kind"]) == (200, "ResourceSliceList")
    assert [item["metadata"]["name"] for item in listed["items"]] == [name]
    assert "kind" not in listed["items"][0]
    changed = {**created, "spec": {**created["spec"], "devices": created["spec"]["devices"][:1]}}
    status, updated = node.request("PUT", f"{SLICES}/{name}", changed)
    assert status == 200, updated
    assert updated["metadata"]["generation"] == 2
    assert int(updated["metadata"]["resourceVersion"]) > int(created["metadata"]["resourceVersion"])
    status, stale = node.request("PUT", f"{SLICES}/{name}", changed)  # the old resourceVersion
    assert (status, stale["reason"]) == (409, "Conflict"), stale
    assert "the object has been modified" in stale["message"]
    status, again = node.request("PUT", f"{SLICES}/{name}", updated)  # no change at all
    assert status == 200
    assert again["metadata"]["resourceVersion"] == updated["metadata"]["resourceVersion"]
    status, patched = node.request(
        "PATCH", f"{SLICES}/{name}", {"metadata": {"labels": {"a": "b"}}}, MERGE_PATCH
    )
    assert (status, patched["metadata"]["labels"]) == (200, {"a": "b"}), patched
    status, deleted = node.request("DELETE", f"{SLICES}/{name}")
    assert (status, deleted["status"], deleted["details"]["name"]) == (200, "Success", name)
    assert node.request("GET", mine())[1]["items"] == []


def test_deletecollection_deletes_what_the_selector_matches(
    apiserver: ApiServerStandin, clients: dict[str, Client]
) -> None:
    admin = clients["admin"]
    for node in (NODE, NODE, OTHER):
        assert admin.request("POST", SLICES, a_slice(node=node))[0] == 201
    status, gone = clients["node"].request("DELETE", mine())
    assert (status, len(gone["items"])) == (200, 2)
    view = apiserver.snapshot()
    assert [s["spec"]["nodeName"] for s in view.slices_of()] == [OTHER]
    query = f"{SLICES}?fieldSelector=" + quote(f"spec.driver={DRIVER},spec.nodeName={OTHER}")
    assert len(clients["other"].request("DELETE", query)[1]["items"]) == 1
    status, body = admin.request("GET", f"{SLICES}?fieldSelector=spec.colour%3Dred")
    assert (status, body["message"]) == (400, "field label not supported: spec.colour")


def test_the_node_authorizer_and_noderestriction_refuse_other_nodes_slices(
    clients: dict[str, Client],
) -> None:
    node, other = clients["node"], clients["other"]
    status, body = node.request("POST", SLICES, a_slice(name="theirs", node=OTHER))
    assert status == 403
    assert body["message"] == (
        'resourceslices.resource.k8s.io "theirs" is forbidden: can only create ResourceSlice '
        "with the same NodeName as the requesting node"
    )
    assert other.request("POST", SLICES, a_slice(name="theirs", node=OTHER))[0] == 201
    for method in ("GET", "DELETE"):
        status, body = node.request(method, f"{SLICES}/theirs")
        assert status == 403, body
        verb = method.lower()
        assert body["message"] == (
            f'resourceslices.resource.k8s.io "theirs" is forbidden: User "system:node:{NODE}" '
            f'cannot {verb} resource "resourceslices" in API group "resource.k8s.io" at the '
            f"cluster scope: no relationship found between node '{NODE}' and this object"
        )
    # A slice that does not exist is no different: authorization comes first.
    assert node.request("GET", f"{SLICES}/missing")[0] == 403
    for path in (SLICES, mine(OTHER)):
        status, body = node.request("GET", path)
        assert status == 403
        assert body["message"].endswith(
            "can only list/watch/deletecollection resourceslices with nodeName field selector"
        )
    assert node.request("DELETE", SLICES)[0] == 403


def test_a_slice_cannot_move_to_another_node(clients: dict[str, Client]) -> None:
    node = clients["node"]
    created = node.request("POST", SLICES, a_slice(name="mine"))[1]
    moved = {**created, "spec": {**created["spec"], "nodeName": OTHER}}
    status, body = node.request("PUT", f"{SLICES}/mine", moved)
    assert (status, body["reason"]) == (422, "Invalid"), body
    causes = {cause["field"]: cause["message"] for cause in body["details"]["causes"]}
    assert causes == {"spec.nodeName": f'Invalid value: "{OTHER}": field is immutable'}


@pytest.mark.parametrize(
    ("spec", "field", "message"),
    [
        ({"driver": "Not_A_Domain!"}, "spec.driver", "a lowercase RFC 1123 subdomain"),
        ({"driver": "a" * 64}, "spec.driver", "Too long: may not be more than 63 bytes"),
        ({"pool": {"name": "", "resourceSliceCount": 1}}, "spec.pool.name", "Required value"),
        ({"pool": {"name": "a/B", "resourceSliceCount": 1}}, "spec.pool.name", "subdomain"),
        (
            {"pool": {"name": "p", "resourceSliceCount": 0}},
            "spec.pool.resourceSliceCount",
            "Invalid value: 0: must be greater than zero",
        ),
        (
            {"pool": {"name": "p", "generation": -1, "resourceSliceCount": 1}},
            "spec.pool.generation",
            "Invalid value: -1: must be greater than or equal to zero",
        ),
        ({"allNodes": True}, "spec", "but multiple fields are set"),
        ({"devices": [{"name": "Token_0"}]}, "spec.devices[0].name", "RFC 1123 label"),
        (
            {"devices": [{"name": "t"}, {"name": "t"}]},
            "spec.devices[1]",
            'Duplicate value: "t"',
        ),
        (
            {"devices": [{"name": f"t{i}"} for i in range(129)]},
            "spec.devices",
            "Too many: 129: must have at most 128 items",
        ),
        (
            {"devices": [{"name": "t", "attributes": {f"a{i}": {"int": i} for i in range(33)}}]},
            "spec.devices[0]",
            "the total number of attributes and capacities must not exceed 32",
        ),
        (
            {"devices": [{"name": "t", "attributes": {"a": {"int": 1, "bool": True}}}]},
            "spec.devices[0].attributes[a]",
            "exactly one value must be specified",
        ),
        (
            {"devices": [{"name": "t", "attributes": {"9lives": {"int": 1}}}]},
            "spec.devices[0].attributes[9lives]",
            "a valid C identifier",
        ),
        (
            {"devices": [{"name": "t", "attributes": {"v": {"version": "1.0"}}}]},
            "spec.devices[0].attributes[v].version",
            "semver.org spec 2.0.0",
        ),
    ],
)
def test_slice_validation_has_the_real_field_paths(
    clients: dict[str, Client], spec: dict[str, Any], field: str, message: str
) -> None:
    status, body = clients["node"].request("POST", SLICES, a_slice(name="bad", **spec))
    assert (status, body["reason"]) == (422, "Invalid"), body
    assert body["message"].startswith('ResourceSlice.resource.k8s.io "bad" is invalid: ')
    causes = [c for c in body["details"]["causes"] if c["field"] == field]
    assert causes, body["details"]["causes"]
    assert message in causes[0]["message"]


def test_exactly_one_placement_is_required(clients: dict[str, Client]) -> None:
    body = a_slice(name="nowhere")
    del body["spec"]["nodeName"]
    status, answer = clients["admin"].request("POST", SLICES, body)
    assert status == 422
    assert answer["details"]["causes"] == [
        {
            "reason": "FieldValueRequired",
            "message": "Required value: exactly one of `nodeName`, `nodeSelector`, "
            "`allNodes`, `perDeviceNodeSelection` is required",
            "field": "spec",
        }
    ]


def test_watch_sends_events_in_order_and_ends_at_its_timeout(
    apiserver: ApiServerStandin, clients: dict[str, Client]
) -> None:
    node = clients["node"]
    first = node.request("POST", SLICES, a_slice(name="one"))[1]
    events: list[dict[str, Any]] = []
    started = threading.Event()

    def read() -> None:
        query = "fieldSelector=" + quote(f"spec.nodeName={NODE}") + "&timeoutSeconds=5"
        for event in node.watch(query):
            events.append(event)
            started.set()

    reader = threading.Thread(target=read)
    reader.start()
    assert started.wait(TIMEOUT)  # the initial ADDED of "one"
    node.request("POST", SLICES, a_slice(name="two"))
    clients["other"].request("POST", SLICES, a_slice(name="elsewhere", node=OTHER))
    apiserver.delete_slices(node=NODE)
    reader.join(TIMEOUT)  # ends by itself at timeoutSeconds
    assert not reader.is_alive()
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [
        ("ADDED", "one"),
        ("ADDED", "two"),
        ("DELETED", "one"),
        ("DELETED", "two"),
    ]
    revisions = [int(e["object"]["metadata"]["resourceVersion"]) for e in events]
    assert revisions == sorted(revisions)
    assert revisions[0] == int(first["metadata"]["resourceVersion"])


def test_watch_from_a_compacted_version_is_410_expired(
    apiserver: ApiServerStandin, clients: dict[str, Client]
) -> None:
    old = clients["admin"].request("POST", SLICES, a_slice(name="one"))[1]
    clients["admin"].request("DELETE", f"{SLICES}/one")
    apiserver.compact()
    rv = old["metadata"]["resourceVersion"]
    events = list(clients["admin"].watch(f"resourceVersion={rv}&timeoutSeconds=5"))
    assert [event["type"] for event in events] == ["ERROR"]
    assert (events[0]["object"]["code"], events[0]["object"]["reason"]) == (410, "Expired")
    assert events[0]["object"]["message"].startswith(f"too old resource version: {rv} (")


def test_claims_are_visible_to_the_node_that_runs_the_pod_only(
    apiserver: ApiServerStandin, clients: dict[str, Client]
) -> None:
    claim = apiserver.allocate_claim(
        "default",
        "tokens",
        pod="app",
        node=NODE,
        driver=DRIVER,
        results=[("tokens", NODE, "token-0"), ("tokens", NODE, "token-1")],
    )
    path = "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims/tokens"
    status, got = clients["node"].request("GET", path)
    assert (status, got["metadata"]["uid"]) == (200, claim["metadata"]["uid"])
    results = got["status"]["allocation"]["devices"]["results"]
    assert [(r["driver"], r["pool"], r["device"]) for r in results] == [
        (DRIVER, NODE, "token-0"),
        (DRIVER, NODE, "token-1"),
    ]
    assert got["status"]["reservedFor"][0]["name"] == "app"
    status, body = clients["other"].request("GET", path)
    assert status == 403
    assert body["message"] == (
        'resourceclaims.resource.k8s.io "tokens" is forbidden: User "system:node:node-b" '
        'cannot get resource "resourceclaims" in API group "resource.k8s.io" in the namespace '
        "\"default\": no relationship found between node 'node-b' and this object"
    )
    status, body = clients["node"].request("GET", path.rsplit("/", 1)[0])
    assert status == 403
    assert body["message"].endswith("can only get individual resources of this type")
    apiserver.delete_claim("default", "tokens")  # the pod still references it: 404, not 403
    assert clients["node"].request("GET", path)[0] == 404
    assert clients["daemonset"].request("GET", path)[0] == 404


def test_the_extended_resource_bridge_names_the_claim_in_the_pod(
    apiserver: ApiServerStandin, clients: dict[str, Client]
) -> None:
    claim = apiserver.allocate_claim(
        "default",
        None,
        pod="plain",
        node=NODE,
        driver=DRIVER,
        results=[("container-0-request-0", NODE, "token-0")],
        extended_resource="example.com/token",
    )
    name = claim["metadata"]["name"]
    assert name.startswith("plain-extended-resources-")
    assert claim["metadata"]["annotations"] == {EXTENDED_CLAIM_ANNOTATION: "true"}
    pod = apiserver.snapshot().pods["default/plain"]
    assert pod["status"]["extendedResourceClaimStatus"]["resourceClaimName"] == name
    path = f"/apis/resource.k8s.io/v1/namespaces/default/resourceclaims/{name}"
    assert clients["node"].request("GET", path)[0] == 200
    assert clients["other"].request("GET", path)[0] == 403


def test_rbac_gives_a_token_its_cluster_role_and_nothing_more(
    apiserver: ApiServerStandin, clients: dict[str, Client]
) -> None:
    daemonset = clients["daemonset"]
    assert daemonset.request("POST", SLICES, a_slice(node=OTHER))[0] == 201  # RBAC: any node
    assert daemonset.request("GET", SLICES)[0] == 200
    classes = "/apis/resource.k8s.io/v1/deviceclasses"
    status, body = daemonset.request("POST", classes, {"metadata": {"name": "x"}, "spec": {}})
    assert status == 403
    assert body["message"] == (
        f'deviceclasses.resource.k8s.io is forbidden: User "{SA_USER}" cannot create resource '
        '"deviceclasses" in API group "resource.k8s.io" at the cluster scope'
    )
    assert clients["nothing"].request("GET", SLICES)[0] == 403
    assert clients["node"].request("POST", classes, {"metadata": {"name": "x"}})[0] == 403
    apiserver.add_device_class("tokens", DRIVER, extended_resource_name="example.com/token")
    status, listed = clients["admin"].request("GET", classes)
    assert status == 200
    assert listed["items"][0]["spec"]["extendedResourceName"] == "example.com/token"


def test_discovery_shows_resource_k8s_io_v1_only_where_served(ca: CertificateAuthority) -> None:
    for versions, v1 in ((("v1",), 200), (("v1beta1", "v1beta2"), 404), ((), 404)):
        with ApiServerStandin(ca, tokens={ADMIN: True}, resource_versions=versions) as server:
            client = Client(server, token=ADMIN)
            try:
                groups = client.request("GET", "/apis")[1]["groups"]
                assert [g["name"] for g in groups] == (["resource.k8s.io"] if versions else [])
                status, group = client.request("GET", "/apis/resource.k8s.io")
                assert status == (200 if versions else 404)
                if versions:
                    assert [v["version"] for v in group["versions"]] == list(versions)
                status, resources = client.request("GET", "/apis/resource.k8s.io/v1")
                assert status == v1
                if v1 == 200:
                    names = {r["name"] for r in resources["resources"]}
                    assert {"resourceslices", "resourceclaims", "deviceclasses"} <= names
                assert client.request("GET", SLICES)[0] == v1
            finally:
                client.close()


def test_fail_requests_covers_the_new_paths(
    apiserver: ApiServerStandin, clients: dict[str, Client]
) -> None:
    apiserver.fail_requests("POST", SLICES)
    assert clients["node"].request("POST", SLICES, a_slice())[0] == 500
    apiserver.stop_failing()
    assert clients["node"].request("POST", SLICES, a_slice())[0] == 201
    pools = apiserver.snapshot().pools(NODE, DRIVER)
    assert pools[NODE].complete
    assert pools[NODE].devices == ("token-0", "token-1")


# --- device taints ---------------------------------------------------------------------------

TAINT = {"key": "example.com/unhealthy", "value": "true", "effect": "NoSchedule"}
TIME_LAYOUT = "2006-01-02T15:04:05Z07:00"
LABEL_KEY_RULE = (
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
    "alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for "
    "validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
)


def tainted(name: str, taints: dict[int, list[Any]], count: int = 2) -> dict[str, Any]:
    """A slice whose device ``i`` has ``taints[i]``."""
    body = a_slice(name=name, count=count)
    for index, device_taints in taints.items():
        body["spec"]["devices"][index]["taints"] = copy.deepcopy(device_taints)
    return body


def second() -> str:
    """Now, as the API server writes a time."""
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def test_a_tainted_device_is_stored_and_returned_with_its_taint(
    apiserver: ApiServerStandin, clients: dict[str, Client]
) -> None:
    node = clients["node"]
    body = tainted(
        "tainted",
        {
            0: [{**TAINT, "timeAdded": "2026-12-02T10:00:00.5+01:00"}],
            1: [{"key": "example.com/drained", "effect": "None"}],  # no timeAdded
            2: [],
        },
        count=3,
    )
    before = second()
    status, created = node.request("POST", SLICES, body)
    after = second()
    assert status == 201, created
    got = node.request("GET", f"{SLICES}/tainted")[1]
    for seen in (created, got, apiserver.snapshot().slices["tainted"]):
        devices = copy.deepcopy(seen["spec"]["devices"])
        # Stored in UTC to the second, as metav1.Time is.
        assert devices[0]["taints"] == [{**TAINT, "timeAdded": "2026-12-02T09:00:00Z"}]
        # SetDefaults_DeviceTaint stamps a taint without a time.
        assert before <= devices[1]["taints"][0].pop("timeAdded") <= after
        assert devices[1]["taints"] == [{"key": "example.com/drained", "effect": "None"}]
        assert "taints" not in devices[2]  # omitempty
        assert [d["attributes"] for d in devices] == [
            d["attributes"] for d in body["spec"]["devices"]
        ]
    # Sending back what it returned changes nothing.
    status, again = node.request("PUT", f"{SLICES}/tainted", got)
    assert status == 200, again
    assert again["metadata"]["resourceVersion"] == got["metadata"]["resourceVersion"]
    # Leaving the time out re-stamps the taint: a new spec, a new generation.
    changed = copy.deepcopy(got)
    del changed["spec"]["devices"][0]["taints"][0]["timeAdded"]
    before = second()
    status, updated = node.request("PUT", f"{SLICES}/tainted", changed)
    assert status == 200, updated
    assert before <= updated["spec"]["devices"][0]["taints"][0]["timeAdded"] <= second()
    assert updated["metadata"]["generation"] == 2


def test_a_device_may_have_16_taints_but_not_17(clients: dict[str, Client]) -> None:
    node = clients["node"]
    taints = [{"key": f"example.com/t{i}", "effect": "NoExecute"} for i in range(17)]
    status, created = node.request("POST", SLICES, tainted("many", {1: taints[:16]}))
    assert status == 201, created
    status, body = node.request("POST", SLICES, tainted("too-many", {1: taints}))
    assert (status, body["reason"]) == (422, "Invalid"), body
    assert body["message"] == (
        'ResourceSlice.resource.k8s.io "too-many" is invalid: spec.devices[1].taints: '
        "Too many: 17: must have at most 16 items"
    )
    assert body["details"]["causes"] == [
        {
            "reason": "FieldValueTooMany",
            "message": "Too many: 17: must have at most 16 items",
            "field": "spec.devices[1].taints",
        }
    ]
    created["spec"]["devices"][1]["taints"].append(taints[16])  # an update is held to it too
    status, body = node.request("PUT", f"{SLICES}/many", created)
    assert (status, body["reason"]) == (422, "Invalid"), body
    assert body["message"].endswith(
        "spec.devices[1].taints: Too many: 17: must have at most 16 items"
    )


def test_a_slice_with_a_tainted_device_holds_at_most_64_devices(clients: dict[str, Client]) -> None:
    admin = clients["admin"]
    assert admin.request("POST", SLICES, tainted("t64", {63: [TAINT]}, count=64))[0] == 201
    status, body = admin.request("POST", SLICES, tainted("t65", {64: [TAINT]}, count=65))
    assert (status, body["reason"]) == (422, "Invalid"), body
    assert body["message"] == (
        'ResourceSlice.resource.k8s.io "t65" is invalid: spec.devices: '
        "Too many: 65: must have at most 64 items"
    )
    status, untainted = admin.request("POST", SLICES, a_slice(name="u65", count=65))
    assert status == 201, untainted
    assert admin.request("POST", SLICES, a_slice(name="u128", count=128))[0] == 201
    status, body = admin.request("POST", SLICES, a_slice(name="u129", count=129))
    assert status == 422
    assert body["message"].endswith("spec.devices: Too many: 129: must have at most 128 items")
    # Tainting one device of the 65 is refused as well.
    untainted["spec"]["devices"][0]["taints"] = [TAINT]
    status, body = admin.request("PUT", f"{SLICES}/u65", untainted)
    assert status == 422, body
    assert body["message"].endswith("spec.devices: Too many: 65: must have at most 64 items")


@pytest.mark.parametrize(
    ("taint", "field", "messages"),
    [
        (
            {"key": "example.com/unhealthy", "effect": "PreferNoSchedule"},
            "effect",
            [
                'Unsupported value: "PreferNoSchedule": supported values: "NoExecute", '
                '"NoSchedule", "None"'
            ],
        ),
        ({"key": "example.com/unhealthy"}, "effect", ["Required value"]),
        (
            {"key": "bad key", "effect": "NoSchedule"},
            "key",
            [f'Invalid value: "bad key": name part {LABEL_KEY_RULE}'],
        ),
        (
            {"effect": "NoSchedule"},
            "key",
            [
                'Invalid value: "": name part must be non-empty',
                f'Invalid value: "": name part {LABEL_KEY_RULE}',
            ],
        ),
        (
            {"key": "a/b/c", "effect": "NoExecute"},
            "key",
            [
                f'Invalid value: "a/b/c": a valid label key {LABEL_KEY_RULE} with an optional DNS '
                "subdomain prefix and '/' (e.g. 'example.com/MyName')"
            ],
        ),
        (
            {"key": "/unhealthy", "effect": "NoExecute"},
            "key",
            ['Invalid value: "/unhealthy": prefix part must be non-empty'],
        ),
        (
            {"key": f"example.com/{'k' * 64}", "effect": "NoExecute"},
            "key",
            [f'Invalid value: "example.com/{"k" * 64}": name part must be no more than 63 bytes'],
        ),
        (
            {"key": "Example.com/unhealthy", "effect": "NoExecute"},
            "key",
            [
                'Invalid value: "Example.com/unhealthy": prefix part a lowercase RFC 1123 '
                "subdomain must consist of lower case alphanumeric characters, '-' or '.', and "
                "must start and end with an alphanumeric character (e.g. 'example.com', regex "
                "used for validation is "
                "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
            ],
        ),
        (
            {**TAINT, "value": "-true"},
            "value",
            [
                'Invalid value: "-true": a valid label must be an empty string or consist of '
                "alphanumeric characters, '-', '_' or '.', and must start and end with an "
                "alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used "
                "for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
            ],
        ),
        (
            {**TAINT, "value": "v" * 64},
            "value",
            [f'Invalid value: "{"v" * 64}": must be no more than 63 bytes'],
        ),
    ],
    ids=[
        "effect-unknown",
        "effect-missing",
        "key-space",
        "key-missing",
        "key-two-slashes",
        "key-empty-prefix",
        "key-long-name",
        "key-upper-prefix",
        "value-dash",
        "value-long",
    ],
)
def test_bad_taints_are_refused_with_the_real_field_paths(
    clients: dict[str, Client], taint: dict[str, Any], field: str, messages: list[str]
) -> None:
    body = tainted("bad", {1: [TAINT, taint]})
    status, answer = clients["node"].request("POST", SLICES, body)
    assert (status, answer["reason"]) == (422, "Invalid"), answer
    path = f"spec.devices[1].taints[1].{field}"
    assert answer["message"].startswith('ResourceSlice.resource.k8s.io "bad" is invalid: ')
    assert f"{path}: {messages[0]}" in answer["message"]
    assert [(c["field"], c["message"]) for c in answer["details"]["causes"]] == [
        (path, message) for message in messages
    ]


@pytest.mark.parametrize(
    ("given", "error"),
    [
        (
            "yesterday",
            f'parsing time "yesterday" as "{TIME_LAYOUT}": cannot parse "yesterday" as "2006"',
        ),
        (
            "2026-12-02 10:00:00Z",
            f'parsing time "2026-12-02 10:00:00Z" as "{TIME_LAYOUT}": cannot parse " 10:00:00Z" '
            'as "T"',
        ),
        (
            "2026-12-02T10:00:00",
            f'parsing time "2026-12-02T10:00:00" as "{TIME_LAYOUT}": cannot parse "" as "Z07:00"',
        ),
        ("2026-13-02T10:00:00Z", 'parsing time "2026-13-02T10:00:00Z": month out of range'),
        ("2026-02-29T10:00:00Z", 'parsing time "2026-02-29T10:00:00Z": day out of range'),
        ("2026-12-02T10:00:00Z+01", 'parsing time "2026-12-02T10:00:00Z+01": extra text: "+01"'),
        (1764669600, "json: cannot unmarshal number into Go value of type string"),
    ],
    ids=["word", "space", "no-zone", "month", "day", "extra", "number"],
)
def test_an_undecodable_time_added_is_a_bad_request(
    apiserver: ApiServerStandin, clients: dict[str, Client], given: Any, error: str
) -> None:
    body = tainted("late", {0: [{**TAINT, "timeAdded": given}]})
    status, answer = clients["node"].request("POST", SLICES, body)
    assert (status, answer["reason"]) == (400, "BadRequest"), answer
    assert answer["message"] == (
        f'ResourceSlice in version "v1" cannot be handled as a ResourceSlice: {error}'
    )
    assert "details" not in answer
    assert not apiserver.snapshot().slices


@pytest.mark.parametrize(
    ("given", "stored"),
    [
        ("2026-12-02T10:00:00+00:00", "2026-12-02T10:00:00Z"),
        ("2026-12-02T10:00:00.999999999+01:00", "2026-12-02T09:00:00Z"),
        ("2024-02-29T23:59:59-00:30", "2024-03-01T00:29:59Z"),
        ("2026-12-02T7:00:00,5Z", "2026-12-02T07:00:00Z"),  # Go's parser takes both
    ],
)
def test_time_added_is_stored_in_utc_to_the_second(
    clients: dict[str, Client], given: str, stored: str
) -> None:
    body = tainted("timed", {0: [{**TAINT, "timeAdded": given}]})
    status, created = clients["node"].request("POST", SLICES, body)
    assert status == 201, created
    assert created["spec"]["devices"][0]["taints"][0]["timeAdded"] == stored


def test_a_patch_that_leaves_an_undecodable_time_added_is_invalid(
    clients: dict[str, Client],
) -> None:
    node = clients["node"]
    assert node.request("POST", SLICES, tainted("patched", {0: [TAINT]}))[0] == 201
    devices = tainted("patched", {0: [{**TAINT, "timeAdded": "soon"}]})["spec"]["devices"]
    patch = {"spec": {"devices": devices}}  # a merge patch replaces the list
    status, answer = node.request("PATCH", f"{SLICES}/patched", patch, MERGE_PATCH)
    assert (status, answer["reason"]) == (422, "Invalid"), answer
    error = f'parsing time "soon" as "{TIME_LAYOUT}": cannot parse "soon" as "2006"'
    assert answer["message"].startswith(' "" is invalid: patch: Invalid value: ')
    assert answer["message"].endswith(f": {error}")
    assert [cause["field"] for cause in answer["details"]["causes"]] == ["patch"]
    stored = node.request("GET", f"{SLICES}/patched")[1]["spec"]["devices"][0]["taints"][0]
    assert stored["timeAdded"].endswith("Z")


def test_without_the_device_taints_gate_taints_are_dropped(ca: CertificateAuthority) -> None:
    with ApiServerStandin(ca, tokens={ADMIN: True}, device_taints=False) as server:
        client = Client(server, token=ADMIN)
        try:
            # 65 devices and a taint that would not validate: both pass, the taints go first.
            body = tainted("quiet", {0: [TAINT], 1: [{"key": "bad key", "effect": "Never"}]}, 65)
            status, created = client.request("POST", SLICES, body)
            assert status == 201, created
            expected = a_slice(name="quiet", count=65)["spec"]
            got = client.request("GET", f"{SLICES}/quiet")[1]
            for seen in (created, got, server.snapshot().slices["quiet"]):
                assert seen["spec"] == expected
            # An update that adds one: dropped too, though the generation moves (the strategy
            # compares the specs before it drops the field).
            changed = copy.deepcopy(got)
            changed["spec"]["devices"][2]["taints"] = [TAINT]
            status, updated = client.request("PUT", f"{SLICES}/quiet", changed)
            assert status == 200, updated
            assert updated["spec"] == expected
            assert updated["metadata"]["generation"] == 2
            # Decoding comes first: a bad time is still a bad request.
            late = tainted("late", {0: [{**TAINT, "timeAdded": "later"}]})
            assert client.request("POST", SLICES, late)[0] == 400
        finally:
            client.close()


def test_a_slice_tainted_while_the_gate_was_on_keeps_its_taints(
    apiserver: ApiServerStandin, clients: dict[str, Client]
) -> None:
    created = clients["node"].request("POST", SLICES, tainted("kept", {0: [TAINT]}))[1]
    apiserver.stop()
    apiserver.device_taints = False  # a restart with --feature-gates=DRADeviceTaints=false
    apiserver.start()
    node = Client(apiserver, apiserver.ca.node_certificate(NODE))
    try:
        changed = copy.deepcopy(created)
        changed["spec"]["devices"][0]["taints"][0]["value"] = "false"
        changed["spec"]["devices"][1]["taints"] = [TAINT]
        status, updated = node.request("PUT", f"{SLICES}/kept", changed)
        assert status == 200, updated
        devices = updated["spec"]["devices"]
        assert [taint["value"] for d in devices for taint in d["taints"]] == ["false", "true"]
        status, fresh = node.request("POST", SLICES, tainted("fresh", {0: [TAINT]}))
        assert status == 201, fresh
        assert all("taints" not in device for device in fresh["spec"]["devices"])
    finally:
        node.close()


def test_a_claim_of_a_cluster_pool_is_allocated_without_a_node_restriction(
    apiserver: ApiServerStandin, clients: dict[str, Client]
) -> None:
    """The allocator's createNodeSelector: devices of an ``allNodes`` slice restrict no node,
    a ``nodeSelector`` slice's term is the claim's, a node's own slice names that node."""
    site = {"key": "site", "operator": "In", "values": ["a"]}
    selected = {"nodeSelectorTerms": [{"matchExpressions": [site]}]}
    for body in (
        placed(a_slice(name="cluster", pool=pool_of("example.com/token")), allNodes=True),
        placed(a_slice(name="site-a", pool=pool_of("example.com/site")), nodeSelector=selected),
        a_slice(name="own", pool=pool_of(f"{NODE}/example.com/token")),
    ):
        status, answer = clients["admin"].request("POST", SLICES, body)
        assert status == 201, answer

    def allocation(pod: str, *pools: str) -> dict[str, Any]:
        results = [("tokens", pool, "token-1") for pool in pools]
        claim = apiserver.allocate_claim(
            "default", pod, pod=pod, node=NODE, driver=DRIVER, results=results
        )
        allocated: dict[str, Any] = claim["status"]["allocation"]
        assert [result["pool"] for result in allocated["devices"]["results"]] == list(pools)
        return allocated

    assert "nodeSelector" not in allocation("anywhere", "example.com/token")
    assert allocation("on-site", "example.com/site", "example.com/token")["nodeSelector"] == (
        selected
    )
    own = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [NODE]}]}
    for pools in (("example.com/token", f"{NODE}/example.com/token"), ("no-slice",)):
        assert allocation(f"local-{len(pools)}", *pools)["nodeSelector"] == {
            "nodeSelectorTerms": [own]
        }
    # The node reads the claim of a cluster pool as any: a pod bound to it references it.
    path = "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims/anywhere"
    assert clients["node"].request("GET", path)[0] == 200
    assert clients["other"].request("GET", path)[0] == 403


def placed(body: dict[str, Any], **placement: Any) -> dict[str, Any]:
    """The slice for other nodes than its own: ``placement`` instead of ``nodeName``."""
    spec = {key: value for key, value in body["spec"].items() if key != "nodeName"}
    return {**body, "spec": {**spec, **placement}}


def pool_of(name: str) -> dict[str, Any]:
    return {"name": name, "generation": 1, "resourceSliceCount": 1}
