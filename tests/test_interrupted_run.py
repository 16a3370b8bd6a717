"""A test run ended by SIGTERM (a time limit, a cancelled CI job) still tears its fixtures down.

Python's default for SIGTERM ends pytest on the spot: an agent test interrupted that way left
its socket directories in /tmp (the device-plugin directory and the agent's own), and an
interrupted reboot test its booted container still running, with the agent in it, its overlay
mount and its root in /tmp. tests/conftest.py turns the first SIGTERM into the interrupt
pytest handles by tearing every fixture down; with it, the same reboot test interrupted the
same way left nothing.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# An agent test that runs for seconds (it kills and restarts the agent 8 times), at a fixed seed.
LONG_AGENT_TEST = (
    "tests/agent/test_faults.py::test_sigkill_at_random_moments_then_restart_recovers[fresh0]"
)
SEED = "408391430"


def _group(pgid: int) -> dict[int, list[str]]:
    """The command lines of the processes in process group ``pgid``."""
    members = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        # The fields after the command name, which is in parentheses and may hold spaces.
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[2]) == pgid:
            members[int(entry.name)] = cmdline.decode(errors="replace").split("\0")
    return members


def _agent_in(pgid: int, timeout: float) -> list[str]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for cmdline in _group(pgid).values():
            if "run" in cmdline and "--control-socket" in cmdline:
                return cmdline
        time.sleep(0.05)
    raise AssertionError(f"no agent started in the inner run within {timeout} s")


def _option(cmdline: list[str], name: str) -> str:
    return cmdline[cmdline.index(name) + 1]


def test_sigterm_to_the_run_tears_the_fixtures_down(tmp_path: Path) -> None:
    env = {**os.environ, "TOKEN_RESOURCE_SEED": SEED}
    inner = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            f"--basetemp={tmp_path / 'inner'}",
            LONG_AGENT_TEST,
        ],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    left: list[Path] = []
    try:
        agent = _agent_in(inner.pid, 60)
        sockets = Path(_option(agent, "--control-socket")).parent.parent
        config = Path(_option(agent, "--config")).read_text()
        device_plugin_dir = Path(config.split('device_plugin_dir = "', 1)[1].split('"', 1)[0])
        left = [sockets, device_plugin_dir]
        assert all(directory.is_dir() for directory in left), left
        # As a CI runner's time limit does: the whole process group.
        os.killpg(inner.pid, signal.SIGTERM)
        output, _ = inner.communicate(timeout=60)
        report = output.decode(errors="replace")
        assert inner.returncode == 2, report  # pytest's "interrupted"
        assert "KeyboardInterrupt: signal 15" in report, report
        assert [directory for directory in left if directory.exists()] == [], report
        assert _group(inner.pid) == {}
    finally:
        if inner.poll() is None:
            os.killpg(inner.pid, signal.SIGKILL)
            inner.wait()
        for directory in left:
            shutil.rmtree(directory, ignore_errors=True)
