"""The license servers' probes: lmstat's and rlmstat's recorded outputs (license_outputs/, our
own, each in the shape its README names: the vendors' manuals and real servers' captures) read
for free seats, every variant and every error; then the probe running the stand-in tools
(tests/standin/license_tools.py) as real processes."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.standin.license_tools import LMSTAT_DOWN, LicenseTool, lmstat
from token_resource.config.model import FLEXLM, RLM, ProbeSpec
from token_resource.health.license import Seats, Unreadable, argv, free_seats
from token_resource.health.probes import Outcome, check

OUTPUTS = Path(__file__).parent / "license_outputs"


def recorded(name: str) -> str:
    return (OUTPUTS / name).read_text()


def flexlm(
    feature: str = "MATLAB", server: str = "27000@licsrv", tool: str = "lmutil"
) -> ProbeSpec:
    return ProbeSpec(FLEXLM, server, timeout=10.0, feature=feature, tool=tool)


def rlm(product: str = "solver", server: str = "5053@licsrv", tool: str = "rlmutil") -> ProbeSpec:
    return ProbeSpec(RLM, server, timeout=10.0, feature=product, tool=tool)


@pytest.mark.parametrize(
    ("probe", "output", "seats"),
    [
        (flexlm(), "lmstat_counted.txt", Seats(7, 10)),
        (flexlm("Simulink"), "lmstat_singular.txt", Seats(0, 1)),
        (flexlm("Simulink"), "lmstat_unknown_feature.txt", Seats(4, 4)),
        # A triad with one member down, reserved seats counted in use by lmstat: 40 - 26.
        (flexlm("solver", "27000@h1,27000@h2,27000@h3"), "lmstat_reserved.txt", Seats(14, 40)),
        # A triad all up: one Users line for the three, not three times the seats.
        (flexlm("solver", "27000@lic1,27000@lic2,27000@lic3"), "lmstat_triad.txt", Seats(13, 24)),
        # Borrowed seats (linger: the borrow period) and a lingering one are in use, a queued
        # user is not: 6 - 4.
        (flexlm(), "lmstat_borrowed.txt", Seats(2, 6)),
        # Two servers, each its own seats: 0 free on one, 3 on the other.
        (flexlm("solver", "27000@lic-a:27001@lic-b"), "lmstat_two_servers.txt", Seats(3, 9)),
        # The second unreachable: the first's seats alone.
        (flexlm("solver", "27000@lic-a:27001@lic-b"), "lmstat_one_of_two_down.txt", Seats(3, 5)),
        (flexlm(), "lmstat_overdrawn.txt", Seats(0, 2)),  # more in use than issued: none
        (rlm(), "rlmstat_one_pool.txt", Seats(6, 8)),
        (rlm("mesher"), "rlmstat_one_pool.txt", Seats(3, 4)),
        # Three pools of solver: 8 - 2 in use - 2 reserved, 5 - 1, 2 - 3 (none, not -1).
        (rlm(), "rlmstat_pools.txt", Seats(8, 15)),
        # Two ISV servers, RLM v9's header: 3 - 1 on one, 5 - 1 reserved on the other.
        (rlm(), "rlmstat_two_isvs.txt", Seats(6, 8)),
        (rlm("mesher"), "rlmstat_two_isvs.txt", Seats(0, 2)),
    ],
)
def test_free_seats_are_issued_less_in_use_summed_over_servers_and_pools(
    probe: ProbeSpec, output: str, seats: Seats
) -> None:
    assert free_seats(probe, recorded(output)) == seats


@pytest.mark.parametrize(
    ("probe", "output", "problem"),
    [
        (
            flexlm(),
            "lmstat_uncounted.txt",
            "MATLAB is not a floating license (no seats to count): "
            "Users of MATLAB:  (Uncounted, node-locked)",
        ),
        (
            flexlm(),
            "lmstat_feature_error.txt",
            "lmstat gives no count of MATLAB: "
            "Users of MATLAB:  (Error: 1 licenses, unsupported by licensed server)",
        ),
        (
            flexlm(),
            "lmstat_garbled.txt",
            "cannot read lmstat's line: "
            "Users of MATLAB:  (Total of ten licenses issued;  Total of 3 licenses in use)",
        ),
        # Not listed, the servers up: not served there.
        (
            flexlm(),
            "lmstat_unknown_feature.txt",
            "no feature MATLAB in lmstat's output: 27000@licsrv does not serve it",
        ),
        (
            flexlm("matlab"),
            "lmstat_counted.txt",
            "no feature matlab in lmstat's output: 27000@licsrv does not serve it",
        ),
        # Another feature's error is not this one's cause, nor a host named failover-01.
        (
            flexlm("Simulink"),
            "lmstat_feature_error.txt",
            "no feature Simulink in lmstat's output: 27000@licsrv does not serve it",
        ),
        (
            flexlm("mesher", "27000@lic1,27000@lic2,27000@lic3"),
            "lmstat_triad.txt",
            "no feature mesher in lmstat's output: 27000@lic1,27000@lic2,27000@lic3 does not "
            "serve it",
        ),
        # Not listed where a server is down or its vendor daemon is: that server-level line.
        (
            flexlm("mesher", "27000@lic-a:27001@lic-b"),
            "lmstat_one_of_two_down.txt",
            "no feature mesher in lmstat's output: lic-b: Cannot connect to license server "
            'system. (-15,570:111 "Connection refused")',
        ),
        (
            flexlm(),
            "lmstat_vendor_down.txt",
            "no feature MATLAB in lmstat's output: MLM: The desired vendor daemon is down. "
            "(-97,121)",
        ),
        (
            flexlm(),
            "lmstat_server_down.txt",
            "no feature MATLAB in lmstat's output: Error getting status: Cannot connect to "
            'license server system. (-15,570:111 "Connection refused")',
        ),
        (
            rlm(),
            "rlmstat_uncounted.txt",
            "solver is not a floating license (no seats to count): "
            "count: uncounted, # reservations: 0, inuse: 0, exp: permanent",
        ),
        (
            rlm(),
            "rlmstat_garbled.txt",
            "cannot read rlmstat's pool of solver: count: 8, inuse: 2, exp: 31-dec-2026",
        ),
        (
            rlm(),
            "rlmstat_unknown_product.txt",
            "no product solver in rlmstat's output: 5053@licsrv does not serve it",
        ),
        (
            rlm(),
            "rlmstat_server_down.txt",
            'no product solver in rlmstat\'s output: Error connecting to "rlm" server on licsrv '
            "(port 5053)",
        ),
        # The tools' headers (rlmutil v15.2, rlmstat v9.1) are no products.
        (rlm("rlmutil"), "rlmstat_one_pool.txt", "no product rlmutil in rlmstat's output"),
        (rlm("rlmstat"), "rlmstat_two_isvs.txt", "no product rlmstat in rlmstat's output"),
        (rlm(), "", "no product solver in rlmstat's output"),
    ],
)
def test_what_gives_no_count_is_a_problem_naming_the_offending_line(
    probe: ProbeSpec, output: str, problem: str
) -> None:
    found = free_seats(probe, recorded(output) if output else "")
    assert isinstance(found, Unreadable), found
    assert found.problem.startswith(problem), found.problem


def test_every_recorded_output_names_what_it_follows() -> None:
    """license_outputs/README.md's table has a row for each recorded output, and no other."""
    first_cells = [
        line.split("|")[1].strip()
        for line in (OUTPUTS / "README.md").read_text().splitlines()
        if line.startswith("| ")
    ]
    rows = [cell for cell in first_cells if cell.endswith(".txt")]
    assert sorted(rows) == sorted(path.name for path in OUTPUTS.glob("*.txt"))
    assert len(rows) == len(set(rows))


