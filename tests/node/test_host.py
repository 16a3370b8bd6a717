"""The host package's agent on a real node (the kubelet of 1.36, then 1.37, on containerd 2.x),
in each way of advertising; with DRA a cluster pool's publisher beside it.

- The token-demo example, unchanged, runs as many replicas as there are tokens, each with its
  token's variable; the replica over the count waits with the scheduler's own message; a live
  edit of the file runs it.
- A kubelet restart disturbs no running token pod; after a reboot with the agent ordered
  before the kubelet (its unit's ``Before=kubelet.service``) no token pod is rejected, and
  with the agent started after the kubelet a device plugin's are (the others wait).
- A package upgrade (and a downgrade) restarts the agent on the other version's code, each
  unpacked from its .deb alone, without disturbing running pods, and within a bound of the
  kubelet's registration; a pod the kubelet admits while no agent serves runs within a bound
  (a device plugin's replaced, a DRA pod prepared at the kubelet's resync).
- A failing probe takes the tokens away and a new pod waits; back again, it runs.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from tests.kube.client import wait_until
from tests.node.bounds import (
    READY_AFTER_A_LATE_HOST_DRIVER,
    UNREGISTERED_IN_UPGRADE,
    WINDOW_POD_READY,
)
from tests.node.demo import Demo
from tests.node.figures import Figures, log_time
from tests.node.host import REGISTERED, HostForm
from tests.node.licenses import license_server, probes_take_the_tokens_away
from tests.node.modes import CANNOT_ALLOCATE, Mode
from tests.node.node import RealNode
from tests.node.packages import Installation, installations
from tests.node.pods import PodView
from tests.node.steps import (
    REJECTED,
    a_kubelet_restart_disturbs_nothing,
    expected_tokens,
    measured_reboot,
    to_the_count,
    tried,
    undisturbed,
)

STOPPING = "stopping: removing sockets"


def test_the_demo_runs_to_the_count_and_a_live_edit_runs_the_rest(
    node: RealNode, mode: Mode, host: HostForm, demo: Demo, license_demo: Demo
) -> None:
    host.start()
    to_the_count(demo, mode)
    if mode.dra:
        license_demo.apply()
        license_demo.running(2)
        message = license_demo.pods.scheduling_message(license_demo.one_waiting())
        assert message.startswith(CANNOT_ALLOCATE), message

    host.configure(3, licenses=3)
    assert demo.tokens(demo.running(3)) == expected_tokens(mode, 3)
    if mode.dra:
        license_demo.running(3)


def test_a_kubelet_restart_and_reboots_lose_no_token_pod(
    node: RealNode, mode: Mode, host: HostForm, demo: Demo, license_demo: Demo, figures: Figures
) -> None:
    host.start()
    demo.apply()
    running = {demo: demo.running(2)}
    if mode.dra:
        license_demo.apply()
        running[license_demo] = license_demo.running(2)
    a_kubelet_restart_disturbs_nothing(node, mode, running)

    def ordered_before() -> float:
        host.crash_agent()
        return node.reboot(before_kubelet=host.agent.start)

    rejected, now = measured_reboot(
        node, mode, demo, running[demo], figures, "host agent before the kubelet", ordered_before
    )
    assert rejected == 0

    def late() -> float:
        host.crash_agent()
        started = node.reboot()
        # Late: once the kubelet has admitted the token pods without it (and with DRA failed
        # to prepare their claims).
        wait_until("the kubelet's try of the token pods", lambda: tried(node, mode))
        host.start_agent()
        return started

    bound = READY_AFTER_A_LATE_HOST_DRIVER if mode.dra else None
    rejected, _ = measured_reboot(
        node, mode, demo, now, figures, "host agent after the kubelet", late, bound
    )
    # The kubelet admits a pod once: a device plugin's is rejected; the others wait.
    assert (rejected > 0) == (mode.advertise == "device-plugin")


@pytest.fixture(scope="session")
def versions(tmp_path_factory: pytest.TempPathFactory) -> tuple[Installation, Installation]:
    """The old and the new .deb, each unpacked into a tree of its own."""
    return installations(tmp_path_factory.mktemp("versions"))


def upgrade(
    host: HostForm,
    mode: Mode,
    to: Installation,
    figures: Figures,
    what: str,
    meanwhile: Callable[[], None] | None = None,
) -> None:
    """What dh_installsystemd's postinst does: the unit restarted (SIGTERM, then ``to``'s code
    started and READY=1); ``meanwhile`` runs while no agent serves. The new code is what runs,
    and the time the kubelet had no registration of the resource is within its bound."""
    host.agent.stop()
    if meanwhile is not None:
        meanwhile()
    host.start_agent(env=to.env)
    to.assert_runs(host.agent)
    words = REGISTERED.get(mode.advertise)
    if words is None:
        return  # node-status: the Node keeps the capacity, nothing registers
    lines = host.agent.log().splitlines()
    stopped = log_time(next(line for line in reversed(lines) if STOPPING in line))
    registered = log_time(next(line for line in reversed(lines) if words in line))
    seconds = (registered - stopped).total_seconds()
    figures.add(
        host.agent.node.release, f"{what}, {mode.advertise}", f"not registered for {seconds:.2f} s"
    )
    bound = UNREGISTERED_IN_UPGRADE[mode.advertise]
    assert seconds <= bound, f"not registered for {seconds:.2f} s, over the bound of {bound} s"


def test_a_package_upgrade_disturbs_no_token_pod(
    node: RealNode,
    mode: Mode,
    host: HostForm,
    demo: Demo,
    versions: tuple[Installation, Installation],
    figures: Figures,
) -> None:
    old, new = versions
    host.start(env=old.env)
    old.assert_runs(host.agent)
    demo.apply()
    before = demo.scaled(1)
    upgrade(host, mode, new, figures, "package upgrade")
    undisturbed(demo, before)
    upgrade(host, mode, old, figures, "package downgrade")
    undisturbed(demo, before)

    window = WindowPod(node, mode, demo)
    upgrade(host, mode, new, figures, "package upgrade", window.make)
    bound = WINDOW_POD_READY[mode.advertise]
    running = demo.running(2, timeout=max(1.0, bound - (time.monotonic() - window.made)))
    ready = time.monotonic() - window.made
    # Read once the replacement runs: the kubelet's status manager writes a rejection a moment
    # after it logs it, and the ReplicaSet replaces the pod only once it sees it.
    rejected = [pod for pod in demo.all() if pod.reason == REJECTED]
    old_pods = {pod.uid for pod in before}
    outcome = window.outcome(host, rejected, [pod for pod in running if pod.uid not in old_pods])
    figures.add(
        node.release,
        f"package upgrade, {mode.advertise}: a pod made meanwhile",
        f"{outcome}, Ready {ready:.1f} s after it was made",
    )
    if mode.advertise == "device-plugin":
        assert bool(rejected) != bool(window.unscheduled), (outcome, rejected)
    else:
        assert (rejected, window.unscheduled) == ([], [])
    assert ready <= bound, f"{outcome}: Ready {ready:.1f} s after it was made, over {bound:.0f} s"


class WindowPod:
    """A pod made while no agent serves the resource: the kubelet admits it, unless the Node's
    status has told the scheduler of the device plugin's absence first (it updates every 10 s),
    when it waits unscheduled instead."""

    def __init__(self, node: RealNode, mode: Mode, demo: Demo) -> None:
        self.node, self.mode, self.demo = node, mode, demo
        self.made = 0.0
        self.admitted: list[str] = []  # the kubelet's line of its try
        self.unscheduled: list[str] = []

    def make(self) -> None:
        """The pod made; returns once the kubelet has tried it, or the scheduler refused it."""
        node, demo = self.node, self.demo
        since = len(node.kubelet.log_text())
        self.made = time.monotonic()
        demo.scale(2)

        def tried_or_refused() -> bool:
            self.admitted[:] = tried_new(node, self.mode, since)
            if self.admitted:
                return True
            if self.mode.advertise != "device-plugin":
                return False  # its Node or slices keep offering the tokens
            self.unscheduled[:] = [
                pod.name for pod in demo.waiting() if pod.node is None and demo.pods.refusals(pod)
            ]
            return bool(self.unscheduled)

        def seen() -> str:
            lines = node.kubelet.log_text()[since:].splitlines()
            told = [line for line in lines if "token-demo" in line or "claim" in line]
            return "\n".join([demo.pods.explained(demo.all()), *told[-20:]])

        wait_until(
            "the kubelet's (or the scheduler's) try of the new pod", tried_or_refused, show=seen
        )

    def outcome(self, host: HostForm, rejected: list[PodView], new: list[PodView]) -> str:
        """What became of it, once ``new`` (the pods that run now and did not before) run."""
        if self.mode.dra:
            # Not rejected: its claim's prepare failed, and the kubelet tried it again at its
            # resync (the host's agent may not ask sooner).
            (late,) = new
            assert self.demo.pods.events(late, "FailedPrepareDynamicResources"), late
            return "prepared at the kubelet's resync, not rejected"
        if self.mode.advertise == "node-status":
            return "ran (the Node kept offering the tokens)"
        if self.unscheduled:
            return "not scheduled (the Node offered 0 already), ran once the agent was back"
        if rejected:
            return "rejected (UnexpectedAdmissionError), replaced"
        # Not expected (no plugin served it): what the kubelet said, and when the new agent was
        # back, for the failure's message.
        words = REGISTERED[self.mode.advertise]
        back = [line for line in host.agent.log().splitlines() if words in line]
        return f"ran (admitted: {self.admitted[0][:120]}; agent registered: {back[-1][:23]})"


def tried_new(node: RealNode, mode: Mode, since: int) -> list[str]:
    """The kubelet's lines, after character ``since`` of its log, that say it admitted (or
    rejected) a token pod and, with DRA, failed to prepare its claim. Only since then: the
    node's earlier tests' pods were admitted too (the pod that ran in the window once passed
    this way before the kubelet had seen it)."""
    found = "Failed to prepare dynamic resources" if mode.dra else "Pod Admit Result"
    text = node.kubelet.log_text()[since:]
    return [line for line in text.splitlines() if "token-demo" in line and found in line]


def test_a_failing_probe_takes_the_tokens_away(
    node: RealNode, mode: Mode, host: HostForm, demo: Demo, license_demo: Demo
) -> None:
    with license_server() as server:
        host.configure(3, server.probe, licenses=3)
        host.start()
        probes_take_the_tokens_away(node, mode, server, demo, license_demo)
