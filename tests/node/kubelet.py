"""The real kubelet of a release (built by `make node-programs`), as a node's kubelet runs it
against the control plane of tests/kube, with the settings this machine needs
(../shared/docs/real-node.md): cgroup v1 allowed (``failCgroupV1: false``) with the cgroupfs
driver under a cgroup root of the node's own, no iptables chains, its address on the node's
bridge. Its root directory is /var/lib/kubelet, where the manifests' hostPath volumes point.
"""

from __future__ import annotations

import json
import re
import signal
from pathlib import Path

from tests.kube.controlplane import ControlPlane
from tests.kube.flags import free_port
from tests.kube.programs import program
from tests.node.network import NODE_IP
from tests.node.processes import Process

ROOT = Path("/var/lib/kubelet")
PORT = 10250
# Enough for the plugin manager's registrations (OperationExecutor.RegisterPlugin, Unregister)
# and the DRA manager's calls, which the tests read.
VERBOSITY = 4
CGROUP_ROOT = "token-resource-node"


class Kubelet:
    def __init__(
        self,
        release: str,
        directory: Path,
        node: str,
        control_plane: ControlPlane,
        runtime_endpoint: str,
    ) -> None:
        self.release = release
        self.directory = directory
        self.node = node
        self.log = directory / "kubelet.log"
        self.pod_logs = directory / "pod-logs"
        self._control_plane = control_plane
        self._runtime_endpoint = runtime_endpoint
        self._process: Process | None = None
        self.starts = 0

    @property
    def process(self) -> Process | None:
        return self._process

    def write_config(self) -> None:
        d, plane = self.directory, self._control_plane
        (d / "ca.crt").write_bytes(plane.ca.cert_pem)
        serving = plane.ca.issue(self.node, hosts=(NODE_IP, self.node), server=True)
        serving.write(d / "kubelet.crt", d / "kubelet.key")
        plane.node_kubeconfig(self.node, d / "kubelet.kubeconfig")
        config = {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "address": NODE_IP,
            "port": PORT,
            "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1",
            "healthzPort": free_port(),
            "authentication": {
                "anonymous": {"enabled": False},
                "webhook": {"enabled": True},
                "x509": {"clientCAFile": str(d / "ca.crt")},
            },
            "authorization": {"mode": "Webhook"},
            "tlsCertFile": str(d / "kubelet.crt"),
            "tlsPrivateKeyFile": str(d / "kubelet.key"),
            "containerRuntimeEndpoint": self._runtime_endpoint,
            "cgroupDriver": "cgroupfs",
            "cgroupRoot": f"/{CGROUP_ROOT}",
            "failCgroupV1": False,
            "makeIPTablesUtilChains": False,
            "podLogsDir": str(self.pod_logs),
            "resolvConf": "/etc/resolv.conf",
            "failSwapOn": False,
            # A shared CI machine's disk may be fuller than a node's would be: no evictions
            # or image collection for that (the images cannot be pulled again).
            "evictionHard": {
                "memory.available": "100Mi",
                "nodefs.available": "1%",
                "imagefs.available": "1%",
                "nodefs.inodesFree": "1%",
            },
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            "serializeImagePulls": False,
        }
        (d / "kubelet-config.json").write_text(json.dumps(config, indent=2))

    def start(self) -> None:
        self.starts += 1
        with self.log.open("a") as log:
            log.write(f"\n===== start {self.starts} =====\n")
        self._process = Process.start(
            "kubelet",
            [
                str(program(self.release, "kubelet")),
                f"--config={self.directory / 'kubelet-config.json'}",
                f"--kubeconfig={self.directory / 'kubelet.kubeconfig'}",
                f"--hostname-override={self.node}",
                f"--node-ip={NODE_IP}",
                f"--root-dir={ROOT}",
                f"--v={VERBOSITY}",
            ],
            self.log,
        )

    def stop(self, sig: signal.Signals = signal.SIGTERM) -> None:
        if self._process is not None:
            self._process.stop(sig)
            self._process = None

    def check_running(self) -> None:
        if self._process is not None:
            self._process.check_running()

    def log_text(self, since_start: int | None = None) -> str:
        """The kubelet's log, only its ``since_start``-th start and after if given."""
        text = self.log.read_text(errors="replace")
        if since_start is None:
            return text
        marker = f"===== start {since_start} ====="
        return text[text.index(marker) :] if marker in text else ""

    def log_lines(self, pattern: str, since_start: int | None = None) -> list[str]:
        matcher = re.compile(pattern)
        return [line for line in self.log_text(since_start).splitlines() if matcher.search(line)]
