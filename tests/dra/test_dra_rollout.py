"""Two instances of the agent on one node, as a DaemonSet rolling with ``maxSurge: 1`` runs
them: the new one started before the old one stops. Against the kubelet stand-in's plugin
watcher and DRA manager (several plugins per driver from 1.33, one before) and the API-server
stand-in (the Node says which kubelet it has)."""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.dra.node import (
    DRIVER,
    NODE,
    POOL,
    TIMEOUT,
    allocate,
    claim_id,
    config,
    dra_resource,
    kubeconfig_of,
    node_kubelet,
    pool_of,
    status_json,
)
from tests.harness import AgentProcess, rollout_pair
from tests.standin.apiserver import ApiServerStandin
from tests.standin.kubelet import KubeletStandin, KubeletView
from tests.standin.kubelet_dra import CallResult
from token_resource.host.lock import DirectoryLock

INSTANCE = "TOKEN_RESOURCE_INSTANCE"
START = "[0-9a-f]{8}"  # a start's own part of its sockets' names (dra.registration.start_id)
OLD_POD, NEW_POD = "5f0c1e9a-old0-4d6b-9a3e-000000000001", "7b2d4c6e-new0-4f8a-8c1d-000000000002"


@pytest.fixture
def agents(tmp_path: Path, dirs: dict[str, Path]) -> Iterator[tuple[AgentProcess, AgentProcess]]:
    with rollout_pair(tmp_path, dirs["dp"]) as pair:
        yield pair


class PodsArriving:
    """A thread that keeps preparing new claims, as the kubelet does for pods that arrive."""

    def __init__(self, kubelet: KubeletStandin, apiserver: ApiServerStandin) -> None:
        self.results: list[CallResult] = []
        self._kubelet, self._apiserver = kubelet, apiserver
        self._stop = threading.Event()
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._arrive)

    def __enter__(self) -> PodsArriving:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join()

    def wait_for_more(self, count: int) -> None:
        with self._cond:
            wanted = len(self.results) + count
            assert self._cond.wait_for(lambda: len(self.results) >= wanted, TIMEOUT)

    def _arrive(self) -> None:
        number = 0
        while not self._stop.is_set():
            number += 1
            pod = f"web-{number}"
            claim = claim_id(allocate(self._apiserver, pod, f"token-{number % 4}"))
            result = self._kubelet.prepare(DRIVER, [claim])
            with self._cond:
                self.results.append(result)
                self._cond.notify_all()


def claims_held(agent: AgentProcess) -> set[str]:
    """The names of the claims whose tokens ``agent`` says are held."""
    report = status_json(agent)
    return {h["claim"] for r in report["resources"] for h in r["holders"] or ()}


def registrations(dirs: dict[str, Path]) -> list[str]:
    """The names of the registration sockets in the kubelet's registry."""
    return sorted(path.name for path in dirs["reg"].iterdir())


def plugins(view: KubeletView) -> list[str]:
    """The endpoints of the driver's connected plugins."""
    assert view.dra is not None
    driver = view.dra.drivers.get(DRIVER)
    return [] if driver is None else [p.endpoint for p in driver.plugins if p.connected]


def rollout_kubelet(
    dirs: dict[str, Path], apiserver: ApiServerStandin, versions: tuple[str, ...]
) -> KubeletStandin:
    return node_kubelet(dirs, apiserver, deregistration_grace=1.0, dra_versions=versions)


