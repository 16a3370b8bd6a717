"""Token pods survive a node reboot: the agent is ready before the kubelet starts.

After a reboot a real kubelet admits every pod bound to its node again, about a second after it
starts, and rejects for good a pod whose resource has no healthy device at that moment
(UnexpectedAdmissionError, kubernetes/kubernetes#125579). Here the kubelet stand-in runs as
kubelet.service and starts as a real one does (tests/standin/admission.py): it wipes the
device-plugin directory, creates kubelet.sock 0.35 s after its start and admits the pods of the
node 0.9 s after that, allocating new pods and checking those of its checkpoint. When the node goes
down it removes its kubelet.sock, or, as the real node of issue 18 showed, leaves it behind, so
that the agent starts beside a stale one. The node is a booted container with a root of its own that
reboots for real (tests/system/reboot.py): an orderly shutdown, then a fresh boot, every time.

Each suite's container installs its package (Debian 12 and 13: the .deb; Debian 11: the
self-contained one), runs three pods that hold every token, then reboots REBOOTS times with
each kind of kubelet exit: no pod may be rejected, and systemd must have had the agent ready
before it started the kubelet (and stopped the kubelet first at shutdown). Then the agent's
start fails (a broken file) and hangs (it never sends READY=1): the kubelet must start at once,
and after the start time-out at most. Every test prints its timings.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.system import harness
from tests.system.conftest import BUNDLED_PRIVATE, copy_standin, started
from tests.system.node import CONFIG, UNIT, kubelet_unit, wait_for
from tests.system.reboot import (
    STARTED,
    STOPPED,
    STOPPING,
    RebootableNode,
    first,
    job_began,
    last,
    persistent_root,
)

pytestmark = pytest.mark.suites(*harness.SUITES, *harness.BUNDLED_SUITES)

KUBELET = "kubelet.service"
TOKEN = "example.com/token"
LICENSE = "example.com/license"
RESOURCES = {TOKEN: 2, LICENSE: 5}
# Pods holding every token and three license seats.
PODS = {"demo-0": {TOKEN: 1}, "demo-1": {TOKEN: 1}, "seats": {LICENSE: 3}}
PODS_FILE = "/var/lib/kubelet-standin/pods.json"  # the "API server": kept across reboots
RUNTIME_FILE = "/run/kubelet-standin/containers.json"  # the running containers: not kept
# A real 1.36 kubelet: kubelet.sock at 0.33-0.42 s, the pods admitted at 1.27-1.32 s, once
# its Node has synced. Timed from the socket, so that a stand-in slowed down by a busy machine
# (its Python start-up) still gives the plugins the time a real one would.
KUBELET_START = ("--socket-after", "0.35", "--admit-after", "0.9")
# TOKEN_RESOURCE_REBOOTS=N: more of them, to see how often something happens.
REBOOTS = int(os.environ.get("TOKEN_RESOURCE_REBOOTS", "3"))
BROKEN = '[resources]\n"example.com/token" = -1\n'
HANG_DROP_IN = "/etc/systemd/system/token-resource.service.d/hang.conf"
# A main process that never sends READY=1; its first line marks when it started.
NEVER_READY = "never ready"
HANG = f"[Service]\nExecStart=\nExecStart=/bin/sh -c 'echo {NEVER_READY}; exec sleep infinity'\n"
# What systemd needs, after the time-out, to stop the hung start and begin the kubelet's job.
STOP_AND_NEXT_JOB = 2.0


@pytest.fixture(scope="module")
def pythonpath(suite: str) -> tuple[str, ...]:
    """Where the stand-in finds its files and the agent's libraries (grpc, token_resource)."""
    if suite in harness.BUNDLED_SUITES:
        return ("/srv/test", BUNDLED_PRIVATE)
    return ("/srv/test",)


def install_kubelet(node: RebootableNode, pythonpath: tuple[str, ...], leave_socket: bool) -> None:
    """The stand-in as kubelet.service, starting as a real kubelet does; ``leave_socket``: it
    leaves a stale kubelet.sock behind when the node goes down, as a real node showed."""
    unit = kubelet_unit(
        *KUBELET_START,
        "--pods", PODS_FILE, "--runtime-file", RUNTIME_FILE,
        *(["--leave-socket"] if leave_socket else []),
        pythonpath=pythonpath,
    )  # fmt: skip
    node.write("/etc/systemd/system/kubelet.service", unit)
    node.systemctl("daemon-reload")


