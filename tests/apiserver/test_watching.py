"""The agent's watches (apiserver/watching.py) in-process against the API-server stand-in: the
node's slices and its Node are watched one watch after another, each resumed from the last
version seen (bookmarks included), with no list between them; only a version the API server no
longer has (410) lists again; a restarted API server is watched on from where it stopped, and
what changed meanwhile is put right."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import parse_qs

import pytest

from tests.standin.apiserver import ApiServerStandin, ApiServerView, CertificateAuthority, Rule
from tests.standin.apiserver.wire import LoggedRequest
from token_resource.apiserver.connection.client import REQUEST_TIMEOUT, ApiClient
from token_resource.apiserver.connection.credentials import load_credentials
from token_resource.apiserver.connection.watching import Cursor, watch_until
from token_resource.apiserver.keeping.node_capacity import NodeStatusAdvertiser
from token_resource.apiserver.keeping.node_slices import PoolWanted, SlicePublisher
from token_resource.apiserver.objects.node import NODES_PATH, OWNED_ANNOTATION
from token_resource.apiserver.objects.slices import SLICES_PATH, pool_name
from token_resource.config.model import KubernetesSettings

NODE, OTHER = "node-a", "node-b"
DRIVER = "tokens.example.com"
TOKEN = "example.com/token"
DONGLE = "example.com/dongle"
# Each watch lasts 1 to 2 s here (resync_seconds to twice that).
WATCH_SECONDS = 1.0
# Long enough for a bookmark: the API server's cacher sends one 2 s before a watch's timeout,
# none in a watch shorter than that.
BOOKMARKED_WATCH_SECONDS = 3.0
DEADLINE = 30.0


@pytest.fixture
def apiserver(ca: CertificateAuthority) -> Iterator[ApiServerStandin]:
    with ApiServerStandin(ca, nodes=(NODE, OTHER), tokens={"admin": True}) as standin:
        yield standin


@pytest.fixture
def settings(apiserver: ApiServerStandin, tmp_path: Path) -> KubernetesSettings:
    kubeconfig = apiserver.write_kubeconfig(
        tmp_path / "node.conf", identity=apiserver.ca.node_certificate(NODE)
    )
    return KubernetesSettings(kubeconfig=kubeconfig, node_name=NODE, resync_seconds=WATCH_SECONDS)


def of(view: ApiServerView, path: str, *, watch: bool) -> list[LoggedRequest]:
    """The agent's GETs of ``path``: its watches, or its lists and reads."""
    return [
        r
        for r in view.requests
        if r.method == "GET"
        and r.path == path
        and r.identity == f"system:node:{NODE}"
        and ("watch=true" in r.query) == watch
    ]


def query(request: LoggedRequest, key: str) -> str:
    return parse_qs(request.query).get(key, [""])[0]


def writes(view: ApiServerView) -> list[LoggedRequest]:
    return [r for r in view.requests if r.method != "GET" and r.identity == f"system:node:{NODE}"]


async def until(
    apiserver: ApiServerStandin, predicate: Callable[[ApiServerView], bool], what: str
) -> ApiServerView:
    deadline = time.monotonic() + DEADLINE
    while True:
        view = apiserver.snapshot()
        if predicate(view):
            return view
        assert time.monotonic() < deadline, f"{what}: {view.requests[-6:]}"
        await asyncio.sleep(0.05)


def pool_of(view: ApiServerView) -> tuple[int, int] | None:
    """The node's pool: its generation and token count, once complete."""
    pool = view.pools(NODE, DRIVER).get(pool_name(NODE, TOKEN))
    return (pool.generation, len(pool.devices)) if pool is not None and pool.complete else None


def elsewhere(apiserver: ApiServerStandin, value: str) -> None:
    """A change the agent's field selectors leave out: another Node's capacity."""
    apiserver.set_capacity(OTHER, DONGLE, value)


