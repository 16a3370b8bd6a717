"""The packages' warning, on removal, about the pods holding DRA claims the agent prepared.

Each package's script runs here as dpkg or rpm runs it, with a stand-in ``token-resource``
first on PATH: the .debs' prerm (native and bundled) as written, and the RPM specs' ``%preun``
up to the systemd part (plain shell; tests/packaging/test_rpm.py runs the built package's).
tests/system/test_deb_removal_claims.py removes the installed .deb from a booted Debian with
the real agent answering.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DEB_PRERMS = (
    REPO / "packaging/debian/token-resource.prerm",
    REPO / "packaging/bundled/debian/token-resource-bundled.prerm",
)
SPECS = (
    REPO / "packaging/rpm/token-resource.spec",
    REPO / "packaging/bundled/token-resource-bundled.spec",
)
CLAIMS = "default/web-1 (claim web-1-tokens)\nbatch/job-2, batch/job-3 (claim shared)\n"
# A stand-in for the agent's command: prints what `status --prepared-claims` would ($ANSWER,
# nothing when empty), or fails as it does when no agent answers ($ANSWER unset); every call
# logged.
STANDIN = """#!/bin/sh
echo "$*" >> "$CALLS"
if [ "${ANSWER+set}" ]; then printf '%s' "$ANSWER"; exit 0; fi
echo "token-resource status: cannot reach the agent" >&2
exit 1
"""


def preun_warning(spec: Path) -> str:
    """The spec's %preun before its systemd part: the warning, in plain shell."""
    text = spec.read_text()
    start = text.index("%preun\n") + len("%preun\n")
    return text[start : text.index("%if 0%{?systemd_preun:1}", start)]


def deb(prerm: Path, *args: str) -> list[str]:
    return ["/bin/sh", "-e", str(prerm), *args]


def rpm(spec: Path, instances: int) -> list[str]:
    return ["/bin/sh", "-e", "-c", preun_warning(spec), "scriptlet", str(instances)]


REMOVALS = {
    "deb": deb(DEB_PRERMS[0], "remove"),
    "bundled-deb": deb(DEB_PRERMS[1], "remove"),
    "rpm": rpm(SPECS[0], 0),
    "bundled-rpm": rpm(SPECS[1], 0),
}
UPGRADES = {
    "deb": deb(DEB_PRERMS[0], "upgrade", "0.2.0"),
    "bundled-deb": deb(DEB_PRERMS[1], "upgrade", "0.2.0"),
    "rpm": rpm(SPECS[0], 1),
    "bundled-rpm": rpm(SPECS[1], 1),
}
WARNING = (
    "token-resource: these pods hold DRA claims that this node's agent prepared:\n"
    "  default/web-1 (claim web-1-tokens)\n"
    "  batch/job-2, batch/job-3 (claim shared)\n"
    "token-resource: without the agent the kubelet cannot unprepare these claims: a pod "
    "among them that is deleted stays Terminating until a token-resource DRA driver of the "
    "same name runs on this node again. Install the package again to release them (after a "
    "purge, with your [dra] settings); next time, delete such pods "
    "before removing the package.\n"
)


def run(
    tmp_path: Path, script: list[str], answer: str | None
) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    """The script with the stand-in first on PATH; its result and the stand-in's calls."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "token-resource").write_text(STANDIN)
    (bin_dir / "token-resource").chmod(0o755)
    calls = tmp_path / "calls"
    calls.write_text("")
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "CALLS": str(calls)}
    if answer is not None:
        env["ANSWER"] = answer
    done = subprocess.run(script, env=env, capture_output=True, text=True, check=False)
    return done, calls.read_text().splitlines()


@pytest.mark.parametrize("package", REMOVALS)
def test_a_removal_names_the_pods_and_says_what_to_do(tmp_path: Path, package: str) -> None:
    done, calls = run(tmp_path, REMOVALS[package], CLAIMS)
    assert (done.returncode, done.stdout, done.stderr) == (0, "", WARNING), done
    assert calls == ["status --prepared-claims --timeout 5"]


@pytest.mark.parametrize("package", UPGRADES)
def test_an_upgrade_does_not_ask(tmp_path: Path, package: str) -> None:
    done, calls = run(tmp_path, UPGRADES[package], CLAIMS)
    assert (done.returncode, done.stdout, done.stderr, calls) == (0, "", "", []), done


@pytest.mark.parametrize("package", REMOVALS)
@pytest.mark.parametrize("answer", ["", None], ids=["no-claims", "no-agent"])
def test_a_removal_without_claims_or_agent_says_nothing_and_goes_on(
    tmp_path: Path, package: str, answer: str | None
) -> None:
    done, calls = run(tmp_path, REMOVALS[package], answer)
    assert (done.returncode, done.stdout, done.stderr) == (0, "", ""), done
    assert len(calls) == 1


@pytest.mark.parametrize("package", REMOVALS)
def test_a_removal_without_the_command_goes_on(package: str) -> None:
    done = subprocess.run(
        REMOVALS[package], env={"PATH": "/nonexistent"}, capture_output=True, text=True, check=False
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, "", ""), done
