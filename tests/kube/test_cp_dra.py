"""The agent as a DRA driver against a real 1.37 control plane (tests/kube/controlplane.py):
its ResourceSlices, published with the node's identity or the DaemonSet's service account,
the DeviceClass it prints, the real scheduler allocating its tokens to unchanged pods, and the
shipped admission policy. No kubelet runs: the scheduler needs none, the agent registers into
a plugins directory nobody watches."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.harness import AgentProcess
from tests.kube.client import KubeClient, wait_until
from tests.kube.controlplane import ControlPlane
from tests.paths import short_temporary_directory
from token_resource.apiserver.keeping.nudge import Nudged, WaitingPod, nudge_waiting_pods
from token_resource.config.model import KubernetesSettings

ROOT = Path(__file__).resolve().parents[2]
OVERLAY = ROOT / "deploy" / "kubernetes" / "overlays" / "dra"
NAMESPACE_YAML = ROOT / "deploy" / "kubernetes" / "base" / "namespace" / "namespace.yaml"
# The base's ServiceAccount, which may read Nodes; the overlay grants it the rest.
BASE_RBAC = ROOT / "deploy" / "kubernetes" / "base" / "agent" / "rbac.yaml"
TOKEN = "example.com/token"
RESOURCE_API = "/apis/resource.k8s.io/v1"
SLICES = f"{RESOURCE_API}/resourceslices"


@pytest.fixture
def dirs() -> Iterator[dict[str, Path]]:
    """The kubelet's plugin directories and the CDI directory (sockets: short paths)."""
    with short_temporary_directory("tr-kube-dra-") as root:
        paths = {name: root / name for name in ("dp", "reg", "plugins", "cdi")}
        for path in paths.values():
            path.mkdir()
        yield paths


@pytest.fixture
def dra_agent(tmp_path: Path, dirs: dict[str, Path]) -> Iterator[AgentProcess]:
    process = AgentProcess(tmp_path / "agent", dirs["dp"])
    try:
        yield process
    finally:
        process.kill()


def config(dirs: dict[str, Path], kubeconfig: Path, node: str, driver: str, resource: str) -> str:
    return (
        f'[dra]\ndriver = "{driver}"\nplugins_registry_dir = "{dirs["reg"]}"\n'
        f'plugins_dir = "{dirs["plugins"]}"\ncdi_dir = "{dirs["cdi"]}"\n'
        f'[kubernetes]\nkubeconfig = "{kubeconfig}"\nnode_name = "{node}"\n' + resource
    )


def probed(count: int, devices: Path) -> str:
    """``count`` tokens, token-N healthy while ``devices``/tN exists, checked every second."""
    return (
        f'[resources."{TOKEN}"]\ncount = {count}\nadvertise = "dra"\n'
        f'[resources."{TOKEN}".probe]\npath = "{devices}/t{{index}}"\n'
        "interval = 1\nfailure_threshold = 1\n"
    )


def devices_of(control_plane: ControlPlane, node: str, driver: str) -> dict[str, Any]:
    """Device name -> device, over the node's slices of ``driver``."""
    query = f"?fieldSelector=spec.nodeName={node},spec.driver={driver}"
    found: dict[str, Any] = {}
    for item in control_plane.admin.get(SLICES + query)["items"]:
        for device in item["spec"].get("devices", []):
            found[device["name"]] = device
    return found


def token_pod(name: str) -> dict[str, Any]:
    """An unchanged pod: the extended resource under limits, nothing of DRA."""
    return {
        "metadata": {"name": name},
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "token-resource:test",
                    "resources": {"limits": {TOKEN: "1"}},
                }
            ]
        },
    }


SCHEDULED = "cp-dra"  # the scheduler test's namespace


