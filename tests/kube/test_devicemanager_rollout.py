"""Two agent instances on one node, as a DaemonSet rolling with ``maxSurge: 1`` runs them,
against the kubelet's real device manager: a 1.37 manager keys endpoints by resource and socket
path, so each instance serves on sockets named after itself and the resource never drops to 0;
on a 1.36 one the new instance waits until the old one has left (docs/kubernetes.md). And the
1.37 manager's refusal of a socket path it still counts as connected."""

from __future__ import annotations

import asyncio
from pathlib import Path

from tests.dra.node import status_json
from tests.harness import AgentProcess, agent_sockets, rollout_pair
from tests.kube.controlplane import ControlPlane
from tests.kube.devicemanager import DeviceManager, running
from tests.kube.test_cp_dra import BASE_RBAC, NAMESPACE_YAML
from token_resource.kubelet.registration import KubeletClient, RegistrationError

TOKEN = "example.com/token"
INSTANCE = "TOKEN_RESOURCE_INSTANCE"
OLD_POD, NEW_POD = "0f6d3c5a-old0-4e1b-9a7c-000000000001", "0f6d3c5a-new0-4e1b-9a7c-000000000002"
# The 1.37 manager's log line for a resource whose last endpoint left (allocatable 0).
LAST_ENDPOINT_GONE = "Last device plugin for this resource disconnected"
REGISTERED = "Got registration request from device plugin"


def node_config(control_plane: ControlPlane, node: str, tmp_path: Path, kubelet: str) -> str:
    """The agent's config on a Node whose kubelet says it is ``kubelet``: one device-plugin
    resource, and the API server to read that version from with the base DaemonSet's
    ServiceAccount (deploy/kubernetes/base/agent/rbac.yaml, applied by kubectl), its token
    bound to a pod on the node."""
    control_plane.add_node(node, kubelet_version=kubelet)
    for manifest in (NAMESPACE_YAML, BASE_RBAC):
        control_plane.kubectl("apply", "-f", str(manifest))
    token = control_plane.service_account_token("token-resource", "token-resource", node)
    kubeconfig = control_plane.token_kubeconfig(token, tmp_path / "kubeconfig")
    return (
        f'[kubernetes]\nkubeconfig = "{kubeconfig}"\nnode_name = "{node}"\n'
        f'[resources]\n"{TOKEN}" = 3\n'
    )


def admitted_token(manager: DeviceManager, pod: str) -> str:
    result = manager.admit(pod, {"app": {TOKEN: 1}})
    assert result["admitted"], result
    env: str = result["containers"]["app"]["envs"]["TOKEN_RESOURCE_EXAMPLE_COM_TOKEN"]
    return env


def test_a_rollout_on_a_1_37_kubelet_never_drops_the_resource(
    control_plane: ControlPlane, device_plugin_dir: Path, tmp_path: Path
) -> None:
    config = node_config(control_plane, "dm-rollout-137", tmp_path, "v1.37.2")
    with (
        running("1.37", device_plugin_dir, tmp_path / "devicemanager.log") as manager,
        rollout_pair(tmp_path, device_plugin_dir) as (old, new),
    ):
        old.write_config(config)
        old.start(env={INSTANCE: OLD_POD})
        manager.wait_for_allocatable({TOKEN: 3})
        assert admitted_token(manager, "before") == "token-0"

        new.write_config(config)
        new.start(env={INSTANCE: NEW_POD})
        report = status_json(new)["instance"]
        assert report["beside"] is True, report
        assert "kubelet v1.37.2" in report["reason"]
        assert agent_sockets(device_plugin_dir) == [
            f"token-resource/example.com_token-{NEW_POD}.sock",
            f"token-resource/example.com_token-{OLD_POD}.sock",
        ]
        assert manager.log().count(REGISTERED) == 2
        # The manager calls the endpoint that connected last: the new instance.
        assert admitted_token(manager, "during") == "token-1"
        new.wait_for_log("allocated token-1")
        assert "allocated token-1" not in old.log()

        assert old.stop() == 0
        assert agent_sockets(device_plugin_dir) == [
            f"token-resource/example.com_token-{NEW_POD}.sock"
        ]
        assert admitted_token(manager, "after") == "token-2"
        assert manager.capacity()["allocatable"] == {TOKEN: 3}
        # Through the whole rollout, asked every 2 ms: 3, never anything else.
        assert manager.allocatable_seen() == [{TOKEN: 3}]
        assert LAST_ENDPOINT_GONE not in manager.log()

        # The last instance gone, the resource drops, as the checks above would have seen.
        assert new.stop() == 0
        manager.wait_for(lambda c: c["allocatable"] == {TOKEN: 0}, "allocatable 0")
        assert manager.allocatable_seen()[-1] == {TOKEN: 0}
        assert LAST_ENDPOINT_GONE in manager.log()