@pytest.fixture(scope="module")
def node(
    suite: str,
    pythonpath: tuple[str, ...],
    rootfs: Path,
    session_dir: Path,
    request: pytest.FixtureRequest,
) -> Iterator[RebootableNode]:
    """A node of its own root with the package, the pods running and the stand-in enabled."""
    directory = session_dir / f"reboot-{suite}"
    shutil.rmtree(directory, ignore_errors=True)
    files = directory / "srv"
    files.mkdir(parents=True)
    if suite in harness.BUNDLED_SUITES:
        deb = request.getfixturevalue("bundled_deb")
    else:
        deb = request.getfixturevalue("artifacts") / "token-resource.deb"
    shutil.copy(deb, files / "package.deb")
    copy_standin(files)
    with (
        persistent_root(rootfs, directory / "overlay") as root,
        started(
            RebootableNode(rootfs=root, binds=[(files, "/srv/test")], volatile=False), session_dir
        ) as node,
    ):
        node.make_journal_persistent()
        write_pods(node)
        install_kubelet(node, pythonpath, leave_socket=True)
        node.systemctl("enable", KUBELET)
        node.exec(["apt-get", "install", "-y", "-q", "/srv/test/package.deb"], timeout=300)
        node.write_config(RESOURCES)
        node.systemctl("reload", UNIT)
        node.systemctl("start", KUBELET)
        view = admitted(node)
        outcome = {name: (pod["phase"], pod["message"]) for name, pod in view["pods"].items()}
        assert outcome == dict.fromkeys(PODS, ("Running", "")), boot_log(node)
        yield node


def write_pods(node: RebootableNode) -> None:
    """The node's pods, as new (what a controller does for pods that failed)."""
    pods = {name: {"resources": resources} for name, resources in PODS.items()}
    node.write(PODS_FILE, json.dumps({"pods": pods}, indent=1))


def admitted(node: RebootableNode, timeout: float = 60) -> dict[str, Any]:
    """The stand-in's view once this boot's kubelet has admitted the node's pods."""
    return node.wait_for_view(
        lambda view: view.get("admitted_at") is not None, "the kubelet's pod admission", timeout
    )


@dataclass(frozen=True)
class Timeline:
    """One boot, in seconds from the kubelet's start (systemd's ExecMainStartTimestamp)."""

    ready: float  # the agent's READY=1 (its unit became active)
    kubelet_sock: float
    registered: float  # the last resource's Register
    listed: float  # the last resource's first device list
    admitted: float
    rejected: dict[str, str]

    @classmethod
    def of(cls, node: RebootableNode, view: dict[str, Any]) -> Timeline:
        start = node.seconds("ExecMainStartTimestampMonotonic", KUBELET)
        ready = node.seconds("ActiveEnterTimestampMonotonic", UNIT)
        resources = view["resources"].values()
        return cls(
            ready=ready - start,
            kubelet_sock=view["socket_at"] - start,
            registered=max((r["registered_at"] for r in resources), default=0.0) - start,
            listed=max((r["listed_at"] or 0.0 for r in resources), default=0.0) - start,
            admitted=view["admitted_at"] - start,
            rejected={
                name: pod["message"]
                for name, pod in view["pods"].items()
                if pod["phase"] != "Running"
            },
        )

    def __str__(self) -> str:
        return (
            f"agent READY {self.ready:+.3f} s, kubelet start 0, kubelet.sock "
            f"{self.kubelet_sock:+.3f} s, registered {self.registered:+.3f} s, listed "
            f"{self.listed:+.3f} s, admitted {self.admitted:+.3f} s: "
            + (f"rejected {self.rejected}" if self.rejected else "no pod rejected")
        )