def test_a_rollout_with_two_instances_has_no_gap_and_the_new_one_takes_over_the_claims(
    agents: tuple[AgentProcess, AgentProcess],
    dirs: dict[str, Path],
    apiserver: ApiServerStandin,
    tmp_path: Path,
) -> None:
    old, new = agents
    text = config(dirs, kubeconfig_of(apiserver, tmp_path), dra_resource(4))
    with rollout_kubelet(dirs, apiserver, ("v1.DRAPlugin", "v1beta1.DRAPlugin")) as kubelet:
        old.write_config(text)
        old.start(env={INSTANCE: OLD_POD})
        kubelet.wait_for(lambda view: len(plugins(view)) == 1, timeout=TIMEOUT)
        apiserver.wait_for(pool_of(4), timeout=TIMEOUT)
        (old_endpoint,) = plugins(kubelet.snapshot())
        assert re.search(rf"/{DRIVER}/dra-{OLD_POD}-{START}\.sock$", old_endpoint)
        assert re.fullmatch(rf"{DRIVER}-{OLD_POD}-{START}-reg\.sock", registrations(dirs)[0])
        earlier = claim_id(allocate(apiserver, "web-old", "token-0"))
        assert kubelet.prepare(DRIVER, [earlier]).error is None

        # Pods keep coming while the rollout runs: each one's claim prepared at once.
        with PodsArriving(kubelet, apiserver) as arriving:
            new.write_config(text)
            new.start(env={INSTANCE: NEW_POD})
            kubelet.wait_for(lambda view: len(plugins(view)) == 2, timeout=TIMEOUT)
            report = status_json(new)["instance"]
            assert report["beside"] is True, report
            assert old.stop() == 0
            kubelet.wait_for(lambda view: len(plugins(view)) == 1, timeout=TIMEOUT)
            arriving.wait_for_more(3)
        results = arriving.results

        assert [r.error for r in results if r.error is not None] == []
        assert len(results) >= 3
        view = kubelet.snapshot()
        assert view.dra is not None
        driver = view.dra.drivers[DRIVER]
        assert driver.unregistered == 0
        (new_endpoint,) = plugins(view)
        assert re.search(rf"/{DRIVER}/dra-{NEW_POD}-{START}\.sock$", new_endpoint)
        assert {call.endpoint for call in driver.prepares} == {
            old_endpoint,
            plugins(view)[0],
        }
        # The claim the old instance prepared: released by the new one, its spec gone.
        uid = earlier[1]
        assert earlier[2] in claims_held(new)
        assert kubelet.unprepare(DRIVER, [earlier]).error is None
        assert earlier[2] not in claims_held(new)
        assert not (dirs["cdi"] / f"{DRIVER}-{uid}.json").exists()
        # The old instance took its sockets with it; the slices were never wiped.
        (left,) = registrations(dirs)
        assert re.fullmatch(rf"{DRIVER}-{NEW_POD}-{START}-reg\.sock", left)
        assert driver.wipes == 0


@pytest.mark.parametrize(
    ("kubelet_version", "versions", "extra", "why"),
    [
        pytest.param(
            "v1.32.9",
            ("v1beta1.DRAPlugin",),
            "",
            "kubelet v1.32.9 keeps one plugin per DRA driver",
            id="kubelet-1.32",
        ),
        pytest.param(
            "v1.36.2",
            ("v1.DRAPlugin", "v1beta1.DRAPlugin"),
            '[resources]\n"example.com/seat" = 2\n',
            "example.com/seat is served by device-plugin, and kubelet v1.36.2 keeps one "
            "endpoint per device-plugin resource (several from 1.37)",
            id="device-plugin-resource-before-1.37",
        ),
    ],
)
def test_an_instance_that_must_be_alone_waits_for_the_other_to_leave(
    agents: tuple[AgentProcess, AgentProcess],
    dirs: dict[str, Path],
    apiserver: ApiServerStandin,
    tmp_path: Path,
    kubelet_version: str,
    versions: tuple[str, ...],
    extra: str,
    why: str,
) -> None:
    old, new = agents
    apiserver.add_node(NODE, kubelet_version=kubelet_version)
    text = config(dirs, kubeconfig_of(apiserver, tmp_path), extra + dra_resource(4))
    with rollout_kubelet(dirs, apiserver, versions) as kubelet:
        old.write_config(text)
        old.start(env={INSTANCE: OLD_POD})
        kubelet.wait_for(lambda view: len(plugins(view)) == 1, timeout=TIMEOUT)
        (endpoint,) = plugins(kubelet.snapshot())
        assert re.search(rf"/{DRIVER}/dra-{START}\.sock$", endpoint)

        new.write_config(text)
        new.start(env={INSTANCE: NEW_POD}, wait_ready=False)
        new.wait_for_log("waiting for the other instance to leave")
        # Ready for the rollout to go on (status answers), serving nothing yet.
        report = status_json(new)
        assert report["instance"]["beside"] is False
        assert why in report["instance"]["reason"]
        assert f"pid {old.process.pid if old.process else 0}" in report["instance"]["waiting_for"]
        assert "waiting to serve until it is alone" in new.cli("status").stdout
        assert len(kubelet.snapshot().dra.drivers[DRIVER].plugins) == 1  # type: ignore[union-attr]

        claim = claim_id(allocate(apiserver, "web-1", "token-1"))
        assert kubelet.prepare(DRIVER, [claim]).error is None
        # A waiting instance stopped (the rollout undone) leaves at once, touching nothing.
        assert new.stop() == 0
        (left,) = registrations(dirs)
        assert re.fullmatch(rf"{DRIVER}-{START}-reg\.sock", left)
        new.start(env={INSTANCE: NEW_POD}, wait_ready=False)
        new.wait_for_log("waiting for the other instance to leave")
        assert old.stop() == 0
        kubelet.wait_for(lambda view: len(plugins(view)) == 1, timeout=TIMEOUT)
        new.notify.wait_for(lambda lines: "READY=1" in lines)
        assert status_json(new)["instance"]["waiting_for"] is None
        # The claim the old one prepared is the new one's to release.
        assert kubelet.unprepare(DRIVER, [claim]).error is None


