"""The real agent's DRA driver against the kubelet's real plugin manager and DRA manager
(``dramanager`` program, Kubernetes 1.36 and 1.37) and a real control plane: registration, the
claim the real scheduler allocates from the agent's slices, prepared and unprepared by the real
DRA manager (CDI spec, CDI device IDs), a kubelet restart, and the health stream."""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.harness import AgentProcess
from tests.kube.client import wait_until
from tests.kube.controlplane import ControlPlane
from tests.kube.lines import Program
from tests.kube.programs import RELEASES, program
from tests.paths import short_temporary_directory

DRIVER = "tokens.example.com"
TOKEN = "example.com/token"
CLASS = "token.example.com"
ENV = "TOKEN_RESOURCE_EXAMPLE_COM_TOKEN"
TIMEOUT = 60.0  # a busy 2-core machine, and the scheduler's own retries
# What the agent lists in PluginInfo.supported_versions (docs/dra.md).
AGENT_VERSIONS = ["v1.DRAPlugin", "v1beta1.DRAPlugin", "v1.DRAResourceHealth"]
# The health service each release's kubelet opens: 1.36 knows only v1alpha1 and dials it on
# every driver; 1.37 picks v1 from the registration's list.
HEALTH_SERVICE = {"1.36": None, "1.37": "v1.DRAResourceHealth"}
# The real manager's log events that mean a broken health stream (go/harness/dramanager).
STREAM_FAILURES = ("error-log", "health-stream-failed", "health-stream-ended")


@pytest.fixture
def plane(control_plane: ControlPlane) -> Iterator[ControlPlane]:
    """The run's control plane (tests/kube/conftest.py) with the tokens' DeviceClass, taken
    away again: the chart's tests install one of that name, owned by their release."""
    control_plane.ensure(
        "/apis/resource.k8s.io/v1/deviceclasses",
        {
            "metadata": {"name": CLASS},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]},
        },
    )
    yield control_plane
    control_plane.admin.delete(f"/apis/resource.k8s.io/v1/deviceclasses/{CLASS}")


@dataclass
class Node:
    """One node: its Node object, the agent as its DRA driver, the kubelet's managers."""

    name: str
    plane: ControlPlane
    dirs: dict[str, Path]
    agent: AgentProcess
    kubelet: Program

    def pool(self) -> list[dict[str, Any]]:
        """The devices of the agent's slices of this node."""
        answer = self.plane.admin.get(
            f"/apis/resource.k8s.io/v1/resourceslices?fieldSelector=spec.nodeName={self.name}"
        )
        return [device for item in answer["items"] for device in item["spec"]["devices"]]

    def allocated_pod(self, name: str) -> tuple[dict[str, Any], dict[str, Any]]:
        """A claim for one token and a pod using it, placed by the real scheduler (which
        allocates the claim from the agent's slices); both as they are once it has."""
        resource = "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims"
        request = {"name": "token", "exactly": {"deviceClassName": CLASS, "count": 1}}
        self.plane.admin.create(
            resource, {"metadata": {"name": name}, "spec": {"devices": {"requests": [request]}}}
        )
        container = {
            "name": "app",
            "image": "example:1",
            "resources": {"claims": [{"name": "t", "request": "token"}]},
        }
        spec = {
            "nodeSelector": {"kubernetes.io/hostname": self.name},
            "resourceClaims": [{"name": "t", "resourceClaimName": name}],
            "containers": [container],
            # The API server's TaintNodesByCondition puts this on every new Node; without a
            # node-lifecycle controller (tests/kube/controlplane.py) nothing takes it off.
            "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists"}],
        }
        self.plane.admin.create(
            "/api/v1/namespaces/default/pods", {"metadata": {"name": name}, "spec": spec}
        )

        seen: list[Any] = []

        def placed() -> tuple[dict[str, Any], dict[str, Any]] | None:
            pod = self.plane.admin.get(f"/api/v1/namespaces/default/pods/{name}")
            claim = self.plane.admin.get(f"{resource}/{name}")
            seen[:] = [pod.get("status"), claim.get("status")]
            reserved = claim.get("status", {}).get("reservedFor", [])
            if pod["spec"].get("nodeName") == self.name and reserved:
                return pod, claim
            return None

        try:
            return wait_until(f"pod {name} scheduled with its claim", placed, TIMEOUT)
        except AssertionError as error:
            raise AssertionError(f"{error}; pod and claim status: {seen}") from None