@pytest.mark.parametrize(
    "kubelet_exit", ["kubelet.sock-removed", "kubelet.sock-left"], ids=lambda exit_: exit_
)
def test_after_every_reboot_no_pod_is_rejected_and_the_agent_was_ready_first(
    node: RebootableNode,
    suite: str,
    pythonpath: tuple[str, ...],
    session_dir: Path,
    kubelet_exit: str,
) -> None:
    """Whether the kubelet removed its socket when the node went down, or left it, the agent
    registers in time (in the second case it starts while a stale kubelet.sock is there)."""
    install_kubelet(node, pythonpath, leave_socket=kubelet_exit == "kubelet.sock-left")
    # The running kubelet is the one that goes down at the first reboot: it must be this kind,
    # and have replaced the socket of the one before. (Its containers still run: it admits
    # nothing again.)
    restarted = time.monotonic()
    node.systemctl("restart", KUBELET)
    node.wait_for_view(lambda view: view["socket_at"] > restarted, "the new kubelet's socket")
    runs: list[tuple[Timeline, float, float]] = []
    for _ in range(REBOOTS):
        # Pods rejected by an earlier reboot come back as new ones, so that every reboot
        # counts on its own (they only are if the test fails anyway).
        write_pods(node)
        node.reboot(session_dir)
        view = admitted(node)
        assert set(view["pods"]) == set(PODS), "every pod is admitted again after a reboot"
        # The journal: the agent's start done (READY=1) before the kubelet's job began; at the
        # shutdown before, the kubelet stopped before the agent began to stop.
        now, before = node.unit_entries(), node.unit_entries(-1)
        ready = first(now, UNIT, STARTED).monotonic - job_began(now, KUBELET).monotonic
        stop = last(before, UNIT, STOPPING).monotonic - last(before, KUBELET, STOPPED).monotonic
        runs.append((Timeline.of(node, view), ready, stop))
        if runs[-1][0].rejected:
            print(
                f"--- reboot {len(runs)}: the agent's and the kubelet's journal\n" + boot_log(node)
            )
    report = "\n".join(
        f"{suite} reboot {i} ({kubelet_exit}): {timeline}; journal: the agent started "
        f"{ready:+.3f} s from the kubelet's start job, and at the shutdown before began to stop "
        f"{stop:+.3f} s after the kubelet stopped"
        for i, (timeline, ready, stop) in enumerate(runs, 1)
    )
    print(report)
    assert not [timeline for timeline, _, _ in runs if timeline.rejected], report
    assert all(timeline.ready < 0 and ready < 0 for timeline, ready, _ in runs), report
    assert all(stop >= 0 for _, _, stop in runs), report


def test_a_broken_file_fails_the_start_at_once_and_the_kubelet_starts(
    node: RebootableNode, suite: str, session_dir: Path
) -> None:
    node.write(CONFIG, BROKEN)
    write_pods(node)
    node.reboot(session_dir)
    view = admitted(node)
    entries = node.unit_entries()
    held = job_began(entries, KUBELET).monotonic - job_began(entries, UNIT).monotonic
    timeout = start_timeout(node)
    print(f"{suite}: broken file: the kubelet's start job began {held:.3f} s after the agent's")
    assert held < timeout
    # The start failed (ExecStartPre=) and keeps being retried: no agent, so the pods are lost,
    # as on a node with no plugin.
    failed = [e for e in entries if e.unit == UNIT and e.message_id == STARTED]
    assert not failed, failed
    assert {pod["phase"] for pod in view["pods"].values()} == {"Failed"}, view["pods"]
    assert node.show("ActiveState", KUBELET) == "active"
    node.write_config(RESOURCES)  # the next restart serves again


def test_a_hung_start_holds_the_kubelet_back_by_the_start_timeout_at_most(
    node: RebootableNode, suite: str, session_dir: Path
) -> None:
    node.write_config(RESOURCES)
    node.write(HANG_DROP_IN, HANG)
    node.reboot(session_dir)
    wait_for(lambda: node.seconds("ExecMainStartTimestampMonotonic", KUBELET), 90, "the kubelet")
    timeout = start_timeout(node)
    entries = node.unit_entries()
    job = job_began(entries, UNIT).monotonic
    kubelet = job_began(entries, KUBELET).monotonic
    hung = never_ready_started(node)
    print(
        f"{suite}: hung start: the kubelet's start job began {kubelet - hung:.3f} s after the "
        f"agent's main process started ({kubelet - job:.3f} s after its start job, the check "
        f"included); TimeoutStartSec={timeout:g}s"
    )
    # It waited (the ordering holds), for no longer than the time-out.
    assert timeout - 1.0 <= kubelet - hung <= timeout + STOP_AND_NEXT_JOB
    assert node.show("ActiveState", KUBELET) == "active"
    node.exec(["rm", HANG_DROP_IN])
    node.systemctl("daemon-reload")


def boot_log(node: RebootableNode) -> str:
    return node.exec(
        ["journalctl", "-b", "-o", "short-monotonic", "--no-pager", "-u", UNIT, "-u", KUBELET],
        check=False,
    ).stdout


def start_timeout(node: RebootableNode) -> float:
    value = node.show("TimeoutStartUSec")  # "15s"
    assert re.fullmatch(r"\d+s", value), value
    return float(value[:-1])


def never_ready_started(node: RebootableNode) -> float:
    """When the hung main process wrote its line: the start of the agent's ExecStart=."""
    lines = node.exec(["journalctl", "-b", "-u", UNIT, "-o", "json", "--no-pager"]).stdout
    for line in lines.splitlines():
        fields = json.loads(line)
        if fields.get("MESSAGE") == NEVER_READY:
            return int(fields["__MONOTONIC_TIMESTAMP"]) / 1e6
    raise AssertionError(f"no {NEVER_READY!r} line in the agent's journal")
