"""The token-demo's container stops at once on SIGTERM, as PID 1, the way the kubelet stops it.

Its command line, read from the manifest, runs under busybox's sh (the image's shell) as PID 1
of a PID namespace of its own (unshare), where the kernel delivers a signal only if the process
has a handler for it. SIGTERM must end it within STOP_SECONDS, not after the pod's whole grace
period; the old `exec sleep` command is kept here to show that the test tells them apart.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from tests.deploy.test_manifests import DEMO, of_kind, rendered

STOP_SECONDS = 2.0
TIMEOUT = 30.0
TOKEN_ENV = {"TOKEN_RESOURCE_EXAMPLE_COM_TOKEN": "token-1"}
# The demo's command before it trapped SIGTERM.
EXEC_SLEEP = [
    "sh",
    "-c",
    'echo "my token: $TOKEN_RESOURCE_EXAMPLE_COM_TOKEN"; exec sleep 2147483647',
]


def demo_command() -> list[str]:
    (deployment,) = of_kind(rendered(DEMO), "Deployment")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert "args" not in container, "the image's entrypoint is replaced by command alone"
    return list(container["command"])


@contextmanager
def as_pid_1(command: Sequence[str]) -> Iterator[tuple[subprocess.Popen[str], int]]:
    """``command`` as PID 1 of a new PID namespace, with busybox's applets for ``sh``;
    yields (unshare's process, PID 1's pid here) once its first line is out."""
    busybox = shutil.which("busybox")
    assert busybox, "busybox is needed for this test (.ci/run installs it)"
    assert command[0] == "sh", command
    # Without root, a user namespace of its own lets unshare make the PID namespace.
    user = [] if os.geteuid() == 0 else ["--user", "--map-root-user"]
    process = subprocess.Popen(
        ["unshare", *user, "--pid", "--fork", "--mount-proc", busybox, *command],
        stdout=subprocess.PIPE,
        text=True,
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **TOKEN_ENV},
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line == "my token: token-1\n", line
        (child,) = Path(f"/proc/{process.pid}/task/{process.pid}/children").read_text().split()
        status = Path(f"/proc/{child}/status").read_text().splitlines()
        (pids,) = [line.split()[1:] for line in status if line.startswith("NSpid:")]
        assert pids == [child, "1"], pids  # PID 1 in its namespace
        yield process, int(child)
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(TIMEOUT)
        if process.stdout is not None:
            process.stdout.close()


def stopped_within(process: subprocess.Popen[str], pid_1: int, seconds: float) -> float | None:
    """Send SIGTERM to PID 1 as the runtime does; how long it took to end, or None."""
    sent = time.monotonic()
    os.kill(pid_1, signal.SIGTERM)
    try:
        process.wait(seconds)
    except subprocess.TimeoutExpired:
        return None
    return time.monotonic() - sent


def test_the_demo_ends_on_sigterm_at_once() -> None:
    with as_pid_1(demo_command()) as (process, pid_1):
        took = stopped_within(process, pid_1, STOP_SECONDS)
    print(f"token-demo as PID 1: ended {took} s after SIGTERM")
    assert took is not None, f"still running {STOP_SECONDS} s after SIGTERM"
    assert process.returncode == 0


def test_exec_sleep_as_pid_1_ignores_sigterm() -> None:
    """Why the demo traps TERM: the same test on the old command sees it keep running."""
    with as_pid_1(EXEC_SLEEP) as (process, pid_1):
        assert stopped_within(process, pid_1, STOP_SECONDS) is None
        os.kill(pid_1, signal.SIGKILL)
