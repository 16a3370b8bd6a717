"""The harness itself: a container boots with systemd as PID 1 and leaves nothing behind."""

from __future__ import annotations

import os
from collections.abc import Callable
from contextlib import AbstractContextManager

import pytest

from tests.system import harness
from tests.system.node import AgentNode


@pytest.mark.suites(*harness.SUITES)
def test_container_boots_systemd_and_tears_down_completely(
    boot_node: Callable[[], AbstractContextManager[AgentNode]], suite: str
) -> None:
    with boot_node() as node:
        assert node.read("/proc/1/comm").strip() == "systemd"
        state = node.sh("systemctl is-system-running", check=False).stdout.strip()
        assert state == "running", f"the container is {state!r}; failed units:\n" + (
            node.failed_units()
        )
        assert f"VERSION_CODENAME={suite}" in node.read("/etc/os-release").splitlines()
        # The package's runtime dependencies are in the apt cache: installing needs no network.
        simulated = node.sh("apt-get install --simulate -q python3-grpcio").stdout
        assert "Inst python3-grpcio" in simulated
        pid, cgroups = node.process.pid if node.process else 0, node.cgroups
        assert cgroups, "the nspawn process has no cgroup of its own"
    assert not os.path.exists(f"/proc/{pid}"), "systemd-nspawn still running"
    leftover = [str(cgroup) for cgroup in cgroups if cgroup.exists()]
    assert not leftover, f"cgroups left behind: {leftover}"
