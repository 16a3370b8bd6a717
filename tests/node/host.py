"""The agent as the host package runs it on the real node: ``token-resource run`` with a
configuration file, the kubelet's own credentials (its kubeconfig, as
``/etc/kubernetes/kubelet.conf``) and the kubelet's directories, ready (READY=1) before it is
called started, as systemd's ``Type=notify`` waits for it. And a cluster pool's publisher, as
docs/cluster-pools.md runs it outside the cluster: a process with a ServiceAccount's
kubeconfig. ``HostForm`` is the two, as a test starts, reconfigures, crashes and stops them."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from tests.harness import AgentProcess
from tests.kube.client import wait_until
from tests.kube.publishers import account_kubeconfig, publisher_config, rbac
from tests.node.kubelet import ROOT
from tests.node.modes import DRIVER, LICENSE, Mode, wait_offered
from tests.node.node import RealNode

DEVICE_PLUGINS = ROOT / "device-plugins"
# What the agent logs once the kubelet has its resources: each mode's words (a node-status
# resource needs no kubelet).
REGISTERED = {
    "device-plugin": "resource(s) registered with the kubelet",
    "dra": "registered with the kubelet",
}
# The host form's cluster pool: small, so that a replica over it is seen waiting.
HOST_LICENSES = 2


class HostAgent(AgentProcess):
    def __init__(self, node: RealNode, workdir: Path) -> None:
        super().__init__(workdir, DEVICE_PLUGINS)
        self.node = node

    def configure(self, resources: str) -> None:
        """The configuration file: ``resources`` (TOML), the node's credentials and the DRA
        driver's name."""
        kubelet = self.node.kubelet
        self.write_config(
            f"{resources}\n"
            f'[kubernetes]\nkubeconfig = "{kubelet.directory / "kubelet.kubeconfig"}"\n'
            f'node_name = "{self.node.name}"\n'
            f'[dra]\ndriver = "{DRIVER}"\n'
        )


class HostPublisher(AgentProcess):
    """``token-resource run --role publisher`` with the publisher's ServiceAccount
    (tests/kube/publishers.py: its RBAC as docs/cluster-pools.md gives it)."""

    def __init__(self, node: RealNode, workdir: Path) -> None:
        super().__init__(workdir, workdir / "unused", role="publisher")
        self.node = node

    def configure(self, resources: str) -> None:
        plane = self.node.control_plane
        rbac(plane)
        kubeconfig = account_kubeconfig(plane, self.workdir / "publisher.kubeconfig")
        self.write_config(publisher_config(kubeconfig, DRIVER, resources))


class HostForm:
    """The host package's agent, and for DRA the cluster pool's publisher beside it."""

    def __init__(self, node: RealNode, mode: Mode, directory: Path) -> None:
        self.mode = mode
        self.agent = HostAgent(node, directory / "agent")
        self.publisher = HostPublisher(node, directory / "publisher") if mode.dra else None
        self.device_classes = ""

    def configure(self, count: int, probe: str = "", licenses: int = HOST_LICENSES) -> None:
        self.count = count
        self.agent.configure(self.mode.resource(count, probe) + self._license(licenses, probe))
        if self.publisher is not None:
            self.publisher.configure(self._license(licenses, probe))

    def _license(self, count: int, probe: str) -> str:
        if not self.mode.dra:
            return ""
        return self.mode.resource(count, probe, LICENSE) + 'scope = "cluster"\n'

    def start(self, env: Mapping[str, str] | None = None) -> None:
        """The publisher, then the agent (``env`` beside the test's), ready; a DRA agent also
        registered with the kubelet (whose plugin watcher finds it a moment after READY=1: a
        pod it prepared meanwhile would wait for its retry, a minute). With DRA, the
        DeviceClasses first, as docs/dra.md applies them: ``token-resource device-classes |
        kubectl apply -f -``."""
        if self.publisher is not None:
            printed = self.agent.cli("device-classes", "--config", str(self.agent.config_path))
            assert printed.returncode == 0, printed.stderr
            self.device_classes = printed.stdout
            self.agent.node.control_plane.kubectl("apply", "-f", "-", stdin=self.device_classes)
            self.publisher.start()
        self.start_agent(env)
        node = self.agent.node
        wait_offered(node.control_plane, node.name, self.mode, self.count)

    def start_agent(self, env: Mapping[str, str] | None = None) -> None:
        """The agent started (``env`` beside the test's), ready, and its resources
        registered with the kubelet where they go through it."""
        words = REGISTERED.get(self.mode.advertise)
        registered = self.agent.log().count(words) if words else 0
        self.agent.start(env=env)
        if words:
            wait_until(
                "the kubelet's registration of the agent's resources",
                lambda: self.agent.log().count(words) > registered,
            )

    def crash_agent(self) -> None:
        """The agent killed as by a power cut (the publisher runs elsewhere, on)."""
        process = self.agent.process
        if process is not None and process.poll() is None:
            process.kill()
            process.wait()

    def stop(self) -> None:
        for process in (self.agent, self.publisher):
            if (
                process is not None
                and process.process is not None
                and process.process.poll() is None
            ):
                process.stop()

    def close(self) -> None:
        self.stop()
        for process in (self.agent, self.publisher):
            if process is not None:
                process.kill()
        if self.device_classes:
            plane = self.agent.node.control_plane
            plane.kubectl("delete", "--ignore-not-found", "-f", "-", stdin=self.device_classes)
