"""``token-resource status``: who holds the tokens, from the kubelet stand-in's PodResources API,
with the real agent process, over real sockets."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, NoReturn

import grpc
import pytest

from tests.harness import AGENT_COMMAND, TWO_RESOURCES, AgentProcess, write_file
from tests.standin.kubelet import KubeletStandin, serves_exactly
from tests.standin.podresources import Admitted, PodResourcesStandin
from token_resource import PACKAGE_DIR, __version__
from token_resource.host.control import Answer, ControlServer
from token_resource.observe.report import HealthReport, Holder, ResourceReport, UnhealthyToken
from token_resource.protocol.podresources import pod_resources_handler

LICENSE, TOKEN = "example.com/license", "example.com/token"
# Generous: the agent gives the kubelet 2 s.
TIMEOUT = 30.0


def write_config(agent: AgentProcess, socket_path: Path, resources: str) -> None:
    """The main file, with the PodResources socket in [agent]."""
    text = agent.agent_section() + f'pod_resources_socket = "{socket_path}"\n' + resources
    write_file(agent.config_path, text, atomic=True)


def serve(agent: AgentProcess, kubelet: KubeletStandin, socket_path: Path) -> None:
    write_config(agent, socket_path, TWO_RESOURCES)
    agent.start()
    kubelet.wait_for(serves_exactly({TOKEN: 2, LICENSE: 5}))


def status(agent: AgentProcess) -> dict[str, Any]:
    return agent.status_json()


def resource(report: dict[str, Any], name: str) -> dict[str, Any]:
    found: dict[str, Any] = next(r for r in report["resources"] if r["name"] == name)
    return found


def holders(report: dict[str, Any], name: str) -> list[tuple[str, list[str]]]:
    return [
        (f"{h['namespace']}/{h['pod']}/{h['container']}", h["device_ids"])
        for h in resource(report, name)["holders"]
    ]


@pytest.fixture
def admitted(
    agent: AgentProcess, kubelet: KubeletStandin, pod_resources: PodResourcesStandin
) -> PodResourcesStandin:
    """Two pods hold three license seats; a GPU of another plugin is held too."""
    serve(agent, kubelet, pod_resources.socket_path)
    pod_resources.admit_pod("default", "web-1", "app", LICENSE, 2)
    pod_resources.admit_pod("batch", "job-7", "worker", LICENSE, 1)
    pod_resources.record(Admitted("default", "web-1", "app", "nvidia.com/gpu", ("GPU-1",)))
    return pod_resources


def test_status_shows_who_holds_the_tokens(
    admitted: PodResourcesStandin, agent: AgentProcess
) -> None:
    report = status(agent)
    # The code that answers: the agent imported this tree's package.
    assert agent.process is not None
    assert report["agent"] == {
        "version": __version__,
        "package": str(PACKAGE_DIR),
        "pid": agent.process.pid,
    }
    assert report["pod_resources"] == {"socket": str(admitted.socket_path), "error": None}
    assert [r["name"] for r in report["resources"]] == [LICENSE, TOKEN]
    license_ = resource(report, LICENSE)
    assert {k: license_[k] for k in ("count", "registered", "in_use", "free")} == {
        "count": 5,
        "registered": True,
        "in_use": 3,
        "free": 2,
    }
    assert license_["kubelet_allocatable"] == 5
    assert holders(report, LICENSE) == [
        ("batch/job-7/worker", ["token-2"]),
        ("default/web-1/app", ["token-0", "token-1"]),
    ]
    assert (resource(report, TOKEN)["in_use"], resource(report, TOKEN)["free"]) == (0, 2)
    assert "nvidia.com/gpu" not in json.dumps(report)  # only our resources

    text = agent.cli("status").stdout
    lines = text.splitlines()
    assert lines[0].startswith("2 resource(s), 2/2 registered: ")
    assert "example.com/license=5 (3 in use), example.com/token=2 (0 in use)" in lines[0]
    assert lines[1:] == [
        "example.com/license: 5 token(s), registered, 3 in use, 2 free",
        "  batch/job-7/worker: token-2",
        "  default/web-1/app: token-0, token-1",
        "example.com/token: 2 token(s), registered, 0 in use, 2 free",
        f"device-plugin sockets: {agent.device_plugin_dir}/token-resource "
        "(kept across kubelet restarts)",
    ], text
    # Only DRA claims are listed there (the packages' removal warning): none without DRA.
    claims = agent.cli("status", "--prepared-claims")
    assert (claims.returncode, claims.stdout, claims.stderr) == (0, "", "")


def test_the_status_line_counts_tokens_in_use_once_known(
    admitted: PodResourcesStandin, agent: AgentProcess
) -> None:
    status(agent)
    agent.notify.wait_for(
        lambda lines: any("example.com/license=5 (3 in use)" in line for line in lines)
    )


def test_after_a_kubelet_restart_the_holders_are_the_same_and_registered_again(
    admitted: PodResourcesStandin, agent: AgentProcess, kubelet: KubeletStandin
) -> None:
    before = status(agent)
    kubelet.restart()
    admitted.restart()
    kubelet.wait_for(lambda view: view.generation == 2 and view.counts() == {TOKEN: 2, LICENSE: 5})
    after = status(agent)
    assert holders(after, LICENSE) == holders(before, LICENSE)
    assert resource(after, LICENSE)["registered"] is True
    assert resource(after, LICENSE)["in_use"] == 3


def test_a_count_lowered_below_the_tokens_in_use_shows_the_excess(
    admitted: PodResourcesStandin, agent: AgentProcess, kubelet: KubeletStandin
) -> None:
    write_config(agent, admitted.socket_path, TWO_RESOURCES.replace("count = 5", "count = 1"))
    kubelet.wait_for(serves_exactly({TOKEN: 2, LICENSE: 1}))
    report = status(agent)
    license_ = resource(report, LICENSE)
    # The pods keep token-1 and token-2, which are no longer advertised: nothing is free.
    assert (license_["count"], license_["in_use"], license_["free"]) == (1, 3, 0)
    assert license_["kubelet_allocatable"] == 1
    assert holders(report, LICENSE)[1] == ("default/web-1/app", ["token-0", "token-1"])
    text = agent.cli("status").stdout
    assert (
        "example.com/license: 1 token(s), registered, 3 in use "
        "(2 more than the count: held since before it was lowered), 0 free"
    ) in text


def test_without_the_pod_resources_socket_status_says_so_and_shows_the_rest(
    agent: AgentProcess, kubelet: KubeletStandin, pod_resources_dir: Path
) -> None:
    missing = pod_resources_dir / "kubelet.sock"
    serve(agent, kubelet, missing)
    report = status(agent)
    assert f"no PodResources socket at {missing}" in report["pod_resources"]["error"]
    assert resource(report, LICENSE)["registered"] is True
    assert resource(report, LICENSE)["in_use"] is None
    assert resource(report, LICENSE)["holders"] is None
    lines = agent.cli("status").stdout.splitlines()
    assert "in use" not in lines[0]
    assert lines[1].startswith(
        f"who holds the tokens: unknown: no PodResources socket at {missing}"
    )
    assert "example.com/license: 5 token(s), registered, in use unknown" in lines


def test_a_socket_that_refuses_is_reported_and_the_agent_serves_on(
    agent: AgentProcess, kubelet: KubeletStandin, pod_resources_dir: Path
) -> None:
    refusing = pod_resources_dir / "kubelet.sock"
    with socket.socket(socket.AF_UNIX) as stale:
        stale.bind(str(refusing))  # a socket file nobody listens on: connection refused
    serve(agent, kubelet, refusing)
    report = status(agent)
    assert "did not answer: UNAVAILABLE" in report["pod_resources"]["error"]
    assert kubelet.allocate(LICENSE, ["token-0"]).container_responses


def test_a_kubelet_without_get_allocatable_resources_still_lists_holders(
    agent: AgentProcess, kubelet: KubeletStandin, pod_resources_dir: Path
) -> None:
    with PodResourcesStandin(kubelet, pod_resources_dir, allocatable_api=False) as old:
        serve(agent, kubelet, old.socket_path)
        old.admit_pod("default", "web-1", "app", TOKEN, 1)
        report = status(agent)
    assert report["pod_resources"]["error"] is None
    assert resource(report, TOKEN)["kubelet_allocatable"] is None
    assert holders(report, TOKEN) == [("default/web-1/app", ["token-0"])]


def test_an_agent_from_before_status_reports_has_its_line_printed_as_is(socket_dir: Path) -> None:
    """During a package upgrade the command may be new and the running agent still old."""
    path = socket_dir / "control.sock"
    old_line = "2 resource(s), 2/2 registered: example.com/license=5, example.com/token=2"

    async def old_agent(command: str) -> Answer:
        return True, old_line

    def status_command() -> subprocess.CompletedProcess[str]:
        command = [*AGENT_COMMAND, "status", "--control-socket", str(path)]
        return subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)

    async def scenario() -> subprocess.CompletedProcess[str]:
        server = ControlServer(path, old_agent)
        await server.start()
        try:
            return await asyncio.get_running_loop().run_in_executor(None, status_command)
        finally:
            await server.close()

    result = asyncio.run(scenario())
    assert (result.returncode, result.stdout, result.stderr) == (0, old_line + "\n", "")


def test_a_kubelet_that_does_not_answer_costs_status_two_seconds_and_nothing_else(
    agent: AgentProcess, kubelet: KubeletStandin, pod_resources_dir: Path
) -> None:
    stuck = pod_resources_dir / "kubelet.sock"
    release = threading.Event()

    def never_answers(request: object, context: object) -> NoReturn:
        release.wait(TIMEOUT)
        raise RuntimeError("released")

    server = grpc.server(
        ThreadPoolExecutor(2), handlers=[pod_resources_handler(never_answers, None)]
    )
    server.add_insecure_port(f"unix:{stuck}")
    server.start()
    try:
        serve(agent, kubelet, stuck)
        started = time.monotonic()
        report = status(agent)
        assert time.monotonic() - started < TIMEOUT
        assert report["pod_resources"]["error"] == (
            f"the kubelet's PodResources API at {stuck} did not answer within 2 s"
        )
        assert resource(report, LICENSE)["registered"] is True
        assert kubelet.allocate(LICENSE, ["token-0"]).container_responses
    finally:
        release.set()
        server.stop(None).wait()


def test_free_counts_the_healthy_tokens_no_pod_holds() -> None:
    """A held unhealthy token is neither free nor counted twice; without a probe, as before."""
    holders = (
        Holder("default", "web-1", "app", ("token-0", "token-2")),
        Holder("default", "web-2", "app", ("token-3",)),
    )
    unhealthy = (UnhealthyToken("token-2", "pulled"), UnhealthyToken("token-4", "pulled"))
    health = HealthReport("path /dev/ttyUSB{index} every 1 s", unhealthy, None, None, None, None)
    probed = ResourceReport("example.com/dongle", 6, "device-plugin", True, holders, health=health)
    assert (probed.healthy, probed.in_use, probed.free) == (4, 3, 2)
    plain = ResourceReport("example.com/dongle", 6, "device-plugin", True, holders)
    assert (plain.healthy, plain.in_use, plain.free) == (6, 3, 3)
    unknown = ResourceReport("example.com/dongle", 6, "device-plugin", True, None, health=health)
    assert unknown.free is None