def agent_config(node: str, dirs: dict[str, Path], kubeconfig: Path, resource: str) -> str:
    return (
        f'[dra]\ndriver = "{DRIVER}"\nplugins_registry_dir = "{dirs["reg"]}"\n'
        f'plugins_dir = "{dirs["plugins"]}"\ncdi_dir = "{dirs["cdi"]}"\n'
        f'[kubernetes]\nkubeconfig = "{kubeconfig}"\nnode_name = "{node}"\n'
        f'[resources."{TOKEN}"]\ncount = 2\nadvertise = "dra"\n{resource}'
    )


@contextlib.contextmanager
def start_node(
    release: str, plane: ControlPlane, tmp_path: Path, name: str, resource: str = ""
) -> Iterator[Node]:
    """The node ``name`` of ``release``, its agent registered, its pool published."""
    plane.add_node(name)
    kubeconfig = plane.node_kubeconfig(name, tmp_path / "node.kubeconfig")
    with short_temporary_directory("tr-kdra-") as root:
        dirs = {key: root / key for key in ("dp", "reg", "plugins", "cdi", "state")}
        for path in dirs.values():
            path.mkdir()
        agent = AgentProcess(tmp_path / "agent", dirs["dp"])
        command = [str(program(release, "dramanager")), "--plugins-registry", str(dirs["reg"])]
        command += ["--state-dir", str(dirs["state"]), "--kubeconfig", str(kubeconfig)]
        kubelet = Program([*command, "--node", name], tmp_path / "dramanager.log")
        try:
            kubelet.wait_for_event("started")
            agent.write_config(agent_config(name, dirs, kubeconfig, resource))
            agent.start()
            node = Node(name, plane, dirs, agent, kubelet)
            registered(node, 1)
            # The manager wiped the node's slices at its start; the agent's pool is there.
            wait_until("the agent's pool", lambda: len(node.pool()) == 2, TIMEOUT)
            yield node
        finally:
            kubelet.stop()
            agent.kill()
            plane.delete_node(name)  # its slices go with it (owner reference)


def registered(node: Node, count: int) -> None:
    """The ``count``-th registration of the agent is the one the manager holds."""
    calls = node.kubelet.wait_for_event("registration", count=2 * count, timeout=TIMEOUT)
    assert [call["call"] for call in calls[-2:]] == ["validate", "register"], calls
    assert all("error" not in call for call in calls), calls
    (held,) = node.kubelet.call("registered")
    assert (held["driver"], held["versions"]) == (DRIVER, AGENT_VERSIONS)
    # The service socket of the agent's start: dra-<start>.sock (dra.registration).
    service = rf"{node.dirs['plugins'] / DRIVER}/dra-[0-9a-f]{{8}}\.sock"
    assert re.fullmatch(service, held["endpoint"]), held
    chosen = node.kubelet.wait_for_event("plugin-registered", count=count)[-1]
    assert (chosen["driverName"], chosen["chosenService"]) == (DRIVER, "v1.DRAPlugin")


@pytest.fixture(params=RELEASES)
def release(request: pytest.FixtureRequest) -> str:
    value: str = request.param
    return value


def node_name(release: str, test: str) -> str:
    return f"n{release.replace('.', '')}-{test}"


def spec_of(node: Node, claim: dict[str, Any]) -> dict[str, Any]:
    path = node.dirs["cdi"] / f"{DRIVER}-{claim['metadata']['uid']}.json"
    spec: dict[str, Any] = json.loads(path.read_text())
    return spec


def allocated_token(claim: dict[str, Any]) -> str:
    [result] = claim["status"]["allocation"]["devices"]["results"]
    assert result["driver"] == DRIVER
    device: str = result["device"]
    return device