def test_the_tools_are_asked_for_the_server_and_the_name() -> None:
    assert argv(flexlm("MATLAB", "27000@a:27000@b", "/opt/flexlm/lmutil")) == (
        "/opt/flexlm/lmutil",
        "lmstat",
        "-c",
        "27000@a:27000@b",
        "-f",
        "MATLAB",
    )
    assert argv(rlm()) == ("rlmutil", "rlmstat", "-c", "5053@licsrv", "-a")


# --- the probe, running the stand-in tools ----------------------------------------------------


def run(probe: ProbeSpec, count: int) -> Outcome:
    return asyncio.run(check(probe, count))


def test_a_flexlm_probe_makes_the_free_seats_healthy_token_0_first(tmp_path: Path) -> None:
    tool = LicenseTool(tmp_path, "lmutil")
    tool.serve(recorded("lmstat_counted.txt"))
    outcome = run(flexlm(tool=str(tool.path)), 9)
    assert outcome.passed == (True,) * 7 + (False,) * 2
    assert outcome.message == "flexlm 27000@licsrv feature MATLAB: 7 of 10 free"
    assert outcome.reasons == {7: outcome.message, 8: outcome.message}
    assert tool.calls() == ["lmstat -c 27000@licsrv -f MATLAB"]
    # More seats free than tokens: every token; none free: none.
    assert run(flexlm(tool=str(tool.path)), 3).passed == (True,) * 3
    tool.serve(lmstat("MATLAB", 2, 2))
    assert run(flexlm(tool=str(tool.path)), 3).passed == (False,) * 3


