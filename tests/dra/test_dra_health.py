"""A DRA resource's unhealthy tokens: tainted in the ResourceSlices (left out where the API
server drops taints), and reported on the kubelet's health stream. The real agent against the
kubelet stand-in (plugin watcher, DRA manager) and the API-server stand-in."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.dra.node import (
    DRIVER,
    NODE,
    POOL,
    TIMEOUT,
    TOKEN,
    allocate,
    claim_id,
    config,
    dra_resource,
    kubeconfig_of,
    node_kubelet,
    start_driver,
    status_json,
)
from tests.harness import AgentProcess
from tests.standin.apiserver import ApiServerStandin, ApiServerView, CertificateAuthority
from tests.standin.kubelet import KubeletStandin, KubeletView

TAINT = f"{DRIVER}/unhealthy"
TOKENS = [f"token-{index}" for index in range(8)]


@pytest.fixture(params=[True], ids=["taints kept"])
def apiserver(
    ca: CertificateAuthority, request: pytest.FixtureRequest
) -> Iterator[ApiServerStandin]:
    with ApiServerStandin(ca, nodes=(NODE, "node-b"), device_taints=request.param) as standin:
        yield standin


def probed(directory: Path, count: int, **probe: Any) -> str:
    settings = {"path": f"{directory}/token{{index}}", "interval": 1, "failure_threshold": 1}
    settings.update(probe)
    lines = "".join(f"{key} = {json.dumps(value)}\n" for key, value in settings.items())
    return (
        f'[resources."{TOKEN}"]\ncount = {count}\nadvertise = "dra"\n'
        f'[resources."{TOKEN}".probe]\n{lines}'
    )


def devices_of(view: ApiServerView) -> dict[str, list[dict[str, Any]]]:
    """Device name -> its taints (without timeAdded), across the pool's latest slices."""
    pool = view.pools(NODE, DRIVER).get(POOL)
    found: dict[str, list[dict[str, Any]]] = {}
    for item in view.slices_of(NODE, DRIVER):
        if pool is None or item["spec"]["pool"]["generation"] != pool.generation:
            continue
        for device in item["spec"]["devices"]:
            found[device["name"]] = [
                {key: value for key, value in taint.items() if key != "timeAdded"}
                for taint in device.get("taints", [])
            ]
    return found


def tainted(expected: dict[str, str], count: int) -> Callable[[ApiServerView], bool]:
    """The pool lists ``count`` tokens, exactly those of ``expected`` tainted with its effect."""

    def holds(view: ApiServerView) -> bool:
        pool = view.pools(NODE, DRIVER).get(POOL)
        if pool is None or not pool.complete or pool.stale_slices:
            return False
        found = devices_of(view)
        return len(found) == count and all(
            taints == ([{"key": TAINT, "effect": expected[name]}] if name in expected else [])
            for name, taints in found.items()
        )

    holds.__qualname__ = f"{count} token(s), tainted: {expected}"
    return holds


def test_an_unhealthy_token_is_tainted_and_the_taint_goes_when_it_recovers(
    dra_agent: AgentProcess,
    dirs: dict[str, Path],
    apiserver: ApiServerStandin,
    kubelet: KubeletStandin,
    tmp_path: Path,
) -> None:
    devices = tmp_path / "dev"
    plug_all(devices, 4)
    start_driver(dra_agent, dirs, apiserver, kubelet, tmp_path, probed(devices, 4))
    apiserver.wait_for(tainted({}, 4), timeout=TIMEOUT)
    # A running pod's claim holds token-1 when its dongle goes.
    namespace, uid, name = claim_id(allocate(apiserver, "web-1", "token-1"))
    assert kubelet.prepare(DRIVER, [(namespace, uid, name)]).error is None
    specs = sorted(path.name for path in dirs["cdi"].iterdir())
    (devices / "token1").unlink()
    apiserver.wait_for(tainted({"token-1": "NoSchedule"}, 4), timeout=TIMEOUT)
    report = status_json(dra_agent)
    [resource] = report["resources"]
    assert (resource["healthy"], resource["in_use"], resource["free"]) == (3, 1, 3)
    assert report["dra"]["taints"] is True
    # NoSchedule leaves the allocation alone: still prepared, its spec in place.
    assert [holder["device_ids"] for holder in resource["holders"]] == [["token-1"]]
    assert sorted(path.name for path in dirs["cdi"].iterdir()) == specs
    assert kubelet.prepare(DRIVER, [(namespace, uid, name)]).error is None
    plug_all(devices, 4)
    apiserver.wait_for(tainted({}, 4), timeout=TIMEOUT)


def plug_all(directory: Path, count: int) -> None:
    directory.mkdir(exist_ok=True)
    for index in range(count):
        (directory / f"token{index}").touch()


def test_no_execute_when_the_resource_asks_for_it_and_64_devices_per_tainted_slice(
    dra_agent: AgentProcess,
    dirs: dict[str, Path],
    apiserver: ApiServerStandin,
    kubelet: KubeletStandin,
    tmp_path: Path,
) -> None:
    devices = tmp_path / "dev"
    plug_all(devices, 100)
    start_driver(
        dra_agent,
        dirs,
        apiserver,
        kubelet,
        tmp_path,
        probed(devices, 100, taint_effect="NoExecute"),
    )
    view = apiserver.wait_for(tainted({}, 100), timeout=TIMEOUT)
    assert [len(i["spec"]["devices"]) for i in view.slices_of(NODE, DRIVER)] == [100]
    (devices / "token99").unlink()
    view = apiserver.wait_for(tainted({"token-99": "NoExecute"}, 100), timeout=TIMEOUT)
    sizes = sorted(len(item["spec"]["devices"]) for item in view.slices_of(NODE, DRIVER))
    assert sizes == [36, 64]


