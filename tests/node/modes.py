"""The ways of advertising, as the real node's tests meet them: what the agent's file says,
which shipped overlay's DaemonSet serves it, what the scheduler says of a pod over the count,
and how many tokens the scheduler is offered (the Node's allocatable, or the untainted devices
of the node's ResourceSlices).

DRA comes with a cluster pool beside the node's (overlays/cluster-pools serves both:
``example.com/token``, 2 a node, and ``example.com/license``, 20 for the cluster, written by
the elected publisher)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tests.kube.client import wait_until
from tests.kube.controlplane import ControlPlane

TOKEN = "example.com/token"
LICENSE = "example.com/license"
DRIVER = "tokens.example.com"  # the overlays' driver, whose DeviceClasses the tests apply
SLICES = "/apis/resource.k8s.io/v1/resourceslices"
# The real scheduler's words for the replica over the count (the start of its message).
INSUFFICIENT = f"0/1 nodes are available: 1 Insufficient {TOKEN}."
CANNOT_ALLOCATE = "0/1 nodes are available: 1 cannot allocate all claims."


@dataclass(frozen=True)
class Mode:
    advertise: str  # the resource's `advertise`
    overlay: str  # the shipped kustomization that runs it as a DaemonSet
    over_the_count: str
    variable: bool  # whether a container learns its token from a variable

    @property
    def dra(self) -> bool:
        return self.advertise == "dra"

    def resource(self, count: int, probe: str = "", name: str = TOKEN) -> str:
        """A resource of this mode as the agent's file says it."""
        lines = [f'[resources."{name}"]', f"count = {count}", f'advertise = "{self.advertise}"']
        if probe:
            lines.append(f"probe = {probe}")
        return "\n".join(lines) + "\n"

    def offered(self, plane: ControlPlane, node: str, name: str = TOKEN) -> int:
        """How many tokens of ``name`` the scheduler may give a new pod on ``node``."""
        if not self.dra:
            status = plane.admin.get(f"/api/v1/nodes/{node}")["status"]
            return int(status.get("allocatable", {}).get(name, "0"))
        return sum(1 for device in node_devices(plane, node, name) if not device.get("taints"))


def node_devices(plane: ControlPlane, node: str, name: str) -> list[Any]:
    """The devices of ``name`` in the DRA driver's slices that ``node`` may use: its own
    pool's, or a cluster pool's (no node name)."""
    items = plane.admin.get(f"{SLICES}?fieldSelector=spec.driver={DRIVER}")["items"]
    devices = []
    for item in items:
        spec = item["spec"]
        if spec.get("nodeName") not in (node, None):
            continue
        for device in spec.get("devices", []):
            # The driver's own attributes are named without its domain.
            attribute = device.get("attributes", {}).get("resource", {})
            if attribute.get("string") == name:
                devices.append(device)
    return devices


DEVICE_PLUGIN = Mode("device-plugin", "deploy/kubernetes/base", INSUFFICIENT, True)
NODE_STATUS = Mode("node-status", "deploy/kubernetes/overlays/node-status", INSUFFICIENT, False)
DRA = Mode("dra", "deploy/kubernetes/overlays/cluster-pools", CANNOT_ALLOCATE, True)
MODES = {mode.advertise: mode for mode in (DEVICE_PLUGIN, NODE_STATUS, DRA)}


def wait_offered(plane: ControlPlane, node: str, mode: Mode, count: int, name: str = TOKEN) -> None:
    """Until the scheduler is offered ``count`` tokens of ``name`` on ``node``: a device
    plugin's count reaches the Node at the kubelet's next status update (every 10 s)."""
    seen: list[int] = []

    def offered() -> bool:
        seen.append(mode.offered(plane, node, name))
        return seen[-1] == count

    wait_until(f"{count} of {name} offered on {node}", offered, show=lambda: seen[-3:])
