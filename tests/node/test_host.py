"""The host package's agent on a real node (the kubelet of 1.36, then 1.37, on containerd 2.x),
in each way of advertising; with DRA a cluster pool's publisher beside it.

- The token-demo example, unchanged, runs as many replicas as there are tokens, each with its
  token's variable; the replica over the count waits with the scheduler's own message; a live
  edit of the file runs it.
- A kubelet restart disturbs no running token pod; after a reboot with the agent ordered
  before the kubelet (its unit's ``Before=kubelet.service``) no token pod is rejected, and
  with the agent started after the kubelet a device plugin's are (the others wait).
- A package upgrade (and a downgrade) puts the other version's files in place of the running
  code's and hands over (``token-resource handover``): the new code serves before the old
  leaves, the kubelet never without the resource (a 1.36 device plugin, one endpoint at a
  time: within a bound), running pods undisturbed; a pod made as the handover begins runs,
  not rejected (on 1.36 a device plugin's may be, and is replaced).
- A failing probe takes the tokens away and a new pod waits; back again, it runs.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.kube.client import wait_until
from tests.node.bounds import (
    READY_AFTER_A_LATE_HOST_DRIVER,
    UNREGISTERED_IN_A_HANDOVER,
    WINDOW_POD_READY,
)
from tests.node.demo import Demo
from tests.node.figures import Figures, log_time
from tests.node.host import REGISTERED, HostForm
from tests.node.licenses import license_server, probes_take_the_tokens_away
from tests.node.modes import CANNOT_ALLOCATE, Mode
from tests.node.node import RealNode
from tests.node.packages import DIST_PACKAGES, Installation, installations, installed_env
from tests.node.steps import (
    REJECTED,
    a_kubelet_restart_disturbs_nothing,
    expected_tokens,
    measured_reboot,
    to_the_count,
    tried,
    undisturbed,
)

# The old agent's line as it leaves, once its successor is the service.
HANDED_OVER = "stopping: handed over to pid"
# How long the new agent's registration is waited for after the handover's answer, to measure
# it; the bound is UNREGISTERED_IN_A_HANDOVER.
REGISTERED_AFTER_A_HANDOVER = 30.0


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


def one_at_a_time(node: RealNode, mode: Mode) -> bool:
    """Whether the node's kubelet keeps one endpoint per device-plugin resource (before 1.37):
    a successor then registers as its predecessor leaves, not before."""
    return mode.advertise == "device-plugin" and not node.at_least("1.37")


def upgrade(
    host: HostForm,
    mode: Mode,
    to: Installation,
    installed: Path,
    figures: Figures,
    what: str,
    meanwhile: Callable[[], None] | None = None,
) -> None:
    """What the package's postinst does: ``to``'s files put in place of the running code's (as
    dpkg unpacks them), then ``token-resource handover``; ``meanwhile`` runs as it starts. The
    new code is what runs, and the kubelet had the resource registered throughout (a 1.36
    device plugin: from the old agent's leaving to the new one's registration, within a
    bound)."""
    before = len(host.agent.log())
    to.install(installed)
    with ThreadPoolExecutor(1) as pool:
        handing = pool.submit(host.agent.handover)
        if meanwhile is not None:
            meanwhile()
        result = handing.result()
    assert result.returncode == 0, (result.stdout, result.stderr)
    to.assert_runs(host.agent, installed)
    words = REGISTERED.get(mode.advertise)
    if words is None:
        return  # node-status: the Node keeps the capacity, nothing registers

    def handover_lines() -> list[str]:
        """What the agents logged since the handover began: the old one's leaving, and the
        new one's registration (only the new agent registers then)."""
        return host.agent.log()[before:].splitlines()

    # A successor that registers once its predecessor has left (a 1.36 device plugin's) may
    # do so after the handover's answer: waited for, and over the bound if it comes late.
    wait_until(
        "the new agent's registration",
        lambda: any(words in line for line in handover_lines()),
        timeout=REGISTERED_AFTER_A_HANDOVER,
        show=lambda: "\n".join(handover_lines()),
    )
    lines = handover_lines()
    left = log_time(next(line for line in lines if HANDED_OVER in line))
    registered = log_time(next(line for line in lines if words in line))
    seconds = (registered - left).total_seconds()
    node = host.agent.node
    if seconds <= 0:
        figure = f"the new agent registered {-seconds:.2f} s before the old one left"
    else:
        figure = f"not registered for {seconds:.2f} s"
    figures.add(node.release, f"{what}, {mode.advertise}", figure)
    bound = UNREGISTERED_IN_A_HANDOVER if one_at_a_time(node, mode) else 0.0
    assert seconds <= bound, f"{figure}: over the bound of {bound} s"


def test_a_package_upgrade_disturbs_no_token_pod(
    node: RealNode,
    mode: Mode,
    host: HostForm,
    demo: Demo,
    versions: tuple[Installation, Installation],
    tmp_path: Path,
    figures: Figures,
) -> None:
    old, new = versions
    installed = tmp_path / "installed" / DIST_PACKAGES
    old.install(installed)
    host.start(env=installed_env(installed))
    old.assert_runs(host.agent, installed)
    demo.apply()
    before = demo.scaled(1)
    upgrade(host, mode, new, installed, figures, "package upgrade")
    undisturbed(demo, before)
    upgrade(host, mode, old, installed, figures, "package downgrade")
    undisturbed(demo, before)

    made = 0.0

    def make_a_pod() -> None:
        nonlocal made
        made = time.monotonic()
        demo.scale(2)

    upgrade(host, mode, new, installed, figures, "package upgrade", make_a_pod)
    bound = WINDOW_POD_READY[mode.advertise]
    running = demo.running(2, timeout=max(1.0, bound - (time.monotonic() - made)))
    ready = time.monotonic() - made
    # Read once the replacement runs: the kubelet's status manager writes a rejection a moment
    # after it logs it, and the ReplicaSet replaces the pod only once it sees it.
    rejected = [pod for pod in demo.all() if pod.reason == REJECTED]
    (late,) = [pod for pod in running if pod.uid not in {pod.uid for pod in before}]
    failed_prepare = mode.dra and demo.pods.events(late, "FailedPrepareDynamicResources")
    if rejected:
        outcome = "rejected (UnexpectedAdmissionError), replaced"
    elif failed_prepare:
        outcome = "prepared at the kubelet's resync"
    else:
        outcome = "ran"
    figures.add(
        node.release,
        f"package upgrade, {mode.advertise}: a pod made as the handover began",
        f"{outcome}, Ready {ready:.1f} s after it was made",
    )
    if not one_at_a_time(node, mode):
        assert outcome == "ran", (outcome, rejected)
    assert ready <= bound, f"{outcome}: Ready {ready:.1f} s after it was made, over {bound:.0f} s"


def test_a_failing_probe_takes_the_tokens_away(
    node: RealNode, mode: Mode, host: HostForm, demo: Demo, license_demo: Demo
) -> None:
    with license_server() as server:
        host.configure(3, server.probe, licenses=3)
        host.start()
        probes_take_the_tokens_away(node, mode, server, demo, license_demo)
