"""A package upgrade's handover (``token-resource handover``): the running agent starts the
installed code as its successor, which takes over before it leaves, against the kubelet
stand-in's 1.37 device manager (two endpoints per resource: the resource never drops) and its
1.36 one (one at a time: the successor is ready first, and registers as the old one leaves);
a successor that cannot start leaves the running agent serving."""

from __future__ import annotations

import logging
import socket
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.dra.node import kubeconfig_of
from tests.harness import AgentProcess, agent_sockets
from tests.standin.apiserver import ApiServerStandin, CertificateAuthority
from tests.standin.kubelet import KubeletStandin, KubeletView

NODE = "node-a"
TOKEN = "example.com/token"
FIXED = "token-resource/example.com_token.sock"
TIMEOUT = 30.0
DROPPED = "allocatable 0"


@pytest.fixture
def agent(tmp_path: Path, device_plugin_dir: Path) -> Iterator[AgentProcess]:
    agent = AgentProcess(tmp_path / "agent", device_plugin_dir)
    yield agent
    agent.kill()


def configure(
    agent: AgentProcess, apiserver: ApiServerStandin, tmp_path: Path, version: str
) -> None:
    apiserver.add_node(NODE, kubelet_version=version)
    kubeconfig = kubeconfig_of(apiserver, tmp_path)
    agent.write_config(
        f'[kubernetes]\nkubeconfig = "{kubeconfig}"\nnode_name = "{NODE}"\n'
        f'[resources]\n"{TOKEN}" = 3\n'
    )


@contextmanager
def serving(
    ca: CertificateAuthority,
    device_plugin_dir: Path,
    agent: AgentProcess,
    tmp_path: Path,
    release: str,
) -> Iterator[KubeletStandin]:
    """The agent serving a kubelet of ``release`` (its Node says which) on the fixed names."""
    with (
        ApiServerStandin(ca) as apiserver,
        KubeletStandin(device_plugin_dir, device_manager=release) as kubelet,
    ):
        configure(agent, apiserver, tmp_path, f"v{release}.2")
        agent.start()
        kubelet.wait_for(lambda v: endpoints(v) == (FIXED,), TIMEOUT)
        yield kubelet


def endpoints(view: KubeletView) -> tuple[str, ...]:
    resource = view.resources.get(TOKEN)
    return () if resource is None else resource.endpoints


def handed_over(agent: AgentProcess) -> tuple[subprocess.CompletedProcess[str], int, int]:
    """The handover done: (its command's outcome, the old pid, the predecessor's exit status)."""
    predecessor = agent.process
    assert predecessor is not None
    mark = len(agent.notify.assignments())
    result = agent.handover()
    assert result.returncode == 0, result.stderr
    assert agent.process is not None
    assert agent.process is not predecessor
    successor = agent.process.pid
    assert result.stdout.startswith(f"handed over to pid {successor}: token-resource "), result
    # The successor is the service's main process (MAINPID=, the old one's), then ready (its).
    messages = agent.notify.assignments()[mark:]
    assert f"MAINPID={successor}" in messages, messages
    assert "READY=1" in messages[messages.index(f"MAINPID={successor}") :], messages
    assert agent.status_json()["agent"]["pid"] == successor
    return result, predecessor.pid, predecessor.wait(1)


def test_on_1_37_the_successor_is_registered_before_the_agent_leaves(
    ca: CertificateAuthority,
    device_plugin_dir: Path,
    agent: AgentProcess,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="kubelet-standin")
    with serving(ca, device_plugin_dir, agent, tmp_path, "1.37") as kubelet:
        _, old, status = handed_over(agent)
        assert status == 0
        new = f"token-resource/example.com_token-handover-{old}.sock"
        view = kubelet.wait_for(lambda v: endpoints(v) == (new,), TIMEOUT)
        assert view.resources[TOKEN].allocatable == 3
        assert [r.getMessage() for r in caplog.records if DROPPED in r.getMessage()] == []
        assert agent_sockets(device_plugin_dir) == [new]
        assert agent.process is not None
        assert f"stopping: handed over to pid {agent.process.pid}" in agent.log()
        # The successor serves: the kubelet's allocation, a reload, and a second handover.
        response = kubelet.allocate(TOKEN, ["token-1"])
        assert response.container_responses[0].envs["TOKEN_RESOURCE_EXAMPLE_COM_TOKEN"] == "token-1"
        assert agent.cli("reload").returncode == 0
        handed_over(agent)
        assert agent.stop() == 0


