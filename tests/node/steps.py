"""What the real node's tests do and check, step by step, whatever form the agent takes (the
host's process or a DaemonSet): the demo served to the count, a kubelet restart, a reboot
measured, what the scheduler was offered meanwhile."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from tests.kube.client import wait_until
from tests.node.bounds import READY_AFTER_REBOOT
from tests.node.demo import Demo
from tests.node.figures import Figures
from tests.node.modes import Mode, wait_offered
from tests.node.node import RealNode
from tests.node.pods import PodView

REJECTED = "UnexpectedAdmissionError"
# How long a reboot's pods are waited for: past the bound (tests/node/bounds.py) and past the
# kubelet's own retry (its resync, a minute and up to half of one more), so that a bound
# crossed fails with the figure measured, not a time-out.
AFTER_REBOOT = 180.0
SAMPLE_SECONDS = 0.2


def expected_tokens(mode: Mode, count: int) -> list[str]:
    """What ``count`` demo pods print: their tokens, or nothing without a variable."""
    return [f"token-{i}" for i in range(count)] if mode.variable else [""] * count


def to_the_count(demo: Demo, mode: Mode, count: int = 2) -> list[PodView]:
    """The demo applied: ``count`` replicas run, each with its token, and the one over the
    count waits with the scheduler's message. Returns the running ones."""
    demo.apply()
    running = demo.running(count)
    assert demo.tokens(running) == expected_tokens(mode, count)
    message = demo.pods.scheduling_message(demo.one_waiting())
    assert message.startswith(mode.over_the_count), message
    return running


def undisturbed(workload: Demo, before: list[PodView]) -> None:
    """``before``'s pods still there, Ready, in the same containers, never restarted."""
    now = workload.same(before)
    assert [(p.uid, p.container_ids) for p in now] == [(p.uid, p.container_ids) for p in before]
    assert all(p.serving and p.restarts == 0 for p in now), now


def a_kubelet_restart_disturbs_nothing(
    node: RealNode, mode: Mode, running: dict[Demo, list[PodView]], count: int = 2
) -> None:
    """The kubelet restarted under ``running`` pods: once it has them again and the agent's
    ``count`` tokens are offered again, every one runs on undisturbed."""
    node.restart_kubelet()
    # The kubelet's new life has its pods again (it admits each as it adds it) and the agent's
    # resource is back with it.
    wait_until(
        "the restarted kubelet's pods",
        lambda: node.kubelet.log_lines("SyncLoop ADD.*token-demo", node.kubelet.starts),
    )
    wait_offered(node.control_plane, node.name, mode, count)
    for workload, pods in running.items():
        undisturbed(workload, pods)


def tried(node: RealNode, mode: Mode) -> bool:
    """Whether the kubelet's latest life has admitted (or rejected) both token pods and, with
    DRA, failed to prepare their claims."""
    found = "Failed to prepare dynamic resources" if mode.dra else "Pod Admit Result"
    lines = node.kubelet.log_lines(f"{found}.*token-demo", node.kubelet.starts)
    return len({line.rsplit("pod=", 1)[-1] for line in lines}) >= 2


def measured_reboot(
    node: RealNode,
    mode: Mode,
    demo: Demo,
    before: list[PodView],
    figures: Figures,
    form: str,
    reboot: Callable[[], float],
    bound: float | None = None,
) -> tuple[int, list[PodView]]:
    """``reboot`` (which returns when the kubelet started), then ``before``'s count of demo
    pods Ready in containers of the node's new life, within ``bound`` (else the mode's) of the
    kubelet's start: (the token pods the kubelet rejected meanwhile, the pods running now),
    the figures recorded."""
    failed = {pod.uid for pod in demo.all() if pod.reason == REJECTED}
    started = reboot()
    running = demo.running_anew(len(before), before, timeout=AFTER_REBOOT)
    ready = time.monotonic() - started
    rejected = sum(1 for pod in demo.all() if pod.reason == REJECTED and pod.uid not in failed)
    figures.add(
        node.release,
        f"reboot, {mode.advertise}, {form}",
        f"{rejected} token pods rejected, Ready {ready:.1f} s after the kubelet started",
    )
    bound = READY_AFTER_REBOOT[mode.advertise] if bound is None else bound
    assert ready <= bound, (
        f"token pods Ready {ready:.1f} s after the kubelet started ({form}), over the bound "
        f"of {bound:.0f} s: the kubelet's own retry, not the agent, ran them?\n"
        + demo.pods.explained(demo.all())
    )
    return rejected, running


@contextmanager
def offered_meanwhile(node: RealNode, mode: Mode) -> Iterator[list[int]]:
    """What the scheduler was offered (mode.offered), sampled until the block ends."""
    samples: list[int] = []
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            samples.append(mode.offered(node.control_plane, node.name))
            done.wait(SAMPLE_SECONDS)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        yield samples
    finally:
        done.set()
        thread.join()
