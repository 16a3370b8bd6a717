"""The slice publisher in-process, against the API-server stand-in: what it does when its
credentials cannot be read at an awkward moment."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.standin.apiserver import ApiServerStandin, ApiServerView, CertificateAuthority
from token_resource.apiserver.connection import credentials
from token_resource.apiserver.connection.client import ApiClient, Credentials, KubeError
from token_resource.apiserver.connection.credentials import load_credentials
from token_resource.apiserver.keeping.keeper import FIRST_RETRY_DELAY
from token_resource.apiserver.keeping.node_slices import PoolWanted, SlicePublisher
from token_resource.apiserver.keeping.slicesync import NotPublishing, SliceScope, sync_slices
from token_resource.apiserver.objects.slices import (
    SLICES_PATH,
    Pool,
    cluster_placement,
    cluster_pool_name,
    node_placement,
    pool_name,
)
from token_resource.config.model import KubernetesSettings

NODE = "node-a"
DRIVER = "tokens.example.com"
TOKEN = "example.com/token"


@pytest.fixture
def apiserver(ca: CertificateAuthority) -> Iterator[ApiServerStandin]:
    with ApiServerStandin(ca, nodes=(NODE,)) as standin:
        yield standin


def pool_size(view: ApiServerView) -> int | None:
    pool = view.pools(NODE, DRIVER).get(pool_name(NODE, TOKEN))
    return len(pool.devices) if pool is not None and pool.complete else None


def test_a_kubeconfig_unreadable_as_the_watch_starts_stops_nothing(
    apiserver: ApiServerStandin, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The kubeconfig being rewritten (empty for a moment) just when the publisher starts its
    watch, after a sync: the publisher once died there, silently, and published nothing more
    (test_dra's resize test, now and then)."""
    kubeconfig = apiserver.write_kubeconfig(
        tmp_path / "node.conf", identity=apiserver.ca.node_certificate(NODE)
    )
    settings = KubernetesSettings(kubeconfig=kubeconfig, node_name=NODE, resync_seconds=30)
    empty = tmp_path / "empty.conf"
    empty.write_text("")
    calls = 0
    watching: list[asyncio.Event] = []

    def load_credentials(given: KubernetesSettings) -> Credentials:
        # The first call is the sync's (a worker thread), the second the watch's (the event
        # loop): that one finds the file empty.
        nonlocal calls
        calls += 1
        if calls == 2:
            watching[0].set()
            given = dataclasses.replace(given, kubeconfig=empty)
        return credentials.load_credentials(given)

    monkeypatch.setattr(
        "token_resource.apiserver.keeping.node_slices.load_credentials", load_credentials
    )
    monkeypatch.setattr(
        "token_resource.apiserver.connection.watching.load_credentials", load_credentials
    )

    async def until(size: int, publisher: SlicePublisher) -> None:
        """The pool of ``size`` on the API server, and the publisher past the sync that wrote
        it (its state is set once the sync's thread has returned)."""
        deadline = time.monotonic() + 20
        while (
            pool_size(apiserver.snapshot()) != size
            or publisher.publisher_state().state != "accepted"
        ):
            assert time.monotonic() < deadline, (publisher.publisher_state(), calls)
            await asyncio.sleep(0.05)

    async def scenario() -> None:
        watching.append(asyncio.Event())
        publisher = SlicePublisher(settings, DRIVER, lambda: None)
        publisher.apply(settings, DRIVER, {TOKEN: PoolWanted(4)})
        try:
            await until(4, publisher)
            await asyncio.wait_for(watching[0].wait(), 20)
            publisher.apply(settings, DRIVER, {TOKEN: PoolWanted(300)})
            await until(300, publisher)
        finally:
            await publisher.close()

    asyncio.run(scenario())


