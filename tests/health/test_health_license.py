"""The license servers' probes in the real agent against the kubelet stand-in: health.md's
worked example with a stand-in lmutil, and an rlm probe whose rlmutil is found on the agent's
PATH. The kubelet counts allocatable from the Healthy devices, as the device manager does."""

from __future__ import annotations

import json
import os
from pathlib import Path

from tests.documented import replaced, toml_example
from tests.harness import AgentProcess
from tests.health.test_health import TIMEOUT, allocatable, resource_report
from tests.standin.kubelet import KubeletStandin
from tests.standin.license_tools import LMSTAT_DOWN, RLMSTAT_DOWN, LicenseTool, lmstat, rlmstat

MATLAB = "example.com/matlab"
SOLVER = "example.com/solver"


def test_the_documented_flexlm_probe_offers_the_free_seats_and_none_when_the_server_is_down(
    agent: AgentProcess, kubelet: KubeletStandin, tmp_path: Path
) -> None:
    lmutil = LicenseTool(tmp_path / "bin", "lmutil")
    lmutil.serve(lmstat("MATLAB", 10, 3))
    example = toml_example("health.md", 'flexlm = "27000@licsrv"')
    # The documented table, with the stand-in for the vendor's lmutil and a check a second.
    example = replaced(example, '"/opt/flexlm/bin/lmutil"', json.dumps(str(lmutil.path)))
    agent.write_config(replaced(example, "interval = 30", "interval = 1"))
    agent.start()
    view = kubelet.wait_for(allocatable(7, MATLAB), timeout=TIMEOUT)
    health = [h for _, h in sorted(view.resources[MATLAB].devices)]
    assert health == ["Healthy"] * 7 + ["Unhealthy"] * 3
    lmutil.serve(lmstat("MATLAB", 10, 9))
    kubelet.wait_for(allocatable(1, MATLAB), timeout=TIMEOUT)
    lmutil.serve(LMSTAT_DOWN, 1)
    kubelet.wait_for(allocatable(0, MATLAB), timeout=TIMEOUT)
    reason = (
        "flexlm 27000@licsrv feature MATLAB: lmutil exited with status 1: Error getting "
        'status: Cannot connect to license server system. (-15,570:111 "Connection refused")'
    )
    report = resource_report(agent, MATLAB)
    assert report["health"]["unhealthy"][0] == {"token": "token-0", "reason": reason}
    assert report["health"]["probe"] == "flexlm 27000@licsrv feature MATLAB every 1 s"
    status = agent.cli("status").stdout
    # As health.md shows it.
    assert (
        f"  probe flexlm 27000@licsrv feature MATLAB every 1 s: 0 of 10 healthy; last check "
        f"failed: {reason} (at "
    ) in status, status
    assert f"  token-0 unhealthy: {reason}\n" in status, status
    assert set(lmutil.calls()) == {"lmstat -c 27000@licsrv -f MATLAB"}
    lmutil.serve(lmstat("MATLAB", 10, 0))
    kubelet.wait_for(allocatable(10, MATLAB), timeout=TIMEOUT)
    shown = agent.cli("check", "--probe")
    assert shown.returncode == 0, shown.stderr
    assert (
        f"    probe: flexlm 27000@licsrv feature MATLAB every 1 s, with {lmutil.path}, timeout "
        "10 s, unhealthy after 3 failed check(s), healthy again after 1"
    ) in shown.stdout
    assert (
        ": flexlm 27000@licsrv feature MATLAB: 10 of 10 free; 10 of 10 token(s) healthy"
    ) in shown.stdout


def test_an_rlm_probe_runs_the_rlmutil_on_the_agents_path(
    agent: AgentProcess, kubelet: KubeletStandin, tmp_path: Path
) -> None:
    bin_dir = tmp_path / "bin"
    rlmutil = LicenseTool(bin_dir, "rlmutil")
    rlmutil.serve(rlmstat("solver", 6, 1, reserved=1))
    agent.write_config(
        f'[resources."{SOLVER}"]\ncount = 5\n'
        'probe = { rlm = "5053@licsrv", product = "solver", interval = 1, failure_threshold = 1 }\n'
    )
    agent.start(env={"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"})
    kubelet.wait_for(allocatable(4, SOLVER), timeout=TIMEOUT)
    rlmutil.serve(RLMSTAT_DOWN, 255)
    kubelet.wait_for(allocatable(0, SOLVER), timeout=TIMEOUT)
    assert resource_report(agent, SOLVER)["health"]["unhealthy"][4]["reason"] == (
        'rlm 5053@licsrv product solver: rlmutil exited with status 255: Error connecting to "rlm" '
        "server on licsrv (port 5053)"
    )
    rlmutil.serve(rlmstat("solver", 6, 4))
    kubelet.wait_for(allocatable(2, SOLVER), timeout=TIMEOUT)
    assert set(rlmutil.calls()) == {"rlmstat -c 5053@licsrv -a"}