@pytest.fixture
def device_class_and_pods_removed(control_plane: ControlPlane) -> Iterator[None]:
    """The DeviceClass the test applies is taken away afterwards (the chart's tests install
    one of that name, owned by their release), and its pods: the one left Pending would be
    placed on the next test's Node with example.com/token (the bound ones go with their
    Node, conftest.py)."""
    yield
    control_plane.admin.delete(f"{RESOURCE_API}/deviceclasses/token.example.com")
    pods = f"/api/v1/namespaces/{SCHEDULED}/pods"
    status, listed = control_plane.admin.request("GET", pods)
    for pod in listed["items"] if status == 200 else ():
        control_plane.admin.delete(f"{pods}/{pod['metadata']['name']}?gracePeriodSeconds=0")


@pytest.mark.usefixtures("device_class_and_pods_removed")
def test_slices_with_taints_the_device_class_and_the_real_scheduler(
    control_plane: ControlPlane, dra_agent: AgentProcess, dirs: dict[str, Path], tmp_path: Path
) -> None:
    """The slices the agent publishes with the kubelet's identity are accepted, the unhealthy
    token's device taint with them; the DeviceClass of `token-resource device-classes` (with
    extendedResourceName) too; and the real scheduler gives unchanged pods claims on the
    healthy tokens, leaving the pod beyond them Pending with its own reason."""
    node, driver = "cp-dra", "tokens.example.com"
    control_plane.add_node(node)
    devices = tmp_path / "devices"
    devices.mkdir()
    for index in (0, 1):
        (devices / f"t{index}").touch()
    kubeconfig = control_plane.node_kubeconfig(node, tmp_path / "kubelet.conf")
    dra_agent.write_config(config(dirs, kubeconfig, node, driver, probed(3, devices)))
    dra_agent.start()

    def tainted() -> dict[str, Any] | None:
        found = devices_of(control_plane, node, driver)
        if sorted(found) != ["token-0", "token-1", "token-2"]:
            return None
        return found if found["token-2"].get("taints") else None

    found = wait_until(
        "token-2 tainted in the node's slices",
        tainted,
        show=lambda: devices_of(control_plane, node, driver),
    )
    assert [found[f"token-{i}"].get("taints") for i in (0, 1)] == [None, None]
    (taint,) = found["token-2"]["taints"]
    assert {k: v for k, v in taint.items() if k != "timeAdded"} == {
        "key": f"{driver}/unhealthy",
        "effect": "NoSchedule",
    }, taint
    assert found["token-0"]["attributes"]["resource"] == {"string": TOKEN}

    printed = dra_agent.cli("device-classes", "--config", str(dra_agent.config_path))
    assert printed.returncode == 0, printed.stderr
    assert "extendedResourceName" in printed.stdout
    control_plane.kubectl("apply", "-f", "-", stdin=printed.stdout)
    device_class = control_plane.admin.get(f"{RESOURCE_API}/deviceclasses/token.example.com")
    assert device_class["spec"]["extendedResourceName"] == TOKEN

    namespace = SCHEDULED
    control_plane.ensure("/api/v1/namespaces", {"metadata": {"name": namespace}})
    pods = f"/api/v1/namespaces/{namespace}/pods"
    wait_until(
        "the namespace's default ServiceAccount",
        lambda: (
            control_plane.admin.request(
                "GET", f"/api/v1/namespaces/{namespace}/serviceaccounts/default"
            )[0]
            == 200
        ),
    )
    for index in range(3):
        control_plane.admin.create(pods, token_pod(f"token-{index}"))

    def placed() -> tuple[list[Any], list[Any]] | None:
        items = control_plane.admin.get(pods)["items"]
        bound = [pod for pod in items if pod["spec"].get("nodeName")]
        refused = [pod for pod in items if unschedulable(pod)]
        return (bound, refused) if len(bound) == 2 and len(refused) == 1 else None

    bound, (pending,) = wait_until(
        "two pods bound, one unschedulable",
        placed,
        show=lambda: [
            (p["spec"].get("nodeName"), p["status"]) for p in control_plane.admin.get(pods)["items"]
        ],
    )
    assert {pod["spec"]["nodeName"] for pod in bound} == {node}
    claims = control_plane.admin.get(f"{RESOURCE_API}/namespaces/{namespace}/resourceclaims")
    allocated = sorted(
        result["device"]
        for claim in claims["items"]
        for result in claim["status"]["allocation"]["devices"]["results"]
        if result["driver"] == driver and result["pool"].startswith(f"{node}/")
    )
    assert allocated == ["token-0", "token-1"], claims
    condition = unschedulable(pending)
    assert condition is not None
    assert "cannot allocate all claims" in condition["message"], condition

    names = sorted(pod["metadata"]["name"] for pod in bound)
    check_prepare_retries(control_plane, node, driver, namespace, names, kubeconfig, tmp_path)


