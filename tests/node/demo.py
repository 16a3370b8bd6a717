"""The workloads that ask for tokens on the real node: the token-demo example as shipped
(``kubectl apply -k deploy/kubernetes/examples/token-demo``: three replicas of busybox, each
asking for ``example.com/token: 1`` under limits and printing the token it got), and the same
Deployment asking for a cluster pool's ``example.com/license`` instead."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from tests.kube.client import wait_until
from tests.kube.controlplane import ControlPlane
from tests.node.modes import LICENSE, TOKEN
from tests.node.pods import NAMESPACE, Pods, PodView

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = "deploy/kubernetes/examples/token-demo"


class Demo:
    def __init__(self, plane: ControlPlane, resource: str = TOKEN) -> None:
        self.plane = plane
        self.resource = resource
        self.name = "token-demo" if resource == TOKEN else "license-demo"
        self.selector = f"app.kubernetes.io/name={self.name}"
        self.pods = Pods(plane)

    def apply(self) -> None:
        if self.resource == TOKEN:
            self.plane.kubectl("apply", "-k", EXAMPLE)
        else:
            self.plane.kubectl("apply", "-f", "-", stdin=json.dumps(self._license_demo()))

    def _license_demo(self) -> object:
        """The example's Deployment, renamed, asking for a license instead of a token."""
        deployment = yaml.safe_load((REPO / EXAMPLE / "deployment.yaml").read_text())
        deployment["metadata"]["name"] = self.name
        labels = {"app.kubernetes.io/name": self.name}
        deployment["metadata"]["labels"] = labels
        deployment["spec"]["selector"]["matchLabels"] = labels
        template = deployment["spec"]["template"]
        template["metadata"]["labels"] = labels
        (container,) = template["spec"]["containers"]
        limits = container["resources"]["limits"]
        limits[LICENSE] = limits.pop(TOKEN)
        container["command"][-1] = container["command"][-1].replace(
            "EXAMPLE_COM_TOKEN", "EXAMPLE_COM_LICENSE"
        )
        return deployment

    def scale(self, replicas: int) -> None:
        self.plane.kubectl(
            "scale", "-n", NAMESPACE, f"deployment/{self.name}", f"--replicas={replicas}"
        )

    def scaled(self, replicas: int, timeout: float = 120.0) -> list[PodView]:
        """Scaled to ``replicas``, then exactly that many pods, all Ready and none on its way
        out: a DRA pod that is still terminating holds its claim's token until the driver has
        unprepared it, so a test that stops the driver next would keep it held."""
        self.scale(replicas)
        return self.pods.wait(
            f"exactly {replicas} pods of {self.name}, all Ready",
            self.selector,
            lambda pods: len(pods) == replicas and all(pod.serving for pod in pods),
            timeout=timeout,
        )

    def delete(self) -> None:
        self.plane.kubectl(
            "delete",
            "-n",
            NAMESPACE,
            f"deployment/{self.name}",
            "--ignore-not-found",
            "--wait=false",
        )
        self.pods.delete_all(self.selector)

    def running(self, count: int, timeout: float = 120.0) -> list[PodView]:
        return self.pods.running(self.selector, count, timeout=timeout)

    def running_anew(
        self, count: int, before: list[PodView], timeout: float = 120.0
    ) -> list[PodView]:
        """``count`` pods Ready in containers none of ``before`` had: after a reboot the API
        server shows the old ones Ready until the kubelet says otherwise."""
        old = {container for pod in before for container in pod.container_ids}

        def anew(pods: list[PodView]) -> bool:
            fresh = [p for p in pods if p.serving and old.isdisjoint(p.container_ids)]
            return len(fresh) == count

        what = f"{count} pods of {self.name} Ready anew"
        pods = self.pods.wait(what, self.selector, anew, timeout=timeout)
        return [p for p in pods if p.serving]

    def same(self, pods: list[PodView]) -> list[PodView]:
        """``pods`` as they are now, in the same order (those still there)."""
        now = {pod.uid: pod for pod in self.all()}
        return [now[pod.uid] for pod in pods if pod.uid in now]

    def all(self) -> list[PodView]:
        return self.pods.of(self.selector)

    def waiting(self) -> list[PodView]:
        """Pods not Ready, not on their way out, not Failed (a pod the kubelet rejected)."""
        return [
            pod
            for pod in self.all()
            if not pod.ready and not pod.deleting and pod.phase != "Failed"
        ]

    def one_waiting(self) -> PodView:
        """The one pod of the workload that is not Ready (a replica over the count)."""
        found: list[PodView] = []

        def one() -> bool:
            found[:] = self.waiting()
            return len(found) == 1

        wait_until(f"one {self.name} pod waiting", one, show=lambda: found)
        return found[0]

    def tokens(self, pods: list[PodView]) -> list[str]:
        """The token each pod printed (``my token: token-1``); "" where it got no variable."""
        printed = []
        for pod in pods:
            line = self.pods.logs(pod).strip()
            printed.append(line.split(":", 1)[1].strip() if ":" in line else line)
        return sorted(printed)
