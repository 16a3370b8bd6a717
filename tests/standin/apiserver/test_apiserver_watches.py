"""What the agent's watches need of the API server stand-in, as a 1.37 server does it:
bookmarks (``allowWatchBookmarks``, the cacher's schedule: 2 s before the timeout), watches
resumed from a bookmark's resourceVersion, and lists and watches of a node's own Node by
``metadata.name`` (the Node authorizer with AuthorizeNodeWithSelectors)."""

from __future__ import annotations

import http.client
import json
import threading
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import pytest

from tests.standin.apiserver import ApiServerStandin, CertificateAuthority, watch
from tests.standin.apiserver.test_apiserver_dra import SLICES, TIMEOUT, Client, a_slice

NODE, OTHER = "node-a", "node-b"
ADMIN = "admin-token"
NODES = "/api/v1/nodes"
OWN_NODE = "fieldSelector=" + quote(f"metadata.name={NODE}")


@pytest.fixture
def apiserver(ca: CertificateAuthority) -> Iterator[ApiServerStandin]:
    with ApiServerStandin(ca, nodes=(NODE, OTHER), tokens={ADMIN: True}) as standin:
        yield standin


@pytest.fixture
def clients(apiserver: ApiServerStandin) -> Iterator[dict[str, Client]]:
    made = {
        "node": Client(apiserver, apiserver.ca.node_certificate(NODE)),
        "other": Client(apiserver, apiserver.ca.node_certificate(OTHER)),
        "admin": Client(apiserver, token=ADMIN),
    }
    yield made
    for client in made.values():
        client.close()


def own_slices(version: str, seconds: int, bookmarks: bool) -> str:
    query = "fieldSelector=" + quote(f"spec.nodeName={NODE}")
    query += f"&resourceVersion={version}&timeoutSeconds={seconds}"
    return query + ("&allowWatchBookmarks=true" if bookmarks else "")


@pytest.mark.parametrize("bookmarks", [True, False])
def test_a_bookmark_before_the_timeout_carries_the_changes_the_selector_left_out(
    clients: dict[str, Client], bookmarks: bool
) -> None:
    node, other = clients["node"], clients["other"]
    _, listing = node.request("GET", f"{SLICES}?fieldSelector=" + quote(f"spec.nodeName={NODE}"))
    version = listing["metadata"]["resourceVersion"]
    elsewhere = other.request("POST", SLICES, a_slice(name="elsewhere", node=OTHER))[1]
    events = list(node.watch(own_slices(version, 3, bookmarks)))
    if not bookmarks:
        assert events == []
        return
    assert [event["type"] for event in events] == ["BOOKMARK"]
    marked = events[0]["object"]["metadata"]["resourceVersion"]
    assert int(marked) >= int(elsewhere["metadata"]["resourceVersion"])
    # Resumed from the bookmark: the next change of the node's own slices, and nothing before.
    mine = node.request("POST", SLICES, a_slice(name="mine", node=NODE))[1]
    resumed = list(node.watch(own_slices(marked, 3, False)))
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in resumed] == [("ADDED", "mine")]
    assert resumed[0]["object"]["metadata"]["uid"] == mine["metadata"]["uid"]


def test_a_bookmark_comes_every_minute_on_a_long_watch(
    apiserver: ApiServerStandin, clients: dict[str, Client], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(watch, "BOOKMARK_EVERY_SECONDS", 0.5)
    events = list(clients["node"].watch(own_slices("1", 4, True)))
    # Due at 0.5 s, 1 s, 1.5 s and 2 s (2 s before the end): at least two even under load,
    # where only the one before the end would come without the minute's.
    assert len(events) >= 2
    assert {event["type"] for event in events} == {"BOOKMARK"}


def test_a_node_watches_its_own_node_by_name(
    apiserver: ApiServerStandin, clients: dict[str, Client]
) -> None:
    node = clients["node"]
    status, listing = node.request("GET", f"{NODES}?{OWN_NODE}")
    assert status == 200, listing
    assert [item["metadata"]["name"] for item in listing["items"]] == [NODE]
    version = listing["metadata"]["resourceVersion"]
    events: list[dict[str, Any]] = []
    reader = threading.Thread(
        target=lambda: events.extend(
            node.watch(f"{OWN_NODE}&resourceVersion={version}&timeoutSeconds=2", NODES)
        )
    )
    reader.start()
    apiserver.set_capacity(OTHER, "example.com/token", "3")  # not its Node: not sent
    apiserver.set_capacity(NODE, "example.com/token", "2")
    reader.join(TIMEOUT)
    assert not reader.is_alive()
    capacities = [e["object"]["status"]["capacity"].get("example.com/token") for e in events]
    # The capacity, then the kubelet's copy of it into allocatable: two changes of its Node.
    assert [e["type"] for e in events] == ["MODIFIED", "MODIFIED"]
    assert capacities == ["2", "2"]
    assert {e["object"]["metadata"]["name"] for e in events} == {NODE}


@pytest.mark.parametrize(
    ("query", "reason"),
    [
        ("", "node 'node-a' cannot read all nodes, only its own Node object"),
        (
            "fieldSelector=" + quote(f"metadata.name={OTHER}"),
            "node 'node-a' cannot read 'node-b', only its own Node object",
        ),
    ],
)
@pytest.mark.parametrize("watching", [False, True])
def test_a_node_may_not_list_or_watch_other_nodes(
    apiserver: ApiServerStandin, query: str, reason: str, watching: bool
) -> None:
    connection = http.client.HTTPSConnection(
        apiserver.host,
        apiserver.port,
        context=Client(apiserver, apiserver.ca.node_certificate(NODE)).context,
        timeout=TIMEOUT,
    )
    try:
        connection.request("GET", f"{NODES}?{query}" + ("&watch=true" if watching else ""))
        response = connection.getresponse()
        body = json.loads(response.read())
    finally:
        connection.close()
    assert response.status == 403, body
    assert body["message"].endswith(f": {reason}")
    assert f'cannot {"watch" if watching else "list"} resource "nodes"' in body["message"]


def test_a_deleted_node_is_a_deleted_event(
    apiserver: ApiServerStandin, clients: dict[str, Client]
) -> None:
    _, listing = clients["admin"].request("GET", NODES)
    assert {item["metadata"]["name"] for item in listing["items"]} == {NODE, OTHER}
    version = listing["metadata"]["resourceVersion"]
    apiserver.delete_node(OTHER)
    apiserver.add_node(OTHER)
    events = list(clients["admin"].watch(f"resourceVersion={version}&timeoutSeconds=1", NODES))
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [
        ("DELETED", OTHER),
        ("ADDED", OTHER),
    ]