def check_prepare_retries(
    control_plane: ControlPlane,
    node: str,
    driver: str,
    namespace: str,
    names: list[str],
    kubeconfig: Path,
    tmp_path: Path,
) -> None:
    """The claims the real scheduler allocated name their pods (``names``), which the agent
    asks the kubelet to prepare again (apiserver/nudge.py)."""
    # With the kubelet's identity (the host's service) it may read its node's pods and their
    # claims, but patch no pod: nothing changes. With the DaemonSet's account, the bound pods
    # get the annotation, and only they.
    as_node = nudge_waiting_pods(KubernetesSettings(kubeconfig=kubeconfig), node, driver, ())
    assert (as_node.pods, as_node.forbidden) == ((), True), as_node
    assert 'cannot patch resource "pods"' in str(as_node.problem), as_node
    for manifest in (NAMESPACE_YAML, BASE_RBAC, OVERLAY / "rbac.yaml", OVERLAY / "admission.yaml"):
        control_plane.kubectl("apply", "-f", str(manifest))
    token = control_plane.service_account_token("token-resource", "token-resource", node)
    settings = KubernetesSettings(
        kubeconfig=control_plane.token_kubeconfig(token, tmp_path / "agent.conf"), node_name=node
    )
    nudged = nudge_waiting_pods(settings, node, driver, ())
    assert nudged == Nudged(tuple(WaitingPod(namespace, name) for name in names)), nudged
    for item in control_plane.admin.get(f"/api/v1/namespaces/{namespace}/pods")["items"]:
        annotations = item["metadata"].get("annotations", {})
        assert (f"{driver}/prepare-retry" in annotations) == (item["metadata"]["name"] in names)
    # A claim the agent prepared already is none of its business while its pod runs; with no
    # kubelet here, nothing runs until its status says so, as a kubelet's would.
    claims = control_plane.admin.get(f"{RESOURCE_API}/namespaces/{namespace}/resourceclaims")
    claim = claims["items"][0]
    uid = claim["metadata"]["uid"]
    assert len(nudge_waiting_pods(settings, node, driver, (uid,)).pods) == len(names)
    pod = claim["status"]["reservedFor"][0]["name"]
    running = {"running": {"startedAt": "2026-01-01T00:00:00Z"}}
    control_plane.admin.ok(
        "PATCH",
        f"/api/v1/namespaces/{namespace}/pods/{pod}/status",
        {
            "status": {
                "phase": "Running",
                "containerStatuses": [
                    {
                        "name": "main",
                        "image": "token-resource:test",
                        "imageID": "",
                        "ready": True,
                        "restartCount": 0,
                        "state": running,
                    }
                ],
            }
        },
        content_type="application/merge-patch+json",
    )
    left = nudge_waiting_pods(settings, node, driver, (uid,)).pods
    assert left == tuple(WaitingPod(namespace, name) for name in names if name != pod), left


def unschedulable(pod: dict[str, Any]) -> dict[str, Any] | None:
    for condition in pod.get("status", {}).get("conditions", []):
        if condition["type"] == "PodScheduled" and condition.get("reason") == "Unschedulable":
            return dict(condition)
    return None