async def publishing(apiserver: ApiServerStandin, settings: KubernetesSettings) -> SlicePublisher:
    publisher = SlicePublisher(settings, DRIVER, lambda: None)
    publisher.apply(settings, DRIVER, {TOKEN: PoolWanted(3)})
    await until(apiserver, lambda v: pool_of(v) == (1, 3), "published")
    return publisher


def test_the_node_slices_watch_goes_on_without_a_list(
    apiserver: ApiServerStandin, settings: KubernetesSettings
) -> None:
    async def scenario() -> ApiServerView:
        publisher = await publishing(apiserver, settings)
        try:
            elsewhere(apiserver, "1")
            return await until(
                apiserver, lambda v: len(of(v, SLICES_PATH, watch=True)) >= 4, "four watches"
            )
        finally:
            await publisher.close()

    view = asyncio.run(scenario())
    watches = of(view, SLICES_PATH, watch=True)
    # The sync's two lists (before and after its write), and none since, however many watches.
    assert len(of(view, SLICES_PATH, watch=False)) == 2
    assert len(writes(view)) == 1
    versions = [int(query(w, "resourceVersion")) for w in watches]
    assert versions == sorted(versions)
    assert versions[0] > 0
    assert {query(w, "allowWatchBookmarks") for w in watches} == {"true"}
    assert {1 <= int(query(w, "timeoutSeconds")) <= 2 for w in watches} == {True}


def test_a_bookmark_carries_the_next_watch_past_changes_it_left_out(
    apiserver: ApiServerStandin, settings: KubernetesSettings
) -> None:
    """A change the watch's selector leaves out: the watch's bookmark brings its version, and
    the next watch resumes from there (a relist would start from there too), not from the
    version of the agent's last own event."""
    settings = dataclasses.replace(settings, resync_seconds=BOOKMARKED_WATCH_SECONDS)
    changed: list[int] = []

    async def scenario() -> ApiServerView:
        publisher = await publishing(apiserver, settings)
        try:
            await until(apiserver, lambda v: len(of(v, SLICES_PATH, watch=True)) >= 1, "a watch")
            elsewhere(apiserver, "1")
            changed.append(apiserver.snapshot().resource_version(OTHER))
            # The watch open at the change sends its bookmark 2 s before its end, after the
            # change unless this machine was slow to make it; the next one's bookmark is.
            return await until(
                apiserver, lambda v: len(of(v, SLICES_PATH, watch=True)) >= 3, "three watches"
            )
        finally:
            await publisher.close()

    view = asyncio.run(scenario())
    versions = [int(query(w, "resourceVersion")) for w in of(view, SLICES_PATH, watch=True)]
    assert versions == sorted(versions)
    assert 0 < versions[0] < changed[0] <= versions[-1], (versions, changed)
    assert len(of(view, SLICES_PATH, watch=False)) == 2


def test_a_version_compacted_away_lists_once_and_writes_nothing(
    apiserver: ApiServerStandin, settings: KubernetesSettings
) -> None:
    async def scenario() -> ApiServerView:
        publisher = await publishing(apiserver, settings)
        try:
            before = len(of(apiserver.snapshot(), SLICES_PATH, watch=False))
            elsewhere(apiserver, "1")
            apiserver.compact()  # the watch's version is older than the history now
            view = await until(
                apiserver,
                lambda v: len(of(v, SLICES_PATH, watch=False)) == before + 1,
                "one list after the 410",
            )
            gone = [r for r in of(view, SLICES_PATH, watch=True) if r.status == 200]
            # The next watch goes on from the new list's version, with no list after it.
            watched = len(gone)
            return await until(
                apiserver,
                lambda v: len(of(v, SLICES_PATH, watch=True)) >= watched + 2,
                "two watches after the list",
            )
        finally:
            await publisher.close()

    view = asyncio.run(scenario())
    assert len(of(view, SLICES_PATH, watch=False)) == 3
    assert len(writes(view)) == 1  # the pool held what it should: nothing rewritten
    assert pool_of(view) == (1, 3)


