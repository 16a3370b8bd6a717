"""The real agent against the kubelet's real device manager (1.36 and 1.37): registration,
counts, pod admission and container options, a kubelet restart, health."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness import TWO_RESOURCES, AgentProcess, agent_sockets
from tests.kube.devicemanager import DeviceManager, running
from tests.kube.programs import RELEASES

BOTH = {"example.com/token": 2, "example.com/license": 5}
REGISTERED = "Got registration request from device plugin"
SUBDIRECTORY_SOCKETS = [
    "token-resource/example.com_license.sock",
    "token-resource/example.com_token.sock",
]


@pytest.fixture(params=RELEASES)
def manager(
    request: pytest.FixtureRequest, device_plugin_dir: Path, tmp_path: Path
) -> Iterator[DeviceManager]:
    with running(request.param, device_plugin_dir, tmp_path / "devicemanager.log") as dm:
        yield dm


@pytest.fixture
def serving(agent: AgentProcess, manager: DeviceManager) -> AgentProcess:
    agent.write_config(TWO_RESOURCES)
    agent.start()
    manager.wait_for_allocatable(BOTH)
    return agent


def test_registered_counts_follow_the_configuration(
    serving: AgentProcess, manager: DeviceManager
) -> None:
    assert manager.capacity() == {"capacity": BOTH, "allocatable": BOTH, "removed": []}
    # Dialled back on the endpoints in the agent's own subdirectory, the only sockets there.
    assert agent_sockets(serving.device_plugin_dir) == SUBDIRECTORY_SOCKETS
    log = manager.log()
    serving.write_config(
        TWO_RESOURCES.replace('"example.com/token" = 2', '"example.com/token" = 4')
    )
    capacity = manager.wait_for_allocatable({**BOTH, "example.com/token": 4})
    assert capacity == {**BOTH, "example.com/token": 4}
    # A new list on the open stream, not a new registration.
    assert log.count(REGISTERED) == 2 == manager.log().count(REGISTERED)

    # The agent gone, its devices stay counted but none is allocatable; back, it registers.
    serving.stop()
    gone = manager.wait_for(lambda c: not any(c["allocatable"].values()), "allocatable 0")
    assert gone["capacity"] == {**BOTH, "example.com/token": 4}
    serving.start()
    manager.wait_for_allocatable({**BOTH, "example.com/token": 4})
    assert manager.log().count(REGISTERED) == 4
    # Still in its subdirectory: nothing the manager answered made it fall back.
    assert agent_sockets(serving.device_plugin_dir) == SUBDIRECTORY_SOCKETS


def test_admitted_pods_get_tokens_the_agent_prefers_and_its_env(
    serving: AgentProcess, manager: DeviceManager
) -> None:
    first = manager.admit("first", {"app": {"example.com/license": 2, "example.com/token": 1}})
    assert first["admitted"], first
    app = first["containers"]["app"]
    # The agent's GetPreferredAllocation picks the lowest IDs; the manager alone picks at random.
    assert app["device_ids"] == {
        "example.com/license": ["token-0", "token-1"],
        "example.com/token": ["token-0"],
    }
    # Its env: the IDs in token order, though the manager's Allocate lists them in a Go set's.
    assert sorted(app["envs"]) == ["LICENSE_SEATS", "TOKEN_RESOURCE_EXAMPLE_COM_TOKEN"]
    assert app["envs"]["LICENSE_SEATS"] == "token-0,token-1"
    assert app["envs"]["TOKEN_RESOURCE_EXAMPLE_COM_TOKEN"] == "token-0"
    assert (app["mounts"], app["devices"], app["annotations"], app["cdi_devices"]) == (
        [],
        [],
        {},
        [],
    )
    assert "Issuing a GetPreferredAllocation call for container" in manager.log()

    second = manager.admit("second", {"app": {"example.com/license": 2}})
    assert second["containers"]["app"]["device_ids"] == {
        "example.com/license": ["token-2", "token-3"]
    }
    assert second["containers"]["app"]["envs"]["LICENSE_SEATS"] == "token-2,token-3"

    refused = manager.admit("third", {"app": {"example.com/license": 2}})
    assert not refused["admitted"]
    assert "requested number of devices unavailable for example.com/license" in refused["message"]
    assert "Requested: 2, Available: 1" in refused["message"]


def test_a_kubelet_restart_wipes_sockets_and_the_agent_registers_again(
    serving: AgentProcess, manager: DeviceManager, device_plugin_dir: Path
) -> None:
    pod = {"app": {"example.com/license": 2}}
    held = manager.admit("held", pod)["containers"]["app"]
    manager.stop()
    assert not (device_plugin_dir / "kubelet.sock").exists()
    # What the wipe at start takes: a socket left beside kubelet.sock; a regular file, the
    # checkpoint and the agent's subdirectory stay.
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(str(device_plugin_dir / "stale.sock"))
    stale.close()
    (device_plugin_dir / "notes.txt").write_text("not a socket\n")
    checkpoint = json.loads((device_plugin_dir / "kubelet_internal_checkpoint").read_text())
    assert [
        (
            e["PodUID"],
            e["ContainerName"],
            e["ResourceName"],
            sorted(i for ids in e["DeviceIDs"].values() for i in ids),
        )
        for e in checkpoint["Data"]["PodDeviceEntries"]
    ] == [("uid-held", "app", "example.com/license", ["token-0", "token-1"])]

    manager.start()
    assert not (device_plugin_dir / "stale.sock").exists()
    assert (device_plugin_dir / "notes.txt").exists()
    assert (device_plugin_dir / "token-resource").is_dir()
    # The agent saw the new kubelet.sock and registered both resources again.
    manager.wait_for_allocatable(BOTH)
    assert manager.log().count(REGISTERED) == 4
    assert agent_sockets(serving.device_plugin_dir) == SUBDIRECTORY_SOCKETS
    # The checkpoint kept the pod's devices: a new pod gets only the others (the agent would
    # prefer token-0 to token-2), and the held pod's container its own, without a new Allocate.
    newcomer = manager.admit("newcomer", {"app": {"example.com/license": 3}})
    assert newcomer["containers"]["app"]["device_ids"] == {
        "example.com/license": ["token-2", "token-3", "token-4"]
    }
    again = manager.options("held", pod)["app"]
    assert again["device_ids"] == held["device_ids"]
    assert again["envs"] == held["envs"]
    assert "Needs to re-allocate device plugin resources" not in manager.log()
    assert serving.log().count("example.com/license: allocated") == 2


def test_an_unhealthy_token_leaves_allocatable_and_the_pod_status(
    agent: AgentProcess, manager: DeviceManager, tmp_path: Path
) -> None:
    dongles = tmp_path / "dongles"
    dongles.mkdir()
    for index in range(3):
        (dongles / f"dongle{index}").touch()
    agent.write_config(
        '[resources."example.com/dongle"]\ncount = 3\n'
        '[resources."example.com/dongle".probe]\n'
        f'path = "{dongles}/dongle{{index}}"\ninterval = 1\nfailure_threshold = 1\n'
    )
    agent.start()
    manager.wait_for_allocatable({"example.com/dongle": 3})
    admitted = manager.admit("user", {"app": {"example.com/dongle": 1}})
    assert admitted["containers"]["app"]["device_ids"] == {"example.com/dongle": ["token-0"]}

    (dongles / "dongle0").unlink()
    capacity = manager.wait_for_allocatable({"example.com/dongle": 2})
    assert capacity == {"example.com/dongle": 3}
    # The manager tells the kubelet which pod to update, and its status shows the device.
    assert manager.program.wait_for_event("pod_update") == [{"pods": ["uid-user"]}]
    assert manager.status("user") == {"app": {"example.com/dongle": {"token-0": "Unhealthy"}}}

    (dongles / "dongle0").touch()
    manager.wait_for_allocatable({"example.com/dongle": 3})
    assert manager.status("user") == {"app": {"example.com/dongle": {"token-0": "Healthy"}}}
