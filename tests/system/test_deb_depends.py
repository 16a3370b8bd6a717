"""The .deb's Depends carry pyproject's version floors, and apt refuses a host below them.

Without versions, apt installed the package on a host whose python3-grpcio was too old and the
unit crash-looped (`No module named 'grpc.aio'`). The floors are not written anywhere in
packaging/debian: dh_python3 takes them from [project].dependencies at build time (through
debian/py3dist-overrides), so this checks the built package against pyproject.toml.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path

from tests.system import harness
from tests.system.node import UNIT, UNIT_FILE, AgentNode

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

REPO = Path(__file__).resolve().parents[2]
OVERRIDES = REPO / "packaging/debian/py3dist-overrides"
REQUIREMENT = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*>=\s*([0-9][0-9A-Za-z.]*)\s*(;.*)?$")


def pyproject_floors() -> dict[str, str]:
    """{distribution: minimum version} of [project].dependencies; each must have one."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    floors: dict[str, str] = {}
    for requirement in project["dependencies"]:
        match = REQUIREMENT.match(requirement)
        assert match, f"{requirement!r} in pyproject.toml has no plain `>=` floor"
        floors[match.group(1).lower()] = match.group(2)
    return floors


def requires_python() -> str:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    match = re.fullmatch(r">=\s*([0-9.]+)", project["requires-python"])
    assert match, project["requires-python"]
    return match.group(1)


def debian_names() -> dict[str, str]:
    """{distribution: Debian package} from debian/py3dist-overrides."""
    names: dict[str, str] = {}
    for line in OVERRIDES.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            distribution, package, *_ = re.split(r"[\s;]+", line.strip())
            names[distribution.lower()] = package
    return names


def depends_clauses(deb: Path) -> list[list[str]]:
    """The .deb's Depends: one list of alternatives per clause."""
    depends = harness.run(["dpkg-deb", "-f", str(deb), "Depends"], timeout=60).stdout
    return [
        [alternative.strip() for alternative in clause.split("|")]
        for clause in depends.split(",")
        if clause.strip()
    ]


def test_depends_carry_every_pyproject_floor(artifacts: Path) -> None:
    floors, names = pyproject_floors(), debian_names()
    # A dependency missing from the overrides would get no version (dh_python3 drops it).
    assert set(floors) <= set(names), f"add {set(floors) - set(names)} to {OVERRIDES}"
    for deb in ("token-resource.deb", "token-resource-upgrade.deb"):
        clauses = depends_clauses(artifacts / deb)
        for distribution, floor in floors.items():
            wanted = f"{names[distribution]} ({'>='} {floor})"
            assert any(wanted in clause for clause in clauses), (deb, wanted, clauses)
        # requires-python too (dh_python3 writes X-Python3-Version's floor with a tilde).
        wanted = f"python3:any (>= {requires_python()}~)"
        assert [wanted] in clauses, (deb, wanted, clauses)
        # Nothing the agent imports goes unversioned.
        unversioned = [
            alternative
            for clause in clauses
            for alternative in clause
            if alternative.startswith("python3-") and "(" not in alternative
        ]
        assert not unversioned, (deb, unversioned)


OTHER_LIBRARIES = ("python3-protobuf", "python3-sdnotify", "python3-watchdog")
# A package whose version is just below the floor: the floor itself is what apt enforces.
FAKE_CONTROL = """\
Package: python3-grpcio
Version: {version}
Architecture: all
Maintainer: token-resource system tests <systest@example.invalid>
Description: stand-in for a python3-grpcio older than token-resource needs
 Like Debian 11's python3-grpcio 1.30, which has no grpc.aio.
"""


def test_apt_refuses_to_install_with_a_too_old_python3_grpcio(
    boot_node: Callable[[], AbstractContextManager[AgentNode]],
) -> None:
    floor = pyproject_floors()["grpcio"]
    old = f"{floor}~old1"
    with boot_node() as node:
        # A Debian 12 node with the other libraries, and a python3-grpcio below the floor as the
        # only one apt knows of: what a Debian 11 host looks like to the package.
        node.exec(
            ["apt-get", "install", "-y", "-q", *OTHER_LIBRARIES],
            timeout=300,
        )
        node.write("/root/fake/DEBIAN/control", FAKE_CONTROL.format(version=old))
        node.exec(["dpkg-deb", "--build", "/root/fake", "/root/python3-grpcio-old.deb"])
        node.exec(["dpkg", "-i", "/root/python3-grpcio-old.deb"])
        node.sh("rm -f /var/lib/apt/lists/*_Packages && apt-get check -q")
        assert (
            node.exec(["dpkg", "--compare-versions", old, "lt", floor], check=False).returncode == 0
        )

        result = node.exec(
            ["apt-get", "install", "-y", "-q", "/srv/test/token-resource.deb"],
            check=False,
            timeout=300,
        )
        output = result.stdout + result.stderr
        assert result.returncode != 0, output
        assert re.search(
            rf"Depends: python3-grpcio \(>= {re.escape(floor)}\) but {re.escape(old)} is",
            output,
        ), output
        # Refused up front: nothing of the package reached the node.
        status = node.exec(
            ["dpkg-query", "-W", "-f=${db:Status-Abbrev}", "token-resource"], check=False
        ).stdout.strip()
        assert status in ("", "un"), status
        assert node.exec(["test", "-e", UNIT_FILE], check=False).returncode != 0
        assert node.show("LoadState", UNIT) == "not-found"
