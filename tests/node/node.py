"""A real Kubernetes node on this machine: containerd 2.x and the kubelet of a release,
registered with the real control plane of tests/kube, its pods on a bridge of their own.

``with RealNode(...) as node`` makes the machine's changes (recorded, machine.py), starts
containerd with the images imported and the kubelet, and waits for the Node to be Ready and
schedulable; leaving the block kills every container, stops everything by PID and undoes every
change. ``restart_kubelet`` and ``reboot`` are what the tests do to it; a reboot is simulated
as ../shared/docs/real-node.md says: the kubelet stopped, every container and shim killed,
containerd stopped, the kubelet's mounts unmounted and what lives on tmpfs on a real machine
(containerd's state, /var/run/cdi) removed; the disk kept (/var/lib/kubelet with its
checkpoints and sockets, containerd's root, the CNI leases).
"""

from __future__ import annotations

import os
import shutil
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from packaging.version import Version

from tests.kube.client import wait_until
from tests.kube.controlplane import ControlPlane
from tests.node.containerd import Containerd, PodNetwork
from tests.node.kubelet import CGROUP_ROOT, ROOT, Kubelet
from tests.node.machine import (
    MachineChanges,
    processes_in_cgroup,
    unmount_under,
)
from tests.node.network import (
    NODE_BRIDGE,
    NODE_IP,
    POD_BRIDGE,
    POD_SUBNET,
    SERVICE_IP,
    SERVICE_RANGE,
    service_relay,
)
from tests.paths import short_directory

# The kernel settings the kubelet sets (kernel.panic=10, panic_on_oops=1, overcommit=1).
KUBELET_SYSCTLS = ["kernel.panic", "kernel.panic_on_oops", "vm.overcommit_memory"]
CONTAINER_LOGS = Path("/var/log/containers")  # the kubelet's links to the pods' logs
READY_TIMEOUT = 120.0  # a busy 2-core CI machine; 12 s on a quiet one


class RealNode:
    def __init__(
        self,
        release: str,
        control_plane: ControlPlane,
        directory: Path,
        images: tuple[Path, ...] = (),
    ) -> None:
        """``images``: archives imported into containerd beside the node's own (pause,
        busybox)."""
        self.release = release  # "1.37", as tests/kube/programs.py's RELEASES
        self.images = images
        self.name = f"node-{release.replace('.', '-')}"
        self.control_plane = control_plane
        self.directory = directory
        self._machine = MachineChanges()
        self._sockets = short_directory("tr-node-")
        self.pod_network = PodNetwork(
            directory / "cni", POD_BRIDGE, POD_SUBNET, SERVICE_RANGE, NODE_IP
        )
        self.containerd = Containerd(directory / "containerd", self._sockets, self.pod_network)
        self.kubelet = Kubelet(
            release, directory / "kubelet", self.name, control_plane, self.containerd.endpoint
        )
        self._relay: Any = None

    def at_least(self, release: str) -> bool:
        """Whether the node's kubelet is of ``release`` ("1.37") or newer."""
        return Version(self.release) >= Version(release)

    # The node's life

    def __enter__(self) -> RealNode:
        try:
            self._set_up()
            self.start()
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self.power_off()
        finally:
            try:
                if self._relay is not None:
                    self._relay.__exit__(None, None, None)
                    self._relay = None
                self.control_plane.delete_node(self.name)
            finally:
                self._machine.undo()
                shutil.rmtree(self._sockets, ignore_errors=True)

    def _set_up(self) -> None:
        machine = self._machine
        machine.take_machine(ROOT)
        machine.sysctls(KUBELET_SYSCTLS)
        machine.bridge(NODE_BRIDGE, [f"{NODE_IP}/32", f"{SERVICE_IP}/32"])
        machine.removed_link_afterwards(POD_BRIDGE)
        machine.cgroup(CGROUP_ROOT)
        machine.directory(ROOT)
        machine.directory(CONTAINER_LOGS)
        machine.record("the kubelet's links to the pods' logs", self._remove_log_links)
        for directory in (self.kubelet.directory, self.containerd.root.parent):
            directory.mkdir(parents=True, exist_ok=True)
        self.pod_network.write()
        self.containerd.prepare(machine)
        self.kubelet.write_config()
        self._relay = service_relay(self.control_plane.host, self.control_plane.port)
        self._relay.__enter__()

    def _remove_log_links(self) -> None:
        if not CONTAINER_LOGS.is_dir():
            return
        for link in CONTAINER_LOGS.iterdir():
            if link.is_symlink() and str(self.kubelet.pod_logs) in os.readlink(link):
                link.unlink()

    def start(self, before_kubelet: Callable[[], None] | None = None) -> float:
        """containerd, then ``before_kubelet`` (an agent started as systemd would, ordered
        before the kubelet), then the kubelet; the monotonic time the kubelet started."""
        self.containerd.start()
        self.containerd.import_images(*self.images)
        if before_kubelet is not None:
            before_kubelet()
        started = time.monotonic()
        self.kubelet.start()
        self.wait_ready()
        return started

    def wait_ready(self) -> None:
        def ready() -> bool:
            self.kubelet.check_running()
            status, node = self.control_plane.admin.request("GET", f"/api/v1/nodes/{self.name}")
            if status != 200:
                return False
            conditions = {c["type"]: c["status"] for c in node["status"].get("conditions", [])}
            return conditions.get("Ready") == "True" and not node["spec"].get("taints")

        wait_until(f"Node {self.name} Ready and untainted", ready, READY_TIMEOUT)

    def restart_kubelet(self) -> float:
        """The kubelet stopped (as systemd stops it) and started again: the containers run on.
        Returns when it started."""
        self.kubelet.stop()
        started = time.monotonic()
        self.kubelet.start()
        self.wait_ready()
        return started

    def power_off(self) -> None:
        """Everything stopped as by a power cut: the kubelet, every container, the shims,
        containerd; the mounts gone; the disk kept."""
        self.kubelet.stop(signal.SIGKILL)
        self.containerd.crash(processes_in_cgroup(CGROUP_ROOT))
        for directory in (ROOT, self.containerd.root):
            unmount_under(directory)
        for spec in self.containerd.new_cdi_specs():
            spec.unlink()
        MachineChanges.remove_link(POD_BRIDGE)

    def reboot(self, before_kubelet: Callable[[], None] | None = None) -> float:
        """A power cut and a boot: containerd, ``before_kubelet``, the kubelet. Returns when
        the kubelet started."""
        self.power_off()
        return self.start(before_kubelet)

    # What the tests read

    def node_object(self) -> Any:
        return self.control_plane.admin.get(f"/api/v1/nodes/{self.name}")

    def allocatable(self, resource: str) -> str | None:
        value: str | None = self.node_object()["status"].get("allocatable", {}).get(resource)
        return value
