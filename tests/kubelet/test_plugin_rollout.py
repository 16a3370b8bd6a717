"""Two device-plugin instances on one node, as a DaemonSet rolling with ``maxSurge: 1`` runs
them, against the kubelet stand-in's 1.37 device manager (endpoints by resource and socket
path) and its 1.36 one; the same rollout against the real managers is
tests/kube/test_devicemanager_rollout.py."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.dra.node import kubeconfig_of, status_json
from tests.harness import AgentProcess, agent_sockets, rollout_pair
from tests.standin.apiserver import ApiServerStandin, CertificateAuthority
from tests.standin.kubelet import KubeletStandin, KubeletView

NODE = "node-a"
TOKEN = "example.com/token"
INSTANCE = "TOKEN_RESOURCE_INSTANCE"
OLD_POD, NEW_POD = "pod-old", "pod-new"
TIMEOUT = 30.0
DROPPED = "allocatable 0"


@pytest.fixture
def agents(tmp_path: Path, device_plugin_dir: Path) -> Iterator[tuple[AgentProcess, AgentProcess]]:
    with rollout_pair(tmp_path, device_plugin_dir) as pair:
        yield pair


def config(apiserver: ApiServerStandin, tmp_path: Path, kubelet_version: str) -> str:
    apiserver.add_node(NODE, kubelet_version=kubelet_version)
    kubeconfig = kubeconfig_of(apiserver, tmp_path)
    return (
        f'[kubernetes]\nkubeconfig = "{kubeconfig}"\nnode_name = "{NODE}"\n'
        f'[resources]\n"{TOKEN}" = 3\n'
    )


def endpoints(view: KubeletView) -> tuple[str, ...]:
    resource = view.resources.get(TOKEN)
    return () if resource is None else resource.endpoints


def dropped(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if DROPPED in r.getMessage()]


def test_on_1_37_the_instances_serve_side_by_side_and_the_resource_never_drops(
    ca: CertificateAuthority,
    device_plugin_dir: Path,
    agents: tuple[AgentProcess, AgentProcess],
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="kubelet-standin")
    old, new = agents
    with (
        ApiServerStandin(ca) as apiserver,
        KubeletStandin(device_plugin_dir, device_manager="1.37") as kubelet,
    ):
        text = config(apiserver, tmp_path, "v1.37.2")
        old.write_config(text)
        old.start(env={INSTANCE: OLD_POD})
        kubelet.wait_for(
            lambda v: endpoints(v) == (f"token-resource/example.com_token-{OLD_POD}.sock",), TIMEOUT
        )
        new.write_config(text)
        new.start(env={INSTANCE: NEW_POD})
        both = (
            f"token-resource/example.com_token-{OLD_POD}.sock",
            f"token-resource/example.com_token-{NEW_POD}.sock",
        )
        view = kubelet.wait_for(lambda v: endpoints(v) == both, TIMEOUT)
        assert status_json(new)["instance"]["beside"] is True
        # The newest is the one the kubelet calls.
        assert view.resources[TOKEN].endpoint == both[1]
        response = kubelet.allocate(TOKEN, ["token-1"])
        assert response.container_responses[0].envs["TOKEN_RESOURCE_EXAMPLE_COM_TOKEN"] == "token-1"
        new.wait_for_log("allocated token-1")

        assert old.stop() == 0
        view = kubelet.wait_for(lambda v: endpoints(v) == both[1:], TIMEOUT)
        assert view.resources[TOKEN].allocatable == 3
        assert agent_sockets(device_plugin_dir) == [both[1]]
        assert dropped(caplog) == []
        # The last one gone, the resource drops, as the check above would have seen.
        assert new.stop() == 0
        kubelet.wait_for(lambda v: v.resources[TOKEN].allocatable == 0, TIMEOUT)
        assert len(dropped(caplog)) == 1


def test_on_1_36_the_new_instance_waits_and_serves_on_the_fixed_names(
    ca: CertificateAuthority,
    device_plugin_dir: Path,
    agents: tuple[AgentProcess, AgentProcess],
    tmp_path: Path,
) -> None:
    old, new = agents
    with (
        ApiServerStandin(ca) as apiserver,
        KubeletStandin(device_plugin_dir, device_manager="1.36") as kubelet,
    ):
        text = config(apiserver, tmp_path, "v1.36.2")
        fixed = "token-resource/example.com_token.sock"
        old.write_config(text)
        old.start(env={INSTANCE: OLD_POD})
        kubelet.wait_for(lambda v: endpoints(v) == (fixed,), TIMEOUT)
        new.write_config(text)
        new.start(env={INSTANCE: NEW_POD}, wait_ready=False)
        new.wait_for_log("waiting for the other instance to leave")
        assert kubelet.snapshot().resources[TOKEN].registrations == 1
        assert old.stop() == 0
        new.notify.wait_for(lambda lines: "READY=1" in lines)
        view = kubelet.wait_for(
            lambda v: v.resources[TOKEN].registrations == 2 and v.resources[TOKEN].allocatable == 3,
            TIMEOUT,
        )
        assert endpoints(view) == (fixed,)
