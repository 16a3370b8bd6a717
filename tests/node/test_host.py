"""The host package's agent on a real node (the kubelet of 1.36, then 1.37, on containerd 2.x),
in each way of advertising; with DRA a cluster pool's publisher beside it.

- The token-demo example, unchanged, runs as many replicas as there are tokens, each with its
  token's variable; the replica over the count waits with the scheduler's own message; a live
  edit of the file runs it.
- A kubelet restart disturbs no running token pod; after a reboot with the agent ordered
  before the kubelet (its unit's ``Before=kubelet.service``) no token pod is rejected, and
  with the agent started after the kubelet a device plugin's are (the others wait).
- A package upgrade restarts the agent without disturbing running pods; what becomes of a pod
  the kubelet admits while no agent serves is measured.
- A failing probe takes the tokens away and a new pod waits; back again, it runs.
"""

from __future__ import annotations

import datetime
import os
import subprocess
from pathlib import Path

import pytest

from tests.kube.client import wait_until
from tests.node.demo import Demo
from tests.node.figures import Figures
from tests.node.host import REGISTERED, HostForm
from tests.node.licenses import license_server, probes_take_the_tokens_away
from tests.node.modes import CANNOT_ALLOCATE, Mode
from tests.node.node import RealNode
from tests.node.steps import (
    REJECTED,
    a_kubelet_restart_disturbs_nothing,
    expected_tokens,
    measured_reboot,
    to_the_count,
    tried,
    undisturbed,
)
from tests.system.harness import build_deb, project_version

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

    rejected, _ = measured_reboot(
        node, mode, demo, now, figures, "host agent after the kubelet", late
    )
    # The kubelet admits a pod once: a device plugin's is rejected; the others wait.
    assert (rejected > 0) == (mode.advertise == "device-plugin")


@pytest.fixture(scope="session")
def new_version(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The newer version's Python package, from its .deb ($TOKEN_RESOURCE_UPGRADE_DEB, which
    make node-test builds, else built now): the directory to put first on PYTHONPATH."""
    given = os.environ.get("TOKEN_RESOURCE_UPGRADE_DEB")
    directory = tmp_path_factory.mktemp("new-version")
    deb = Path(given) if given else build_deb(f"{project_version()}+nodetest1", directory)
    subprocess.run(["dpkg-deb", "-x", str(deb), str(directory / "root")], check=True)
    return directory / "root" / "usr" / "lib" / "python3" / "dist-packages"


def log_time(line: str) -> datetime.datetime:
    """The time an agent's log line starts with (``2026-12-04 21:22:58,357``)."""
    return datetime.datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f")


def upgrade(host: HostForm, new_version: Path, meanwhile: object = None) -> None:
    """What dh_installsystemd's postinst does: the unit restarted (SIGTERM, then the new
    version started and READY=1); ``meanwhile`` (a callable) runs while no agent serves."""
    host.agent.stop()
    if callable(meanwhile):
        meanwhile()
    host.start_agent(env={"PYTHONPATH": str(new_version)})


def test_a_package_upgrade_disturbs_no_token_pod(
    node: RealNode, mode: Mode, host: HostForm, demo: Demo, new_version: Path, figures: Figures
) -> None:
    host.start()
    demo.apply()
    before = demo.scaled(1)
    upgrade(host, new_version)
    log = host.agent.log()
    assert "token-resource 0.1.0" in log.split(STOPPING)[0]
    assert f"token-resource {version_of(new_version)} starting" in log.split(STOPPING)[-1]
    undisturbed(demo, before)
    words = REGISTERED.get(mode.advertise)
    if words is not None:
        lines = log.splitlines()
        stopped = log_time(next(line for line in reversed(lines) if STOPPING in line))
        registered = log_time(next(line for line in reversed(lines) if words in line))
        figures.add(
            node.release,
            f"package upgrade, {mode.advertise}",
            f"not registered for {(registered - stopped).total_seconds():.2f} s",
        )

    # A pod made while no agent serves the resource: the kubelet admits it, unless the Node's
    # status has told the scheduler of the device plugin's absence first (it updates every
    # 10 s), when it waits unscheduled instead.
    unscheduled: list[str] = []
    admitted: list[str] = []  # the kubelet's line of its try

    def a_pod_meanwhile() -> None:
        since = len(node.kubelet.log_text())
        demo.scale(2)

        def tried_or_refused() -> bool:
            admitted[:] = tried_new(node, mode, since)
            if admitted:
                return True
            if mode.advertise != "device-plugin":
                return False  # its Node or slices keep offering the tokens
            unscheduled[:] = [
                pod.name for pod in demo.waiting() if pod.node is None and demo.pods.refusals(pod)
            ]
            return bool(unscheduled)

        def seen() -> str:
            lines = node.kubelet.log_text()[since:].splitlines()
            told = [line for line in lines if "token-demo" in line or "claim" in line]
            return "\n".join([demo.pods.explained(demo.all()), *told[-20:]])

        wait_until(
            "the kubelet's (or the scheduler's) try of the new pod", tried_or_refused, show=seen
        )

    upgrade(host, new_version, a_pod_meanwhile)
    if mode.dra:
        # Not rejected: its claim's prepare failed, and the kubelet tries it again at its
        # resync (a minute and up to half of one more; the host's agent may not ask sooner).
        old = {pod.uid for pod in before}
        (new,) = [pod for pod in demo.all() if pod.uid not in old and not pod.deleting]
        assert demo.pods.events(new, "FailedPrepareDynamicResources"), new
        outcome = "ran" if new.ready else "waits for the kubelet's resync, not rejected"
        rejected = [pod for pod in demo.all() if pod.reason == REJECTED]
    else:
        demo.running(2)
        # Read once the replacement runs: the kubelet's status manager writes a rejection a
        # moment after it logs it, and the ReplicaSet replaces the pod only once it sees it.
        rejected = [pod for pod in demo.all() if pod.reason == REJECTED]
        outcome = "rejected (UnexpectedAdmissionError), replaced" if rejected else "ran"
        if unscheduled:
            outcome = "not scheduled (the Node offered 0 already), ran once the agent was back"
        elif not rejected and mode.advertise == "device-plugin":
            # Not expected (no plugin served it): what the kubelet said, and when the new agent
            # was back, for the failure's message.
            back = [line for line in host.agent.log().splitlines() if words and words in line]
            outcome += f" (admitted: {admitted[0][:120]}; agent registered: {back[-1][:23]})"
    figures.add(
        node.release, f"package upgrade, {mode.advertise}: a pod the kubelet admitted meanwhile",
        outcome,
    )  # fmt: skip
    if mode.advertise == "device-plugin":
        assert bool(rejected) != bool(unscheduled), (rejected, unscheduled)
    else:
        assert (rejected, unscheduled) == ([], [])


def version_of(package: Path) -> str:
    (info,) = package.glob("token_resource-*.dist-info")
    return info.name.removeprefix("token_resource-").removesuffix(".dist-info")


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