def test_the_real_dra_manager_prepares_a_scheduled_claim_through_the_agent(
    release: str, plane: ControlPlane, tmp_path: Path
) -> None:
    with start_node(release, plane, tmp_path, node_name(release, "prep")) as node:
        pod, claim = node.allocated_pod(f"prep-{release.replace('.', '')}")
        token = allocated_token(claim)
        name = pod["metadata"]["name"]
        assert node.kubelet.call("prepare", name=name) == {"uid": pod["metadata"]["uid"]}
        spec = spec_of(node, claim)
        [device] = spec["devices"]
        assert device["containerEdits"]["env"] == [f"{ENV}={token}"]
        cdi_id = f"{spec['kind']}={device['name']}"
        assert cdi_id == f"{DRIVER}/claim={claim['metadata']['uid']}-0"
        assert node.kubelet.call("resources", name=name) == {"cdi_devices": [cdi_id]}

        # A kubelet restart: new managers over the same directories. The checkpoint keeps the
        # claim prepared, the watcher finds the agent's socket again, the startup wipe of the
        # node's slices is undone by the agent.
        wiped = len(node.kubelet.events("slices-deleted"))
        node.kubelet.call("restart")
        registered(node, 2)
        node.kubelet.wait_for_event("slices-deleted", count=wiped + 1)
        wait_until("the agent's pool again", lambda: len(node.pool()) == 2, TIMEOUT)
        assert node.kubelet.call("resources", name=name) == {"cdi_devices": [cdi_id]}
        # The checkpoint does not keep "prepared": the new manager asks the driver again, and
        # the agent answers from its record, the same spec.
        node.kubelet.call("prepare", name=name)
        assert [call["err"] for call in node.kubelet.events("prepare-rpc")] == ["<nil>"] * 2
        assert spec_of(node, claim) == spec

        node.kubelet.call("unprepare", name=name)
        assert list(node.dirs["cdi"].iterdir()) == []
        with pytest.raises(AssertionError, match="unable to get claim info for ResourceClaim"):
            node.kubelet.call("resources", name=name)
        assert [call["err"] for call in node.kubelet.events("unprepare-rpc")] == ["<nil>"]
        # The agent stops: its registration socket goes, the watcher deregisters the plugin.
        node.agent.stop()
        node.kubelet.wait_for_event("registration", count=5)
        assert node.kubelet.events("registration")[-1]["call"] == "deregister"
        assert node.kubelet.call("registered") == []
        # Only the old manager's health stream, ended by the restart, may have logged an
        # error: 1.37 logs its canceled stream as one (a real kubelet's managers never stop).
        errors = node.kubelet.events("error-log")
        assert all("code = Canceled" in error["err"] for error in errors), errors


def test_the_health_stream_carries_a_probed_token_to_the_real_dra_manager(
    release: str, plane: ControlPlane, tmp_path: Path
) -> None:
    probes = tmp_path / "dev"
    probes.mkdir()
    for index in range(2):
        (probes / f"token{index}").touch()
    probe = f'[resources."{TOKEN}".probe]\npath = "{probes}/token{{index}}"\ninterval = 1\n'
    probe += "failure_threshold = 1\n"
    node_id = node_name(release, "health")
    with start_node(release, plane, tmp_path, node_id, probe) as node:
        node.kubelet.wait_for_event("health-stream-started", timeout=TIMEOUT)
        dialed = node.kubelet.wait_for_event("health-stream-dialing")[0]
        assert dialed.get("healthService") == HEALTH_SERVICE[release], dialed
        pod, claim = node.allocated_pod(f"health-{release.replace('.', '')}")
        token = allocated_token(claim)
        name, uid = pod["metadata"]["name"], pod["metadata"]["uid"]
        node.kubelet.call("prepare", name=name)
        # The pod's name of the claim and the request (cm/dra/manager.go), not the claim's name.
        request = "claim:t/token"

        def health() -> list[dict[str, Any]]:
            statuses: dict[str, Any] = node.kubelet.call("health", name=name)
            [status] = statuses["app"]
            assert status["name"] == request
            resources: list[dict[str, Any]] = status["resources"]
            return resources

        def healthy() -> list[dict[str, Any]] | None:
            # A stream that failed or ended fails the test at once, with the manager's words.
            failures = [event for name in STREAM_FAILURES for event in node.kubelet.events(name)]
            assert failures == [], f"the health stream failed: {failures}"
            resources = health()
            return resources if resources[0]["health"] == "Healthy" else None

        wait_until("the token Healthy", healthy, TIMEOUT)
        before = len(node.kubelet.events("health-update"))
        (probes / f"token{token.removeprefix('token-')}").unlink()
        updates = node.kubelet.wait_for_event("health-update", count=before + 1, timeout=TIMEOUT)
        assert uid in updates[-1]["pods"]
        [resource] = health()
        assert resource["health"] == "Unhealthy"
        # The device's first CDI ID names it (buildResourceHealth), not driver/pool/device.
        assert resource["resourceID"] == node.kubelet.call("resources", name=name)["cdi_devices"][0]
        assert re.search(re.escape(str(probes)), resource.get("message", "")), resource
        node.kubelet.call("unprepare", name=name)
        for failure in STREAM_FAILURES:
            assert node.kubelet.events(failure) == [], (failure, node.kubelet.log_tail())
