"""The pods on the real node, as an operator sees them: through the API server (phases,
restarts, events, the scheduler's messages) and ``kubectl logs`` (which the API server reads
from the kubelet)."""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from tests.kube.client import wait_until
from tests.kube.controlplane import ControlPlane

NAMESPACE = "default"
DEMO = "deploy/kubernetes/examples/token-demo"
DEMO_LABEL = "app.kubernetes.io/name=token-demo"
READY_TIMEOUT = 120.0


@dataclass(frozen=True)
class PodView:
    name: str
    namespace: str
    phase: str
    ready: bool
    node: str | None
    reason: str | None  # status.reason: UnexpectedAdmissionError for a rejected pod
    restarts: int
    container_ids: tuple[str, ...]
    uid: str
    deleting: bool  # its deletion asked for (terminating)
    ip: str  # status.podIP: on the pods' bridge, which the node's host reaches

    @classmethod
    def of(cls, pod: Any) -> PodView:
        status = pod["status"]
        containers = status.get("containerStatuses", [])
        conditions = {c["type"]: c["status"] for c in status.get("conditions", [])}
        return cls(
            pod["metadata"]["name"],
            pod["metadata"]["namespace"],
            status.get("phase", ""),
            conditions.get("Ready") == "True",
            pod["spec"].get("nodeName"),
            status.get("reason"),
            sum(c.get("restartCount", 0) for c in containers),
            tuple(c.get("containerID", "") for c in containers),
            pod["metadata"]["uid"],
            "deletionTimestamp" in pod["metadata"],
            status.get("podIP", ""),
        )

    @property
    def serving(self) -> bool:
        """Ready, and not on its way out."""
        return self.ready and not self.deleting


class Pods:
    def __init__(self, control_plane: ControlPlane) -> None:
        self.plane = control_plane

    def of(self, selector: str, namespace: str = NAMESPACE) -> list[PodView]:
        answer = self.plane.admin.get(
            f"/api/v1/namespaces/{namespace}/pods?labelSelector={selector}"
        )
        return sorted((PodView.of(p) for p in answer["items"]), key=lambda p: p.name)

    def wait(
        self,
        what: str,
        selector: str,
        check: Any,
        namespace: str = NAMESPACE,
        timeout: float = READY_TIMEOUT,
    ) -> list[PodView]:
        """The pods of ``selector`` once ``check(pods)`` holds."""
        found: list[PodView] = []

        def probe() -> bool:
            found[:] = self.of(selector, namespace)
            return bool(check(found))

        wait_until(what, probe, timeout, interval=0.2, show=lambda: self.explained(found))
        return found

    def explained(self, pods: list[PodView]) -> str:
        """The pods, and what the scheduler and the kubelet said of those not Ready: what a
        failed wait shows."""
        lines = [repr(pod) for pod in pods]
        for pod in pods:
            if not pod.ready:
                path = (
                    f"/api/v1/namespaces/{pod.namespace}/events?"
                    f"fieldSelector=involvedObject.name={pod.name}"
                )
                events = self.plane.admin.get(path)["items"]
                lines += [f"  {pod.name}: {e['reason']}: {e['message']}" for e in events[-3:]]
        return "\n".join(lines)

    def running(
        self, selector: str, count: int, namespace: str = NAMESPACE, timeout: float = READY_TIMEOUT
    ) -> list[PodView]:
        """Exactly ``count`` Ready pods of ``selector`` that are not terminating (others may
        be Pending)."""
        return [
            pod
            for pod in self.wait(
                f"{count} Ready pods of {selector}",
                selector,
                lambda pods: sum(p.serving for p in pods) == count,
                namespace,
                timeout,
            )
            if pod.serving
        ]

    def logs(self, pod: PodView) -> str:
        return self.plane.kubectl("logs", "-n", pod.namespace, pod.name)

    def tokens(self, pods: Iterable[PodView]) -> list[str]:
        """What each demo pod printed of its token (``my token: token-1``)."""
        return sorted(self.logs(pod).strip().rsplit(" ", 1)[-1] for pod in pods)

    def refusals(self, pod: PodView) -> list[str]:
        """The scheduler's FailedScheduling messages about ``pod`` so far, oldest first."""
        path = (
            f"/api/v1/namespaces/{pod.namespace}/events?fieldSelector="
            f"involvedObject.name={pod.name},reason=FailedScheduling"
        )
        return [str(item["message"]) for item in self.plane.admin.get(path)["items"]]

    def scheduling_message(self, pod: PodView, timeout: float = 60.0) -> str:
        """The scheduler's last FailedScheduling message about ``pod``."""

        def message() -> str | None:
            refusals = self.refusals(pod)
            return refusals[-1] if refusals else None

        return wait_until(f"a FailedScheduling event of {pod.name}", message, timeout)

    def events(self, pod: PodView, reason: str) -> list[str]:
        path = (
            f"/api/v1/namespaces/{pod.namespace}/events?fieldSelector="
            f"involvedObject.name={pod.name},reason={reason}"
        )
        return [str(e["message"]) for e in self.plane.admin.get(path)["items"]]

    def delete_all(self, selector: str, namespace: str = NAMESPACE) -> None:
        """Every pod of ``selector`` gone (not only asked to go)."""
        self.plane.kubectl(
            "delete", "pods", "-n", namespace, "-l", selector, "--wait=false", "--ignore-not-found"
        )
        self.wait(f"no pods of {selector}", selector, lambda pods: not pods, namespace)


def wait_seconds(start: float) -> float:
    return round(time.monotonic() - start, 2)