def test_a_restarted_api_server_is_watched_on_and_a_slice_deleted_meanwhile_comes_back(
    apiserver: ApiServerStandin, settings: KubernetesSettings
) -> None:
    async def scenario() -> tuple[ApiServerView, int]:
        publisher = await publishing(apiserver, settings)
        try:
            await until(apiserver, lambda v: bool(of(v, SLICES_PATH, watch=True)), "watching")
            apiserver.stop()
            served = len(apiserver.snapshot().requests)
            apiserver.delete_slices(node=NODE)  # while it is down: as a starting kubelet does
            apiserver.start()
            view = await until(apiserver, lambda v: pool_of(v) == (2, 3), "republished")
            return view, served
        finally:
            await publisher.close()

    view, served = asyncio.run(scenario())
    after = view.requests[served:]
    first = next(r for r in after if r.identity == f"system:node:{NODE}")
    # The first request after the restart is the watch resumed from its version, which saw the
    # deletion; then the sync's list.
    assert (first.path, query(first, "watch")) == (SLICES_PATH, "true"), after[:3]
    assert int(query(first, "resourceVersion")) > 0


def advertising(settings: KubernetesSettings) -> NodeStatusAdvertiser:
    advertiser = NodeStatusAdvertiser(settings, lambda: None)
    advertiser.apply(settings, {DONGLE: 4})
    return advertiser


def capacity(view: ApiServerView) -> str | None:
    value = view.nodes[NODE]["status"]["capacity"].get(DONGLE)
    return None if value is None else str(value)


def test_the_node_is_watched_not_read_and_patched_only_when_it_differs(
    apiserver: ApiServerStandin, settings: KubernetesSettings
) -> None:
    node_path = f"{NODES_PATH}/{NODE}"

    async def scenario() -> ApiServerView:
        advertiser = advertising(settings)
        try:
            await until(apiserver, lambda v: capacity(v) == "4", "advertised")
            await until(apiserver, lambda v: len(of(v, NODES_PATH, watch=True)) >= 3, "watches")
            apiserver.set_capacity(NODE, "other.example/gpu", "1")  # a change, but not ours
            apiserver.reset_capacity(NODE)  # the kubelet dropping the extended resources
            await until(apiserver, lambda v: capacity(v) == "4", "put back")
            return await until(
                apiserver, lambda v: len(of(v, NODES_PATH, watch=True)) >= 5, "watched on"
            )
        finally:
            await advertiser.close()

    view = asyncio.run(scenario())
    # One read at start, one when the watch showed the capacity gone; nothing periodic.
    assert len(of(view, NODES_PATH, watch=False)) == 2
    assert of(view, node_path, watch=False) == []
    status_patches = [r for r in writes(view) if r.path == f"{node_path}/status"]
    assert len(status_patches) == 2
    watches = of(view, NODES_PATH, watch=True)
    assert {query(w, "fieldSelector") for w in watches} == {f"metadata.name={NODE}"}


