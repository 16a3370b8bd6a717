"""The host package's versions on the real node, as an upgrade installs them: each .deb's files
unpacked into a tree of their own (``dpkg-deb -x``, the files dpkg would install), whose
dist-packages is the agent's whole Python path for that version, never beside another
version's. Which one runs is read from the running agent (``status --json``: the version of
the code it imported, and that code's directory), compared exactly."""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from tests.harness import AgentProcess
from tests.system.harness import build_deb, project_version

# Where a .deb puts the package (dh_python3's dist-packages).
DIST_PACKAGES = Path("usr/lib/python3/dist-packages")
# make node-test's packages: this tree's version and a newer one (packaging/deb.mk).
OLD_DEB, NEW_DEB = "TOKEN_RESOURCE_DEB", "TOKEN_RESOURCE_UPGRADE_DEB"


@dataclass(frozen=True)
class Installation:
    version: str  # the package's Version, as dpkg reads it
    python_path: Path

    @classmethod
    def unpacked(cls, deb: Path, root: Path) -> Installation:
        subprocess.run(["dpkg-deb", "-x", str(deb), str(root)], check=True)
        version = subprocess.run(
            ["dpkg-deb", "-f", str(deb), "Version"],
            capture_output=True, text=True, check=True,
        ).stdout.strip()  # fmt: skip
        return cls(version, (root / DIST_PACKAGES).resolve())

    def install(self, target: Path) -> None:
        """This version's files where the agent runs its code from, put in place as dpkg
        does (by rename: the running agent has its modules loaded, its successor reads these),
        nothing of the version before left."""
        staging, previous = target.with_name(".new"), target.with_name(".old")
        shutil.rmtree(staging, ignore_errors=True)
        shutil.copytree(self.python_path, staging, symlinks=True)
        if target.exists():
            target.rename(previous)
        staging.rename(target)
        shutil.rmtree(previous, ignore_errors=True)

    def assert_runs(self, agent: AgentProcess, installed: Path) -> None:
        """The running agent's code is this installation's, installed at ``installed``: its
        version, its files, and the process that answers is the agent's."""
        code = agent.status_json()["agent"]
        assert agent.process is not None
        assert code == {
            "version": self.version,
            "package": str(installed / "token_resource"),
            "pid": agent.process.pid,
        }


def installed_env(installed: Path) -> dict[str, str]:
    """What the agent runs with to run the code installed at ``installed`` alone."""
    return {"PYTHONPATH": str(installed)}


def installations(directory: Path) -> tuple[Installation, Installation]:
    """The old and the new version: make node-test's .debs, else built now (this tree's
    version, and it with ``+nodetest1``)."""
    version = project_version()
    old = Installation.unpacked(deb(OLD_DEB, version, directory), directory / "old")
    new = Installation.unpacked(deb(NEW_DEB, f"{version}+nodetest1", directory), directory / "new")
    assert old.version != new.version, (old, new)
    return old, new


def deb(variable: str, version: str, directory: Path) -> Path:
    """The .deb the environment names, else ``version`` built into ``directory``."""
    given = os.environ.get(variable)
    return Path(given) if given else build_deb(version, directory)