def a_slice(node: str, driver: str, name: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {
            "driver": driver,
            "nodeName": node,
            "pool": {"name": f"{node}/manual", "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": "token-0"}],
        },
    }


def slice_refused(
    control_plane: ControlPlane, account: KubeClient, item: dict[str, Any]
) -> tuple[int, Any]:
    """The answer to ``account``'s write of ``item`` once an admission policy refuses it. The
    API server applies a new policy once its informer has it: until then RBAC alone lets the
    write through, and such a slice is taken away again."""

    def refused() -> tuple[int, Any] | None:
        status, answer = account.request("POST", SLICES, item)
        if status == 201:
            control_plane.admin.delete(f"{SLICES}/{item['metadata']['name']}")
            return None
        return status, answer

    answer: tuple[int, Any] = wait_until(
        f"an admission policy refusing slice {item['metadata']['name']}", refused
    )
    return answer


def test_the_shipped_admission_policy_holds_the_daemonsets_account_to_its_node(
    control_plane: ControlPlane, dra_agent: AgentProcess, dirs: dict[str, Path], tmp_path: Path
) -> None:
    """The DRA overlay's RBAC and ValidatingAdmissionPolicy, applied with kubectl, enforced by
    the real API server: the DaemonSet's service account, its token bound to a pod on node a,
    publishes node a's slices through the agent and may write no slice of node b."""
    own, other, driver = "cp-policy-a", "cp-policy-b", "policy.example.com"
    for node in (own, other):
        control_plane.add_node(node)
    for manifest in (NAMESPACE_YAML, BASE_RBAC, OVERLAY / "rbac.yaml", OVERLAY / "admission.yaml"):
        control_plane.kubectl("apply", "-f", str(manifest))
    token = control_plane.service_account_token("token-resource", "token-resource", own)
    agent_account = control_plane.client(token=token)
    refusal = (
        "ValidatingAdmissionPolicy 'token-resource-own-node-slices' with binding "
        "'token-resource-own-node-slices' denied request: the agent on node cp-policy-a may "
        "only write the ResourceSlices of its own node, not of cp-policy-b"
    )

    status, answer = slice_refused(control_plane, agent_account, a_slice(other, driver, "b-1"))
    # A policy's Deny is 422 Invalid (the policy gives no reason), not RBAC's 403 Forbidden,
    # though its message says "is forbidden".
    forbidden = 'resourceslices.resource.k8s.io "{}" is forbidden: ' + refusal
    assert (status, answer["reason"], answer["message"]) == (
        422,
        "Invalid",
        forbidden.format("b-1"),
    ), answer

    # Node b's slice, made by the admin, can be neither changed nor deleted by the agent.
    control_plane.admin.create(SLICES, a_slice(other, driver, "b-2"))
    status, answer = agent_account.request("DELETE", f"{SLICES}/b-2")
    assert (status, answer["message"]) == (422, forbidden.format("b-2")), answer
    # Unbound to a pod, the token names no node.
    unbound = control_plane.admin.create(
        "/api/v1/namespaces/token-resource/serviceaccounts/token-resource/token",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}},
    )["status"]["token"]
    status, answer = control_plane.client(token=unbound).request(
        "POST", SLICES, a_slice(own, driver, "a-unbound")
    )
    assert status == 422, answer
    assert answer["message"].endswith(
        "denied request: the agent's token names no node (a token not bound to a pod?)"
    ), answer

    kubeconfig = control_plane.token_kubeconfig(token, tmp_path / "agent.conf")
    resource = f'[resources."{TOKEN}"]\ncount = 2\nadvertise = "dra"\n'
    dra_agent.write_config(config(dirs, kubeconfig, own, driver, resource))
    dra_agent.start()
    wait_until(
        "the agent's slices of node a",
        lambda: sorted(devices_of(control_plane, own, driver)) == ["token-0", "token-1"],
    )
    assert "403" not in dra_agent.log()
