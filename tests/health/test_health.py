"""Tokens that follow reality: the real agent with probes, against the kubelet stand-in (device
plugin) and the API-server stand-in (node status, DRA: tests/dra/test_dra_health.py).

Each probe checks something real here: files that stand for device nodes, commands that run.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.apiserver.test_node_status import apiserver, dongle_is, kubeconfig, kubernetes_table
from tests.harness import AgentProcess
from tests.standin.apiserver import ApiServerStandin
from tests.standin.kubelet import KubeletStandin, KubeletView

DONGLE = "example.com/dongle"
TIMEOUT = 30.0

# The Node-status tests' fixtures: the API-server stand-in and a kubeconfig of its node.
apiserver, kubeconfig = apiserver, kubeconfig  # noqa: PLW0127


def dongles(directory: Path, count: int = 4, **probe: Any) -> str:
    """A resource whose token N stands for the device node DIRECTORY/ttyUSB<N>."""
    settings = {"path": f"{directory}/ttyUSB{{index}}", "interval": 1, "failure_threshold": 1}
    settings.update(probe)
    lines = "".join(f"{key} = {json.dumps(value)}\n" for key, value in settings.items())
    return f'[resources."{DONGLE}"]\ncount = {count}\n[resources."{DONGLE}".probe]\n{lines}'


def plug(directory: Path, *indices: int) -> None:
    directory.mkdir(exist_ok=True)
    for index in indices:
        (directory / f"ttyUSB{index}").touch()


def serve_dongles(
    agent: AgentProcess, kubelet: KubeletStandin, devices: Path, *plugged: int
) -> None:
    """The agent serving four dongles, those of ``plugged`` there: that many allocatable."""
    plug(devices, *plugged)
    agent.write_config(dongles(devices))
    agent.start()
    kubelet.wait_for(allocatable(len(plugged)))


def health_of(view: KubeletView, name: str = DONGLE) -> dict[str, str]:
    return dict(view.resources[name].devices)


def allocatable(count: int, name: str = DONGLE) -> Callable[[KubeletView], bool]:
    """Listed (the first list arrived), with ``count`` healthy devices."""

    def holds(view: KubeletView) -> bool:
        resource = view.resources.get(name)
        return (
            resource is not None
            and resource.stream_open
            and bool(resource.devices)
            and resource.allocatable == count
        )

    holds.__qualname__ = f"{name} allocatable {count}"
    return holds


def status_json(agent: AgentProcess) -> dict[str, Any]:
    result = agent.cli("status", "--json")
    assert result.returncode == 0, result.stderr
    report: dict[str, Any] = json.loads(result.stdout)
    return report


def resource_report(agent: AgentProcess, name: str = DONGLE) -> dict[str, Any]:
    reports: list[dict[str, Any]] = status_json(agent)["resources"]
    [report] = [r for r in reports if r["name"] == name]
    return report


def wait_for_log(agent: AgentProcess, pattern: str, times: int = 1) -> str:
    deadline = time.monotonic() + TIMEOUT
    while len(re.findall(pattern, log := agent.log())) < times:
        assert time.monotonic() < deadline, f"{pattern!r} not {times} time(s) in:\n{log}"
        time.sleep(0.02)
    return log


def test_a_pulled_dongle_takes_exactly_its_token_out_and_plugging_it_back_returns_it(
    agent: AgentProcess, kubelet: KubeletStandin, tmp_path: Path
) -> None:
    devices = tmp_path / "dev"
    serve_dongles(agent, kubelet, devices, 0, 1, 2, 3)
    # A running pod holds token-2; its dongle is then pulled.
    assert kubelet.allocate(DONGLE, ["token-2"]).container_responses
    (devices / "ttyUSB2").unlink()
    view = kubelet.wait_for(allocatable(3), timeout=TIMEOUT)
    assert health_of(view) == {
        "token-0": "Healthy",
        "token-1": "Healthy",
        "token-2": "Unhealthy",
        "token-3": "Healthy",
    }
    # Listed still (the kubelet keeps its pod), never re-registered for it.
    assert view.resources[DONGLE].registrations == 1
    report = resource_report(agent)
    assert report["healthy"] == 3
    assert report["health"]["unhealthy"] == [
        {"token": "token-2", "reason": f"{devices}/ttyUSB2 does not exist"}
    ]
    assert report["health"]["probe"] == f"path {devices}/ttyUSB{{index}} every 1 s"
    text = agent.cli("status").stdout
    assert f"probe path {devices}/ttyUSB{{index}} every 1 s: 3 of 4 healthy" in text
    assert f"token-2 unhealthy: {devices}/ttyUSB2 does not exist" in text
    # A preferred allocation of three among all four skips the unhealthy token.
    answer = kubelet.get_preferred_allocation(
        DONGLE, [f"token-{index}" for index in range(4)], [], 3
    )
    assert list(answer.container_responses[0].deviceIDs) == ["token-0", "token-1", "token-3"]
    plug(devices, 2)
    view = kubelet.wait_for(allocatable(4), timeout=TIMEOUT)
    assert set(health_of(view).values()) == {"Healthy"}
    log = wait_for_log(agent, "token-2 healthy again")
    # One line per transition, however many checks ran.
    assert len(re.findall(r"dongle: token-2 unhealthy", log)) == 1
    assert len(re.findall(r"token-2 healthy again", log)) == 1


def test_a_license_server_reporting_free_seats_limits_the_tokens(
    agent: AgentProcess, kubelet: KubeletStandin, tmp_path: Path
) -> None:
    seats = tmp_path / "free-seats"
    seats.write_text("5\n")
    agent.write_config(
        '[resources."example.com/seat"]\ncount = 5\n[resources."example.com/seat".probe]\n'
        f'command = ["/bin/cat", "{seats}"]\ninterval = 1\nfailure_threshold = 1\n'
    )
    agent.start()
    kubelet.wait_for(allocatable(5, "example.com/seat"))
    seats.write_text("2\nof 5 seats free\n")
    view = kubelet.wait_for(allocatable(2, "example.com/seat"), timeout=TIMEOUT)
    assert [h for _, h in sorted(view.resources["example.com/seat"].devices)] == [
        "Healthy",
        "Healthy",
        "Unhealthy",
        "Unhealthy",
        "Unhealthy",
    ]
    assert "/bin/cat reports 2 healthy" in agent.log()


def test_a_hung_or_missing_probe_is_an_unhealthy_reason_and_never_stops_the_agent(
    agent: AgentProcess, kubelet: KubeletStandin, tmp_path: Path
) -> None:
    agent.write_config(
        '[resources]\n"example.com/plain" = 2\n'
        '[resources."example.com/hung"]\ncount = 1\n[resources."example.com/hung".probe]\n'
        'command = ["/bin/sleep", "60"]\ninterval = 1\ntimeout = 0.3\nfailure_threshold = 1\n'
        '[resources."example.com/missing"]\ncount = 1\n[resources."example.com/missing".probe]\n'
        'command = ["/nonexistent/lmstat"]\ninterval = 1\nfailure_threshold = 1\n'
    )
    agent.start()
    kubelet.wait_for(allocatable(0, "example.com/hung"), timeout=TIMEOUT)
    kubelet.wait_for(allocatable(0, "example.com/missing"), timeout=TIMEOUT)
    assert kubelet.snapshot().resources["example.com/plain"].allocatable == 2
    reasons = {
        name: resource_report(agent, name)["health"]["unhealthy"][0]["reason"]
        for name in ("example.com/hung", "example.com/missing")
    }
    assert reasons == {
        "example.com/hung": "/bin/sleep still running after 0.3 s: killed",
        "example.com/missing": "cannot run /nonexistent/lmstat: No such file or directory",
    }
    assert agent.process is not None
    assert agent.process.poll() is None


def test_a_bad_probe_in_a_drop_in_is_refused_and_the_served_probe_stays(
    agent: AgentProcess, kubelet: KubeletStandin, tmp_path: Path
) -> None:
    devices = tmp_path / "dev"
    serve_dongles(agent, kubelet, devices, 0, 1, 2, 3)
    dropin = agent.dropin_dir / "50-probe.toml"
    dropin.parent.mkdir(exist_ok=True)
    dropin.write_text(f'[resources."{DONGLE}".probe]\ntcp = "127.0.0.1:1"\ninterval = 0\n')
    result = agent.cli("reload")
    assert result.returncode != 0
    assert (
        f'{dropin}, line 3, key resources."{DONGLE}".probe.interval: interval must be a number '
        "of seconds from 1 to 86400, got 0"
    ) in result.stdout + result.stderr
    # The path probe still runs: pulling a dongle still counts.
    (devices / "ttyUSB0").unlink()
    kubelet.wait_for(allocatable(3), timeout=TIMEOUT)


def test_a_reload_changes_a_probe_live_and_taking_it_away_makes_every_token_healthy(
    agent: AgentProcess, kubelet: KubeletStandin, tmp_path: Path
) -> None:
    devices = tmp_path / "dev"
    serve_dongles(agent, kubelet, devices, 0, 1)
    # Now every token checks one path, which is missing.
    agent.write_config(dongles(devices, path=str(devices / "hub")))
    kubelet.wait_for(allocatable(0), timeout=TIMEOUT)
    agent.write_config(f'[resources]\n"{DONGLE}" = 4\n')
    kubelet.wait_for(allocatable(4), timeout=TIMEOUT)
    assert resource_report(agent)["health"] is None


def test_a_node_status_resource_advertises_its_healthy_tokens(
    agent: AgentProcess,
    kubelet: KubeletStandin,
    apiserver: ApiServerStandin,
    kubeconfig: Path,
    tmp_path: Path,
) -> None:
    devices = tmp_path / "dev"
    plug(devices, 0, 1, 2, 3)
    agent.write_config(
        kubernetes_table(kubeconfig)
        + dongles(devices).replace("count = 4\n", 'count = 4\nadvertise = "node-status"\n', 1)
    )
    agent.start()
    apiserver.wait_for(dongle_is("4"), timeout=TIMEOUT)
    for index in (1, 3):
        (devices / f"ttyUSB{index}").unlink()
    apiserver.wait_for(dongle_is("2"), timeout=TIMEOUT)
    plug(devices, 1, 3)
    apiserver.wait_for(dongle_is("4"), timeout=TIMEOUT)


def test_a_taint_effect_on_a_device_plugin_resource_is_refused(
    agent: AgentProcess, tmp_path: Path
) -> None:
    agent.write_config(dongles(tmp_path, taint_effect="NoExecute"))
    result = agent.cli("check")
    assert result.returncode != 0
    assert "taint_effect only applies to DRA resources" in result.stdout + result.stderr


def test_check_shows_each_probe_and_can_run_it_once(agent: AgentProcess, tmp_path: Path) -> None:
    devices = tmp_path / "dev"
    plug(devices, 0, 2)
    agent.write_config(dongles(devices))
    shown = agent.cli("check")
    assert shown.returncode == 0, shown.stderr
    assert (
        f"    probe: path {devices}/ttyUSB{{index}} every 1 s, timeout 1 s, unhealthy after 1 "
        f"failed check(s), healthy again after 1  ({agent.config_path})"
    ) in shown.stdout
    assert "checked once" not in shown.stdout
    ran = agent.cli("check", "--probe")
    assert ran.returncode == 0, ran.stderr
    assert "checked once: failed in " in ran.stdout
    assert (
        ": 2 of 4 paths exist; 2 of 4 token(s) healthy (unhealthy: token-1, token-3)" in ran.stdout
    ), ran.stdout