def test_an_instance_beside_another_takes_a_device_plugin_resource_only_once_alone(
    agents: tuple[AgentProcess, AgentProcess],
    dirs: dict[str, Path],
    apiserver: ApiServerStandin,
    tmp_path: Path,
) -> None:
    agent = agents[1]
    kubeconfig = kubeconfig_of(apiserver, tmp_path)
    with rollout_kubelet(dirs, apiserver, ("v1.DRAPlugin", "v1beta1.DRAPlugin")) as kubelet:
        agent.write_config(config(dirs, kubeconfig, dra_resource(4)))
        agent.start(env={INSTANCE: NEW_POD})
        kubelet.wait_for(lambda view: len(plugins(view)) == 1, timeout=TIMEOUT)
        assert status_json(agent)["instance"]["beside"] is True
        # Another agent holds the node (here the test itself, in its place).
        other = DirectoryLock(dirs["dp"])
        other.acquire()
        try:
            seat = '[resources]\n"example.com/seat" = 2\n'
            agent.write_config(config(dirs, kubeconfig, seat + dra_resource(4)), atomic=True)
            result = agent.cli("reload")
            assert result.returncode == 1
            assert (
                "example.com/seat is served by device-plugin, and kubelet v1.36.2 keeps one "
                "endpoint per device-plugin resource (several from 1.37), which needs the agent "
                "alone"
            ) in result.stderr
            assert f"(pid {os.getpid()})" in result.stderr
            assert "example.com/seat" not in kubelet.snapshot().resources
        finally:
            other.release()
        result = agent.cli("reload")
        assert result.returncode == 0, result.stderr
        kubelet.wait_for(
            lambda view: (
                "example.com/seat" in view.resources
                and view.resources["example.com/seat"].allocatable == 2
            ),
            timeout=TIMEOUT,
        )
        assert len(plugins(kubelet.snapshot())) == 1  # DRA went on as it was


def test_the_old_instance_leaves_the_pools_to_the_new_one(
    agents: tuple[AgentProcess, AgentProcess],
    dirs: dict[str, Path],
    apiserver: ApiServerStandin,
    tmp_path: Path,
) -> None:
    """A rollout that also changes a count: the two instances once rewrote each other's pool
    about 23 times a second until the old one left (69 generations in 3 s)."""
    old, new = agents
    kubeconfig = kubeconfig_of(apiserver, tmp_path)
    with rollout_kubelet(dirs, apiserver, ("v1.DRAPlugin", "v1beta1.DRAPlugin")) as kubelet:
        old.write_config(config(dirs, kubeconfig, dra_resource(4)))
        old.start(env={INSTANCE: OLD_POD})
        apiserver.wait_for(pool_of(4), timeout=TIMEOUT)
        new.write_config(config(dirs, kubeconfig, dra_resource(6)))
        new.start(env={INSTANCE: NEW_POD})
        apiserver.wait_for(pool_of(6), timeout=TIMEOUT)
        old.wait_for_log("left to the newer instance")
        # Both look again (a kubelet restart wipes the node's slices): only the new one writes.
        kubelet.restart()
        kubelet.wait_for(lambda view: len(plugins(view)) == 2, timeout=TIMEOUT)
        view = apiserver.wait_for(pool_of(6), timeout=TIMEOUT)
        generation = view.pools(NODE, DRIVER)[POOL].generation
        assert old.stop() == 0
        kubelet.wait_for(lambda view: len(plugins(view)) == 1, timeout=TIMEOUT)
        view = apiserver.wait_for(pool_of(6), timeout=TIMEOUT)
        assert view.pools(NODE, DRIVER)[POOL].generation - generation <= 1
        writes = [r for r in apiserver.requests if r.method in ("POST", "PUT")]
        assert len(writes) < 20, writes
