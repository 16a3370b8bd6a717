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
from dataclasses import dataclass
from pathlib import Path

import pytest
from packaging.version import Version

from tests.packaging.distributions import DISTRIBUTIONS
from tests.packaging.test_rpm import NAME, REPO, project_version, run

# Each target's package is built (rpmbuild): minutes under load.
pytestmark = pytest.mark.timeout(600)


VENDOR_DIR = f"/usr/lib/{NAME}/vendor"
REQUIREMENT = re.compile(r"^(?P<name>\S+)(?: (?P<op>[<>=]+) (?P<version>\S+))?$")


@dataclass(frozen=True)
class Build:
    target: str
    path: Path
    scratch: Path
    source: Path  # its source rpm

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
        package = f"{NAME}-{project_version()}-1"
        yield Build(target, dist / f"{package}.noarch.rpm", scratch, dist / f"{package}.src.rpm")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def test_the_source_rpm_rebuilds_into_the_same_package(build: Build) -> None:
    """packaging/README.md's rebuild on the target (`rpmbuild --rebuild` of the source rpm), as
    far as this machine goes: rpm.mk's rpm-rebuild, the target's Python defined in place of its
    macros packages (the README's `dnf install` of them needs the target). The rebuilt package
    asks for the same and holds the same files as the one built from the tree."""
    topdir = build.scratch / "rebuild"
    run(
        [
            "make", "-s", "-C", str(REPO), "-f", "packaging/rpm.mk", "rpm-rebuild",
            f"RPM_TARGET={build.target}", f"RPM_SRPM={build.source}", f"RPM_TOPDIR={topdir}",
        ],
        timeout=300,
    )  # fmt: skip
    rebuilt = Build(
        build.target, topdir / "RPMS" / "noarch" / build.path.name, build.scratch, build.source
    )
    assert rebuilt.query("--requires") == build.query("--requires")
    assert rebuilt.query("-l") == build.query("-l")


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


def test_the_el9_build_carries_bytecode_of_el9s_python(build: Build) -> None:
    """Built by a Python 3.9 (rpm.mk's RPM_PYTHON_el9): the agent never writes bytecode of its
    own into site-packages, where no package would own it. The Fedora builds have no Python of
    their release here, so no bytecode at all (never bytecode of this interpreter's)."""
    files = build.query("-l")
    sources = [path for path in files if path.endswith(".py")]
    compiled = {path for path in files if path.endswith(".pyc")}
    tag = "cpython-" + DISTRIBUTIONS[build.target].python.replace(".", "")
    if build.target != "el9":
        assert not compiled, sorted(compiled)[:5]
        return
    missing = []
    for source in sources:
        directory, _, name = source.rpartition("/")
        for suffix in (".pyc", ".opt-1.pyc"):
            if f"{directory}/__pycache__/{name[:-3]}.{tag}{suffix}" not in compiled:
                missing.append(source + suffix)
    assert sources
    assert not missing, missing[:5]
