"""Where the agent's plugin sockets live, and what a kubelet (re)start costs: the real agent
against the kubelet stand-in.

The sockets live in the agent's own directory inside the device-plugin directory, which a
starting kubelet leaves alone: a restart costs one Register per resource and no new socket. A
kubelet that will not take such an endpoint gets them beside kubelet.sock instead.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
from collections.abc import Callable
from pathlib import Path

from tests.harness import TWO_RESOURCES, AgentProcess, agent_sockets
from tests.standin import kubelet as kubelet_module
from tests.standin.kubelet import KubeletStandin, KubeletView, serves_exactly

COUNTS = {"example.com/token": 2, "example.com/license": 5}
OWN = "token-resource"


def inodes(directory: Path) -> dict[str, int]:
    return {name: (directory / name).stat().st_ino for name in agent_sockets(directory)}


def registered_times(times: int) -> Callable[[KubeletView], bool]:
    def holds(view: KubeletView) -> bool:
        return serves_exactly(COUNTS)(view) and all(
            view.resources[name].registrations == times and view.resources[name].stream_open
            for name in COUNTS
        )

    holds.__qualname__ = f"every resource registered {times} time(s), streams open"
    return holds


def layout(agent: AgentProcess) -> dict[str, str]:
    result = agent.cli("status", "--json")
    assert result.returncode == 0, result.stderr
    sockets: dict[str, str] = json.loads(result.stdout)["plugin_sockets"]
    return sockets


def test_kubelet_restarts_register_again_and_serve_nothing_anew(
    agent: AgentProcess, kubelet: KubeletStandin
) -> None:
    agent.write_config(TWO_RESOURCES)
    agent.start()
    kubelet.wait_for(registered_times(1))
    before = inodes(agent.device_plugin_dir)
    assert sorted(before) == [f"{OWN}/example.com_license.sock", f"{OWN}/example.com_token.sock"]
    for restart in range(1, 4):
        kubelet.restart()
        view = kubelet.wait_for(registered_times(restart + 1))
        assert view.resources["example.com/token"].endpoint == f"{OWN}/example.com_token.sock"
        # The same socket files: served all along, only registered again.
        assert inodes(agent.device_plugin_dir) == before
    assert "serving on a new one" not in agent.log()
    assert layout(agent) == {
        "directory": str(agent.device_plugin_dir / OWN),
        "layout": "subdirectory",
    }


def test_a_removed_socket_directory_is_made_again_and_served(
    agent: AgentProcess, kubelet: KubeletStandin, tmp_path: Path
) -> None:
    agent.write_config(TWO_RESOURCES)
    agent.start()
    kubelet.wait_for(registered_times(1))
    own = agent.device_plugin_dir / OWN
    # Renamed away, then deleted: a plain rm -rf races the agent, which serves again at the
    # first socket that goes (the rm then finds the directory not empty and leaves it).
    own.rename(tmp_path / "gone")
    shutil.rmtree(tmp_path / "gone")
    kubelet.wait_for(registered_times(2))
    assert sorted(agent_sockets(agent.device_plugin_dir)) == [
        f"{OWN}/example.com_license.sock",
        f"{OWN}/example.com_token.sock",
    ]
    # Watched again: a socket deleted now is noticed too.
    (own / "example.com_token.sock").unlink()
    view = kubelet.wait_for(
        lambda view: (
            view.resources["example.com/token"].registrations == 3 and serves_exactly(COUNTS)(view)
        )
    )
    assert view.resources["example.com/license"].registrations == 2


def test_a_kubelet_that_refuses_the_directory_gets_the_sockets_beside_its_own(
    agent: AgentProcess, device_plugin_dir: Path
) -> None:
    with KubeletStandin(
        device_plugin_dir, subdirectory_endpoints=kubelet_module.REFUSED
    ) as kubelet:
        agent.write_config(TWO_RESOURCES)
        agent.start()
        kubelet.wait_for(serves_exactly(COUNTS))
        assert agent_sockets(device_plugin_dir) == [
            "token-resource.example.com_license.sock",
            "token-resource.example.com_token.sock",
        ]
        assert layout(agent) == {"directory": str(device_plugin_dir), "layout": "top-level"}
        status = agent.cli("status").stdout.splitlines()
        assert status[-1] == (
            f"device-plugin sockets: {device_plugin_dir} (beside kubelet.sock: the kubelet did "
            "not take the agent's own directory)"
        )
        # Said once, whatever number of resources it concerned.
        assert agent.log().count("the kubelet does not take sockets in") == 1
        # Beside kubelet.sock, a restart wipes them: served again, and registered.
        kubelet.restart()
        view = kubelet.wait_for(
            lambda view: (
                serves_exactly(COUNTS)(view)
                and all(view.resources[name].registrations >= 2 for name in COUNTS)
            )
        )
        assert view.resources["example.com/token"].endpoint == (
            "token-resource.example.com_token.sock"
        )


def test_a_kubelet_that_never_dials_the_directory_gets_the_sockets_beside_its_own(
    agent: AgentProcess, device_plugin_dir: Path
) -> None:
    # A 1.24-era kubelet answers Register first; this one then never connects.
    with KubeletStandin(
        device_plugin_dir,
        register_first=True,
        subdirectory_endpoints=kubelet_module.NEVER_DIALLED,
    ) as kubelet:
        agent.write_config(TWO_RESOURCES)
        agent.start()
        # The agent waits 10 s for the dial-back before it moves the sockets.
        view = kubelet.wait_for(serves_exactly(COUNTS), timeout=60)
        assert view.resources["example.com/token"].endpoint == (
            "token-resource.example.com_token.sock"
        )
        assert "it never connected to token-resource/" in agent.log()
        assert layout(agent)["layout"] == "top-level"


def test_a_stale_kubelet_sock_is_waiting_for_the_kubelet(
    agent: AgentProcess, device_plugin_dir: Path
) -> None:
    # What a reboot leaves: the old kubelet's socket file, nobody listening on it.
    with socket.socket(socket.AF_UNIX) as old:
        old.bind(str(device_plugin_dir / "kubelet.sock"))
    agent.write_config(TWO_RESOURCES)
    agent.start()
    agent.wait_for_log("refuses connections (left from before a reboot?)")
    lines = agent.notify.assignments()
    assert any(line.startswith("STATUS=") and "waiting for the kubelet" in line for line in lines)
    result = agent.cli("status")
    assert "waiting for the kubelet" in result.stdout.splitlines()[0], result.stdout
    with KubeletStandin(device_plugin_dir) as kubelet:  # replaces the socket, as kubelets do
        kubelet.wait_for(registered_times(1))
        agent.notify.wait_for(lambda lines: any("2/2 registered" in line for line in lines))
    log = agent.log()
    assert log.count("refuses connections") == 1, log
    assert "registration failed" not in log, log
    assert os.path.exists(device_plugin_dir / OWN)