def test_on_1_36_the_successor_waits_ready_and_registers_as_the_agent_leaves(
    ca: CertificateAuthority, device_plugin_dir: Path, agent: AgentProcess, tmp_path: Path
) -> None:
    with serving(ca, device_plugin_dir, agent, tmp_path, "1.36") as kubelet:
        _, old, status = handed_over(agent)
        assert status == 0
        view = kubelet.wait_for(
            lambda v: v.resources[TOKEN].registrations == 2 and v.resources[TOKEN].allocatable == 3,
            TIMEOUT,
        )
        assert endpoints(view) == (FIXED,)
        log = agent.log()
        assert f"instance handover-{old}: alone, one instance at a time" in log
        assert agent.stop() == 0


def test_a_successor_that_cannot_start_leaves_the_agent_serving(
    device_plugin_dir: Path, agent: AgentProcess
) -> None:
    with KubeletStandin(device_plugin_dir) as kubelet:
        agent.write_config(f'[resources]\n"{TOKEN}" = 3\n')
        agent.start()
        kubelet.wait_for(lambda v: endpoints(v) == (FIXED,), TIMEOUT)
        running = agent.process
        assert running is not None
        agent.write_config(f'[resources]\n"{TOKEN}" = "three"\n')

        result = agent.handover()
        assert result.returncode == 1
        assert "exited with status 1 before it could serve" in result.stderr, result.stderr
        assert "the running agent goes on serving" in result.stderr
        assert agent.process is running
        assert running.poll() is None
        assert agent.status_json()["agent"]["pid"] == running.pid
        assert "handover failed, this agent goes on serving" in agent.log()
        assert kubelet.snapshot().resources[TOKEN].allocatable == 3
        assert agent.stop() == 0


def test_a_reload_of_a_setting_read_at_start_hands_over_when_asked(
    device_plugin_dir: Path, agent: AgentProcess, tmp_path: Path
) -> None:
    """``reload --else-handover`` (the Ansible role's): a file whose [metrics] changed is
    refused by the running agent and read by a successor."""
    textfile = tmp_path / "token-resource.prom"
    with KubeletStandin(device_plugin_dir) as kubelet:
        agent.write_config(f'[resources]\n"{TOKEN}" = 3\n')
        agent.start()
        kubelet.wait_for(lambda v: endpoints(v) == (FIXED,), TIMEOUT)
        running = agent.process
        assert running is not None
        agent.write_config(f'[metrics]\ntextfile = "{textfile}"\n[resources]\n"{TOKEN}" = 3\n')
        plain = agent.cli("reload")
        assert plain.returncode == 1
        assert "this takes a new agent (token-resource handover" in plain.stderr, plain.stderr

        result = agent.handover("reload", "--else-handover")
        assert result.returncode == 0, result.stderr
        assert "metrics.textfile" in result.stdout
        assert agent.process is not running
        assert running.wait(1) == 0
        assert "token_resource_tokens_configured" in textfile.read_text()
        assert agent.stop() == 0


def test_an_agent_older_than_the_handover_is_named_for_a_restart(tmp_path: Path) -> None:
    """An agent of a release before the handover answers as its control socket did (an unknown
    command); the command then exits 3, which the package's script answers by a restart."""
    agent = AgentProcess(tmp_path / "agent", tmp_path)
    agent.control_socket.parent.mkdir(parents=True)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
        server.bind(str(agent.control_socket))
        server.listen()

        def answer() -> None:
            connection, _ = server.accept()
            with connection:
                connection.recv(64)
                connection.sendall(b"error unknown command 'handover'; known: reload, status\n")

        older = threading.Thread(target=answer)
        older.start()
        try:
            result = agent.cli("handover", "--timeout", "5")
        finally:
            older.join(10)
            agent.kill()
    assert result.returncode == 3, result
    assert "older than the handover: restart it" in result.stderr