def test_a_watch_that_keeps_failing_is_tried_again_with_backoff_not_in_a_loop(
    apiserver: ApiServerStandin, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every sync succeeds and every watch is refused (as where RBAC allows list but not
    watch): the publisher once listed and watched again at once, as fast as the API server
    answered. Now each round waits, longer each time."""
    kubeconfig = apiserver.write_kubeconfig(
        tmp_path / "node.conf", identity=apiserver.ca.node_certificate(NODE)
    )
    settings = KubernetesSettings(kubeconfig=kubeconfig, node_name=NODE, resync_seconds=30)
    attempts: list[float] = []

    def refused(self: object, client: object, path: str, timeout: float) -> object:
        attempts.append(time.monotonic())
        raise KubeError('resourceslices is forbidden: cannot "watch"')

    monkeypatch.setattr("token_resource.apiserver.connection.watching._Opening.open", refused)

    async def scenario() -> None:
        publisher = SlicePublisher(settings, DRIVER, lambda: None)
        publisher.apply(settings, DRIVER, {TOKEN: PoolWanted(4)})
        try:
            deadline = time.monotonic() + 20
            while len(attempts) < 3:
                assert time.monotonic() < deadline, attempts
                await asyncio.sleep(0.05)
        finally:
            await publisher.close()

    asyncio.run(scenario())
    assert pool_size(apiserver.snapshot()) == 4  # what was wanted got there all the same
    gaps = [later - earlier for earlier, later in zip(attempts, attempts[1:])]
    assert gaps[0] >= 0.9 * FIRST_RETRY_DELAY, gaps
    assert gaps[1] >= 1.8 * FIRST_RETRY_DELAY, gaps


def test_a_stop_while_the_watch_thread_sees_its_close_stops_the_publisher(
    apiserver: ApiServerStandin, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Woken (something new wanted), the publisher closes its watch and waits for the thread
    that reads it; a stop right then was swallowed there, and the publisher went on, so that
    the agent's stop waited up to the next watch's timeout (seen: a stop over 20 s, now and
    then, in test_dra)."""
    kubeconfig = apiserver.write_kubeconfig(
        tmp_path / "node.conf", identity=apiserver.ca.node_certificate(NODE)
    )
    settings = KubernetesSettings(kubeconfig=kubeconfig, node_name=NODE, resync_seconds=30)
    reading, released = threading.Event(), threading.Event()

    def slow_to_see_the_close(watch: object, loop: object, events: object) -> None:
        reading.set()
        released.wait(20)

    monkeypatch.setattr("token_resource.apiserver.connection.watching._pump", slow_to_see_the_close)

    async def scenario() -> None:
        publisher = SlicePublisher(settings, DRIVER, lambda: None)
        publisher.apply(settings, DRIVER, {TOKEN: PoolWanted(4)})
        try:
            assert await asyncio.to_thread(reading.wait, 20)
            publisher.resync()  # the watch is closed, its thread not done yet
            for _ in range(10):
                await asyncio.sleep(0.01)
            closing = asyncio.ensure_future(publisher.close())
            # Not wait_for: its cancellation on timeout would be swallowed the same way.
            done, _ = await asyncio.wait({closing}, timeout=10)
            assert closing in done, "the publisher went on after its close()"
        finally:
            released.set()

    asyncio.run(scenario())


def test_a_sync_never_changes_a_cluster_pools_slices_of_its_driver(
    apiserver: ApiServerStandin, tmp_path: Path
) -> None:
    """The node's sync rewrites and deletes its node's slices of the driver only: a cluster
    pool's (``allNodes``, no ``nodeName``) is the elected publisher's, even when the list
    holds it (here an admin's list without the field selector, as the node's is not)."""
    apiserver.add_token("admin")
    admin = KubernetesSettings(
        kubeconfig=apiserver.write_kubeconfig(tmp_path / "admin.conf", token="admin"),
        node_name=NODE,
    )
    cluster = cluster_slice(DRIVER, TOKEN, 2)
    everything = SliceScope("", f"node {NODE}", cluster=False, owner=lambda client: None)

    def node_pool(count: int) -> Pool:
        return Pool(DRIVER, pool_name(NODE, TOKEN), node_placement(NODE), TOKEN, count)

    with ApiClient(load_credentials(admin)) as client:
        client.create(SLICES_PATH, cluster)
        for count in (3, 4):
            sync_slices(client, everything, DRIVER, [node_pool(count)], {})
            assert pool_size(apiserver.snapshot()) == count
        sync_slices(client, everything, DRIVER, [], {})  # the node's pool goes, and only it
    assert pool_size(apiserver.snapshot()) is None
    [kept] = apiserver.snapshot().slices_of(driver=DRIVER)
    assert (kept["spec"]["pool"], kept["metadata"]["generation"]) == (cluster["spec"]["pool"], 1)


def test_a_sync_that_may_no_longer_write_writes_nothing_and_says_why(
    apiserver: ApiServerStandin, tmp_path: Path
) -> None:
    """``may_write()`` says no (the publisher lost its lead): no write, and an error whose
    text the keeper's warning quotes (it once quoted an empty one)."""
    apiserver.add_token("admin")
    admin = KubernetesSettings(
        kubeconfig=apiserver.write_kubeconfig(tmp_path / "admin.conf", token="admin"),
        node_name=NODE,
    )
    scope = SliceScope("", f"node {NODE}", cluster=False, owner=lambda client: None)
    pool = Pool(DRIVER, pool_name(NODE, TOKEN), node_placement(NODE), TOKEN, 3)
    with ApiClient(load_credentials(admin)) as client, pytest.raises(NotPublishing) as raised:
        sync_slices(client, scope, DRIVER, [pool], {}, may_write=lambda: False)
    assert str(raised.value) == "no longer leading: the rest is left to the publisher that leads"
    assert apiserver.snapshot().slices_of(driver=DRIVER) == []


def cluster_slice(driver: str, resource: str, count: int) -> dict[str, Any]:
    """The one slice of a cluster pool of ``count`` tokens, for every node (``allNodes``), as
    the elected publisher writes it."""
    pool = Pool(driver, cluster_pool_name(resource), cluster_placement(None), resource, count)
    [made] = pool.slices(1)
    return made