def test_an_rlm_probe_counts_every_pool_of_its_product(tmp_path: Path) -> None:
    tool = LicenseTool(tmp_path, "rlmutil")
    tool.serve(recorded("rlmstat_pools.txt"))
    outcome = run(rlm(tool=str(tool.path)), 10)
    assert outcome.passed == (True,) * 8 + (False,) * 2
    assert outcome.message == "rlm 5053@licsrv product solver: 8 of 15 free"
    assert tool.calls() == ["rlmstat -c 5053@licsrv -a"]


@pytest.mark.parametrize(
    ("probe", "output", "status", "message"),
    [
        (
            flexlm(),
            LMSTAT_DOWN,
            1,
            "flexlm 27000@licsrv feature MATLAB: lmutil exited with status 1: Error getting "
            'status: Cannot connect to license server system. (-15,570:111 "Connection refused")',
        ),
        (
            flexlm(),
            recorded("lmstat_uncounted.txt"),
            0,
            "flexlm 27000@licsrv feature MATLAB: MATLAB is not a floating license (no seats to "
            "count): Users of MATLAB: (Uncounted, node-locked)",
        ),
        (
            rlm(),
            recorded("rlmstat_unknown_product.txt"),
            0,
            "rlm 5053@licsrv product solver: no product solver in rlmstat's output: "
            "5053@licsrv does not serve it",
        ),
        (
            rlm(),
            recorded("rlmstat_server_down.txt"),
            255,
            "rlm 5053@licsrv product solver: rlmutil exited with status 255: "
            'Error connecting to "rlm" server on licsrv (port 5053)',
        ),
    ],
)
def test_a_failed_check_takes_every_token_out_and_names_the_probe_and_the_line(
    tmp_path: Path, probe: ProbeSpec, output: str, status: int, message: str
) -> None:
    tool = LicenseTool(tmp_path, probe.tool or "")
    tool.serve(output, status)
    outcome = run(
        ProbeSpec(probe.kind, probe.target, feature=probe.feature, tool=str(tool.path)), 3
    )
    assert outcome.passed == (False,) * 3
    assert outcome.message == message
    assert outcome.reasons[0] == outcome.message


def test_a_missing_or_hung_tool_is_a_failed_check_naming_the_probe(tmp_path: Path) -> None:
    missing = run(flexlm(tool=str(tmp_path / "lmutil")), 2)
    assert missing.passed == (False, False)
    assert missing.message == (
        f"flexlm 27000@licsrv feature MATLAB: cannot run {tmp_path}/lmutil: No such file or "
        "directory"
    )
    on_path = run(rlm(tool="rlmutil-not-installed"), 1)
    assert on_path.message.startswith(
        "rlm 5053@licsrv product solver: cannot run rlmutil-not-installed: "
    )
    hung = tmp_path / "rlmutil"
    hung.write_text("#!/bin/sh\nexec sleep 60\n")
    hung.chmod(0o755)
    outcome = run(ProbeSpec(RLM, "5053@licsrv", timeout=0.3, feature="solver", tool=str(hung)), 2)
    assert outcome.message == (
        f"rlm 5053@licsrv product solver: {hung} still running after 0.3 s: killed"
    )
