"""Each distribution's .rpm asks only for what that distribution provides.

No RHEL or Fedora machine is at hand, so the package is built here once per target (rpm.mk's
RPM_TARGET: laid out for that distribution's Python, and for EL9 with the vendored watchdog),
and every line of its ``rpm -qp --requires`` must be met by the table below, written from each
distribution's package indexes (sources in packaging/README.md). Runs on the host like
test_rpm.py; a missing tool is a failure, never a skip.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from packaging.version import Version

from tests.packaging.test_rpm import NAME, REPO, project_version, run

# Each target's package is built (rpmbuild): minutes under load.
pytestmark = pytest.mark.timeout(600)


@dataclass(frozen=True)
class Distribution:
    python: str  # the interpreter's X.Y: python(abi), python3.Ydist(...), site-packages
    libraries: dict[str, str]  # python3-<project> package -> version, as in the indexes
    systemd: str
    vendors_watchdog: bool = False
    # What every such system has: the shell and the interpreter's own package.
    base: set[str] = field(default_factory=lambda: {"/bin/sh", "/usr/bin/python3"})

    def provides(self) -> dict[str, str | None]:
        """Capability -> version (None: unversioned), as these packages provide them."""
        provided: dict[str, str | None] = dict.fromkeys(self.base)
        provided["python(abi)"] = self.python
        provided["systemd"] = self.systemd
        for package, version in self.libraries.items():
            project = package.removeprefix("python3-")
            provided[package] = version
            provided[f"python{self.python}dist({project})"] = version
        return provided


# Written from packages.fedoraproject.org (Fedora, EPEL) and RHEL 9 package listings; see the
# table in packaging/README.md for the sources of each number.
DISTRIBUTIONS = {
    "el9": Distribution(
        python="3.9",
        libraries={
            "python3-grpcio": "1.46.7",  # EPEL 9
            "python3-protobuf": "3.14.0",  # RHEL 9 AppStream
            "python3-sdnotify": "0.3.2",  # EPEL 9
            "python3-tomli": "2.0.1",  # RHEL 9 AppStream
        },
        systemd="252",
        vendors_watchdog=True,  # no python3-watchdog in RHEL 9 or EPEL 9
    ),
    "fedora44": Distribution(
        python="3.14",
        libraries={
            "python3-grpcio": "1.48.4",
            "python3-protobuf": "3.19.6",
            "python3-watchdog": "6.0.0",
            "python3-sdnotify": "0.3.2",
        },
        systemd="259.6",
    ),
    "fedora45": Distribution(
        python="3.15",
        libraries={
            "python3-grpcio": "1.48.4",
            "python3-protobuf": "6.33.5",
            "python3-watchdog": "6.0.0",
            "python3-sdnotify": "0.3.2",
        },
        systemd="262.1",
    ),
}
VENDOR_DIR = f"/usr/lib/{NAME}/vendor"
REQUIREMENT = re.compile(r"^(?P<name>\S+)(?: (?P<op>[<>=]+) (?P<version>\S+))?$")


@dataclass(frozen=True)
class Build:
    target: str
    path: Path
    scratch: Path

    def query(self, *args: str) -> list[str]:
        db = str(self.scratch / "rpmdb")
        return run(["rpm", "--dbpath", db, "-qp", *args, str(self.path)]).splitlines()


@pytest.fixture(scope="module", params=sorted(DISTRIBUTIONS))
def build(request: pytest.FixtureRequest) -> Iterator[Build]:
    for tool in ("rpm", "rpmbuild", "make", "git"):
        if shutil.which(tool) is None:
            pytest.fail(f"{tool} is not installed (see packaging/rpm/README.md)", pytrace=False)
    target = request.param
    scratch = Path(tempfile.mkdtemp(prefix=f"token-resource-rpm-{target}-"))
    try:
        dist = scratch / "dist"
        run(
            [
                "make", "-s", "-C", str(REPO), "-f", "packaging/rpm.mk", "rpm",
                f"RPM_TARGET={target}", f"RPM_DIST={dist}", f"RPM_TOPDIR={scratch / 'rpmbuild'}",
                f"RPM_PIP={sys.executable} -m pip",
            ],
            timeout=300,
        )  # fmt: skip
        yield Build(target, dist / f"{NAME}-{project_version()}-1.noarch.rpm", scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def satisfied(requirement: str, provided: dict[str, str | None]) -> bool:
    match = REQUIREMENT.match(requirement)
    assert match, f"unexpected requirement syntax: {requirement!r}"
    name, op, wanted = match["name"], match["op"], match["version"]
    if name not in provided:
        return False
    if op is None:
        return True
    have = provided[name]
    assert have is not None, f"{name} is provided without a version, {requirement!r} needs one"
    have_version, wanted_version = Version(have.split("-")[0]), Version(wanted.split("-")[0])
    return {
        ">=": have_version >= wanted_version,
        "=": have_version == wanted_version,
        "<=": have_version <= wanted_version,
        ">": have_version > wanted_version,
        "<": have_version < wanted_version,
    }[op]


def test_every_requirement_is_provided_by_the_distribution(build: Build) -> None:
    distribution = DISTRIBUTIONS[build.target]
    provided = distribution.provides()
    # The package's own capabilities (config(token-resource), ...) count too.
    for line in build.query("--provides"):
        own = REQUIREMENT.match(line)
        assert own, line
        provided.setdefault(own["name"], own["version"])
    requires = [line for line in build.query("--requires") if not line.startswith("rpmlib(")]
    missing = [line for line in requires if not satisfied(line, provided)]
    assert not missing, f"{build.target} does not provide {missing} (requires: {requires})"
    # And the libraries really are asked for, with the floors of pyproject.toml.
    assert f"python(abi) = {distribution.python}" in requires
    assert any(line.startswith(f"python{distribution.python}dist(grpcio) >= ") for line in requires)


def test_only_the_el9_build_carries_watchdog(build: Build) -> None:
    requires = build.query("--requires")
    files = build.query("-l")
    vendored = [path for path in files if path.startswith(f"{VENDOR_DIR}/watchdog/")]
    if DISTRIBUTIONS[build.target].vendors_watchdog:
        assert vendored, files
        assert not [line for line in requires if "watchdog" in line], requires
        assert "bundled(python3dist(watchdog)) = 6.0.0" in build.query("--provides")
    else:
        assert not vendored
        assert "python3-watchdog" in requires


def test_the_agent_imports_the_vendored_watchdog(build: Build) -> None:
    if not DISTRIBUTIONS[build.target].vendors_watchdog:
        return  # the distribution's python3-watchdog: nothing of ours to find
    root = build.scratch / "root"
    run(
        [
            "rpm", "-i", "--root", str(root), "--dbpath", "/var/lib/rpm", "--nodeps",
            "--noscripts", str(build.path),
        ]
    )  # fmt: skip
    sitelib = root / f"usr/lib/python{DISTRIBUTIONS[build.target].python}/site-packages"
    # -S: no site-packages of this interpreter, so the only watchdog to find is the package's.
    done = subprocess.run(
        [
            sys.executable, "-S", "-c",
            "import token_resource.host.fswatch, watchdog, watchdog.events\n"
            "assert watchdog.events.FileClosedEvent\n"
            "print(watchdog.__file__)",
        ],
        env={**os.environ, "PYTHONPATH": str(sitelib)},
        capture_output=True, text=True, check=False, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert Path(done.stdout.strip()).is_relative_to(root / VENDOR_DIR.lstrip("/")), done.stdout