def test_an_account_that_may_not_watch_nodes_gets_one_warning_and_reads_the_node_instead(
    apiserver: ApiServerStandin, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """An older ClusterRole (get and patch of nodes, no list or watch)."""
    rules = (
        Rule(("",), ("nodes",), ("get", "patch")),
        Rule(("",), ("nodes/status",), ("patch",)),
    )
    apiserver.add_token("old-role", rules=rules)
    kubeconfig = apiserver.write_kubeconfig(tmp_path / "token.conf", token="old-role")
    settings = KubernetesSettings(
        kubeconfig=kubeconfig, node_name=NODE, resync_seconds=WATCH_SECONDS
    )

    async def scenario() -> None:
        advertiser = advertising(settings)
        try:
            await until(apiserver, lambda v: capacity(v) == "4", "advertised")
            for _ in range(2):
                apiserver.reset_capacity(NODE)
                await until(apiserver, lambda v: capacity(v) == "4", "put back by a read")
        finally:
            await advertiser.close()

    with caplog.at_level(logging.WARNING, logger="token_resource"):
        asyncio.run(scenario())
    warnings = [r.getMessage() for r in caplog.records if "cannot watch it" in r.getMessage()]
    assert len(warnings) == 1, warnings
    assert "403" in warnings[0]
    assert "list and watch nodes" in warnings[0]


def test_a_node_older_than_the_watch_history_is_watched_from_the_list_not_in_a_loop(
    ca: CertificateAuthority, tmp_path: Path
) -> None:
    """At 300 Nodes the agent's own Node had not changed for longer than the API server's watch
    cache reaches back: a watch from the Node's own resourceVersion was 410 at once, the read
    after it the same version again, and every agent read and watched its Node 17 times a
    second. Watched from the list's version, it is one read and one watch."""
    with ApiServerStandin(
        ca, nodes=(NODE, OTHER), tokens={"admin": True}, watch_history=5
    ) as apiserver:
        kubeconfig = apiserver.write_kubeconfig(
            tmp_path / "node.conf", identity=apiserver.ca.node_certificate(NODE)
        )
        settings = KubernetesSettings(kubeconfig=kubeconfig, node_name=NODE, resync_seconds=60)
        # What the agent wants is there already: nothing to write, nothing newer to watch from.
        apiserver.set_capacity(NODE, DONGLE, "4")
        admin = KubernetesSettings(
            kubeconfig=apiserver.write_kubeconfig(tmp_path / "admin.conf", token="admin")
        )
        with ApiClient(load_credentials(admin)) as client:
            client.merge_patch(
                f"{NODES_PATH}/{NODE}", {"metadata": {"annotations": {OWNED_ANNOTATION: DONGLE}}}
            )
        for value in range(10):  # the other Node's changes push the history past it
            elsewhere(apiserver, str(value))

        async def scenario() -> ApiServerView:
            advertiser = advertising(settings)
            try:
                await until(apiserver, lambda v: bool(of(v, NODES_PATH, watch=True)), "watching")
                await asyncio.sleep(1.0)  # a loop would make dozens of requests meanwhile
                return apiserver.snapshot()
            finally:
                await advertiser.close()

        view = asyncio.run(scenario())
    assert len(of(view, NODES_PATH, watch=False)) == 1
    assert len(of(view, NODES_PATH, watch=True)) == 1
    assert writes(view) == []  # it held what was wanted


def test_a_watch_opened_into_a_partition_ends_at_once_when_cancelled(
    apiserver: ApiServerStandin, settings: KubernetesSettings
) -> None:
    """The API server holds the watch's request unanswered (the agent cut off): cancelled,
    the watch's worker thread ends then, not at its socket's timeout, which the event loop's
    shutdown waits for (a publisher once did not stop in 20 s of SIGTERM: seed 4028708922 of
    tests/publisher/test_cluster_publisher_chaos.py)."""
    user = f"system:node:{NODE}"

    def held(view: ApiServerView) -> bool:
        return any(h.identity == user and "watch=true" in h.query for h in view.held)

    async def scenario() -> float:
        watching = asyncio.ensure_future(
            watch_until(
                settings,
                SLICES_PATH,
                f"spec.nodeName={NODE}",
                Cursor("1"),
                lambda _: None,
                asyncio.Event(),
            )
        )
        await until(apiserver, held, "the watch held")
        watching.cancel()
        await asyncio.wait({watching})
        return time.monotonic()

    apiserver.cut_off(user=user)
    cancelled = asyncio.run(scenario())  # which returns once its worker threads have ended
    ended = time.monotonic() - cancelled
    print(f"the watch's thread ended {ended:.3f} s after its task was cancelled")
    assert ended < REQUEST_TIMEOUT / 2
    view = apiserver.wait_for(
        lambda v: any(h.identity == user and "watch=true" in h.query for h in v.dropped), DEADLINE
    )
    assert not held(view)
