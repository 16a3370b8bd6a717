"""The agent as a DaemonSet on the real node, the image imported into the node's containerd as
docs/kubernetes.md says: from a shipped kustomization applied with the release's kubectl
(``kubectl apply -k deploy/kubernetes/overlays/...``), or from the chart installed and upgraded
by the real helm with values of the test's (a configuration as deploy/helm/examples/ give it);
and what a test reads of it: its pods, its publishers' pods, whether it is Ready."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.kube.chart import CHART, Helm
from tests.node.modes import DRIVER, LICENSE, Mode, wait_offered
from tests.node.node import RealNode
from tests.node.pods import Pods, PodView

NAMESPACE = "token-resource"
AGENT = "app.kubernetes.io/instance=token-resource"
PUBLISHER = "app.kubernetes.io/instance=token-resource-publisher"
DELETE_TIMEOUT = 90.0
OVERLAY_COUNT = 2  # what each shipped overlay serves of example.com/token
METRICS_PORT = 9464  # deploy/helm/examples/metrics.yaml's


class DaemonSetForm:
    def __init__(self, node: RealNode, mode: Mode) -> None:
        """The shipped kustomization of ``mode`` (``mode.overlay``) on ``node``."""
        self.node = node
        self.plane = node.control_plane
        self.mode = mode
        self.kustomization = mode.overlay
        self.pods = Pods(self.plane)
        # overlays/cluster-pools: the publishers of its cluster pool beside the DaemonSet.
        self.publishers = mode.dra

    def apply(self) -> None:
        """Applied, its pods Ready and the scheduler offered its count (each overlay's 2)."""
        self.plane.kubectl("apply", "-k", self.kustomization)
        self.wait_ready()
        self.wait_offered(OVERLAY_COUNT)

    def wait_offered(self, count: int) -> None:
        wait_offered(self.plane, self.node.name, self.mode, count)

    def wait_ready(self, timeout: float = 120.0) -> list[PodView]:
        """The agent's pod Ready on the node (and, with cluster pools, both publishers)."""
        if self.publishers:
            self.pods.running(PUBLISHER, 2, NAMESPACE, timeout)
        return self.pods.running(AGENT, 1, NAMESPACE, timeout)

    def agent_pod(self) -> PodView:
        (pod,) = [pod for pod in self.pods.of(AGENT, NAMESPACE) if pod.ready]
        return pod

    def logs(self, pod: PodView | None = None, previous: bool = False) -> str:
        pod = pod or self.agent_pod()
        extra = ["--previous"] if previous else []
        return self.plane.kubectl("logs", "-n", NAMESPACE, pod.name, *extra)

    def delete(self) -> None:
        """Everything the kustomization made gone, the namespace included (a later apply
        would meet it terminating)."""
        self.plane.kubectl(
            "delete", "-k", self.kustomization, "--ignore-not-found",
            f"--timeout={DELETE_TIMEOUT:.0f}s", timeout=DELETE_TIMEOUT + 10,
        )  # fmt: skip


class ChartForm(DaemonSetForm):
    """The chart (deploy/helm/token-resource) as release ``token-resource`` in namespace
    ``token-resource``, as docs/kubernetes.md installs it."""

    def __init__(self, node: RealNode, mode: Mode, helm: Helm, directory: Path) -> None:
        super().__init__(node, mode)
        self.helm = helm
        self.values = directory / "my-values.yaml"
        self.installed = False
        # What install() was given for the cluster pool, kept by upgrade().
        self.license_probe = ""
        self.publisher: dict[str, Any] = {}

    def _write_values(self, count: int, probe: str, licenses: int, metrics: bool) -> None:
        mode = self.mode
        config = mode.resource(count, probe)
        if mode.dra:
            license_probe = self.license_probe or probe
            config += mode.resource(licenses, license_probe, LICENSE) + 'scope = "cluster"\n'
            config += f'[dra]\ndriver = "{DRIVER}"\n'
        if metrics:
            config += f'[metrics]\nlisten = "0.0.0.0:{METRICS_PORT}"\n'
        config += "[kubernetes]\nin_cluster = true\n"
        # No scrape annotations (a PodMonitor's setup): turning [metrics] on then changes the
        # pods' template only by the chart's checksum/restart-settings annotation.
        values: dict[str, Any] = {"config": {"toml": config}, "metrics": {"podAnnotations": False}}
        if self.publisher:
            values["clusterPools"] = {"publisher": self.publisher}
        # JSON is YAML: the values file with the configuration as one string.
        self.values.write_text(json.dumps(values))

    def install(
        self,
        count: int,
        probe: str = "",
        licenses: int = 20,
        license_probe: str = "",
        publisher: dict[str, Any] | None = None,
    ) -> None:
        """``license_probe``: the cluster pool's own (else ``probe``); ``publisher``: values
        of clusterPools.publisher (e.g. the volume with the license server's tool)."""
        self.license_probe = license_probe
        self.publisher = publisher or {}
        self._write_values(count, probe, licenses, metrics=False)
        self.helm.output(
            "install", "token-resource", str(CHART), "-n", NAMESPACE, "--create-namespace",
            "-f", str(self.values),
        )  # fmt: skip
        self.installed = True
        self.wait_ready()
        self.wait_offered(count)

    def upgrade(
        self, count: int, probe: str = "", licenses: int = 20, metrics: bool = False
    ) -> None:
        """``metrics``: with ``[metrics] listen`` on METRICS_PORT (a setting the agent reads
        only when it starts: the chart rolls the pods)."""
        self._write_values(count, probe, licenses, metrics)
        self.helm.output(
            "upgrade", "token-resource", str(CHART), "-n", NAMESPACE, "-f", str(self.values)
        )

    def delete(self) -> None:
        if self.installed:
            self.helm.output("uninstall", "token-resource", "-n", NAMESPACE, "--wait")
            self.installed = False
        self.plane.kubectl(
            "delete", "namespace", NAMESPACE, "--ignore-not-found",
            f"--timeout={DELETE_TIMEOUT:.0f}s", timeout=DELETE_TIMEOUT + 10,
        )  # fmt: skip