@pytest.mark.parametrize("apiserver", [False], ids=["taints dropped"], indirect=True)
def test_where_the_api_server_drops_taints_unhealthy_tokens_are_left_out(
    dra_agent: AgentProcess,
    dirs: dict[str, Path],
    apiserver: ApiServerStandin,
    kubelet: KubeletStandin,
    tmp_path: Path,
) -> None:
    devices = tmp_path / "dev"
    plug_all(devices, 4)
    (devices / "token2").unlink()
    start_driver(dra_agent, dirs, apiserver, kubelet, tmp_path, probed(devices, 4))
    view = apiserver.wait_for(
        lambda v: set(devices_of(v)) == {"token-0", "token-1", "token-3"}, timeout=TIMEOUT
    )
    assert all(taints == [] for taints in devices_of(view).values())
    report = status_json(dra_agent)
    assert report["dra"]["taints"] is False
    assert "drops device taints" in dra_agent.cli("status").stdout
    (devices / "token2").touch()
    apiserver.wait_for(lambda v: len(devices_of(v)) == 4, timeout=TIMEOUT)
    assert dra_agent.log().count("the API server drops device taints (") == 1


# --- the kubelet's health stream (DRAResourceHealth/NodeWatchResources) --------------------


def kubelet_health(view: KubeletView) -> dict[str, tuple[str, str]]:
    """Device -> (health as the kubelet reads it now, message), for the agent's pool."""
    assert view.dra is not None
    driver = view.dra.drivers[DRIVER]
    return {d.device: (d.effective, d.message) for d in driver.health if d.pool == POOL}


def health_is(expected: dict[str, str]) -> Callable[[KubeletView], bool]:
    def holds(view: KubeletView) -> bool:
        return {name: health for name, (health, _) in kubelet_health(view).items()} == expected

    holds.__qualname__ = f"the kubelet reads {expected}"
    return holds


def streams_of(view: KubeletView) -> tuple[int, tuple[str, ...]]:
    assert view.dra is not None
    driver = view.dra.drivers[DRIVER]
    return driver.health_streams, driver.health_errors


def test_the_kubelet_health_stream_lists_every_token_and_follows_a_reload(
    dra_agent: AgentProcess,
    dirs: dict[str, Path],
    apiserver: ApiServerStandin,
    kubelet: KubeletStandin,
    tmp_path: Path,
) -> None:
    """A 1.36 kubelet opens v1alpha1 on every driver; on a real node without the service it
    logged "Method not found!" every 5 s. One stream, no error, each change sent on it."""
    start_driver(dra_agent, dirs, apiserver, kubelet, tmp_path, dra_resource(3))
    view = kubelet.wait_for(health_is(dict.fromkeys(TOKENS[:3], "Healthy")), timeout=TIMEOUT)
    assert view.dra is not None
    assert view.dra.drivers[DRIVER].plugins[0].health_service == "v1alpha1.DRAResourceHealth"
    assert {d.timeout for d in view.dra.drivers[DRIVER].health} == {30.0}
    kubeconfig = kubeconfig_of(apiserver, tmp_path)
    dra_agent.write_config(config(dirs, kubeconfig, dra_resource(5)))
    view = kubelet.wait_for(health_is(dict.fromkeys(TOKENS[:5], "Healthy")), timeout=TIMEOUT)
    assert streams_of(view) == (1, ())


def test_an_unhealthy_token_is_unhealthy_on_the_health_stream_with_the_probes_reason(
    dra_agent: AgentProcess,
    dirs: dict[str, Path],
    apiserver: ApiServerStandin,
    kubelet: KubeletStandin,
    tmp_path: Path,
) -> None:
    devices = tmp_path / "dev"
    plug_all(devices, 3)
    start_driver(dra_agent, dirs, apiserver, kubelet, tmp_path, probed(devices, 3))
    kubelet.wait_for(health_is(dict.fromkeys(TOKENS[:3], "Healthy")), timeout=TIMEOUT)
    (devices / "token1").unlink()
    expected = {"token-0": "Healthy", "token-1": "Unhealthy", "token-2": "Healthy"}
    view = kubelet.wait_for(health_is(expected), timeout=TIMEOUT)
    assert f"{devices}/token1" in kubelet_health(view)["token-1"][1]
    (devices / "token1").touch()
    view = kubelet.wait_for(health_is(dict.fromkeys(TOKENS[:3], "Healthy")), timeout=TIMEOUT)
    assert streams_of(view) == (1, ())


def test_a_137_kubelet_watches_the_v1_health_service_the_agent_lists(
    dra_agent: AgentProcess,
    dirs: dict[str, Path],
    apiserver: ApiServerStandin,
    tmp_path: Path,
) -> None:
    with node_kubelet(dirs, apiserver, dra_resource_health="1.37") as kubelet:
        start_driver(dra_agent, dirs, apiserver, kubelet, tmp_path, dra_resource(2))
        view = kubelet.wait_for(health_is(dict.fromkeys(TOKENS[:2], "Healthy")), timeout=TIMEOUT)
        assert view.dra is not None
        assert view.dra.drivers[DRIVER].plugins[0].health_service == "v1.DRAResourceHealth"
        assert streams_of(view) == (1, ())