def test_on_a_1_36_kubelet_the_new_instance_waits_for_the_old_one(
    control_plane: ControlPlane, device_plugin_dir: Path, tmp_path: Path
) -> None:
    config = node_config(control_plane, "dm-rollout-136", tmp_path, "v1.36.3")
    with (
        running("1.36", device_plugin_dir, tmp_path / "devicemanager.log") as manager,
        rollout_pair(tmp_path, device_plugin_dir) as (old, new),
    ):
        old.write_config(config)
        old.start(env={INSTANCE: OLD_POD})
        manager.wait_for_allocatable({TOKEN: 3})
        new.write_config(config)
        new.start(env={INSTANCE: NEW_POD}, wait_ready=False)
        new.wait_for_log("waiting for the other instance to leave")
        report = status_json(new)["instance"]
        assert report["beside"] is False
        assert (
            f"{TOKEN} is served by device-plugin, and kubelet v1.36.3 keeps one endpoint per "
            "device-plugin resource (several from 1.37)"
        ) in report["reason"]
        # One at a time, each on the fixed names: the new one registered nothing yet.
        assert manager.log().count(REGISTERED) == 1
        assert agent_sockets(device_plugin_dir) == ["token-resource/example.com_token.sock"]

        assert old.stop() == 0
        new.notify.wait_for(lambda lines: "READY=1" in lines)
        manager.wait_for_allocatable({TOKEN: 3})
        assert manager.log().count(REGISTERED) == 2
        assert admitted_token(manager, "after") == "token-0"
        new.wait_for_log("allocated token-0")


def register(directory: Path, endpoint: str, resource: str) -> str | None:
    """A Register of ``endpoint`` sent to the manager by the test: the refusal, if any."""

    async def send() -> str | None:
        client = KubeletClient(directory / "kubelet.sock")
        try:
            await client.register(endpoint, resource)
        except RegistrationError as error:
            return str(error)
        finally:
            await client.close()
        return None

    return asyncio.run(send())


def test_a_socket_path_the_1_37_kubelet_still_counts_as_connected_is_left_for_a_new_one(
    agent: AgentProcess, device_plugin_dir: Path, tmp_path: Path
) -> None:
    """A 1.37 manager refuses a Register of a path it holds, and the refusal forgets the client
    it had there, so that path stays refused until the kubelet restarts."""
    with running("1.37", device_plugin_dir, tmp_path / "devicemanager.log") as manager:
        agent.write_config(f'[resources]\n"{TOKEN}" = 3\n')
        agent.start()
        manager.wait_for_allocatable({TOKEN: 3})
        endpoint = "token-resource/example.com_token.sock"
        refusal = register(device_plugin_dir, endpoint, TOKEN)
        assert refusal is not None
        assert f"device plugin already connected: /var/lib/kubelet/device-plugins/{endpoint}" in (
            refusal
        )
        # The agent's socket lost: it serves again, and its Register of the same path is
        # refused in turn; it moves to a socket of a new name instead of falling back.
        (device_plugin_dir / endpoint).unlink()
        agent.wait_for_log("the kubelet will not take token-resource/example.com_token.sock again")
        agent.write_config(f'[resources]\n"{TOKEN}" = 4\n')
        manager.wait_for_allocatable({TOKEN: 4})
        assert agent_sockets(device_plugin_dir) == ["token-resource/example.com_token.2.sock"]
        assert "does not take sockets in" not in agent.log()
        assert admitted_token(manager, "pod") == "token-0"
