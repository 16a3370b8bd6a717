"""The package repositories packaging/repo/publish makes, for the tests that install from them
(tests/system's apt repository and the Ansible role's, tests/packaging's dnf one): each under a
directory of its own, with its own reprepro state and its own key."""

from __future__ import annotations

import subprocess
from pathlib import Path

PUBLISH = Path(__file__).resolve().parents[1] / "packaging/repo/publish"


class Repository:
    """The repository ``root/name``; its reprepro state and its key's home beside it."""

    def __init__(self, root: Path, name: str) -> None:
        self.name = name
        self.out = root / name
        self.state = root / f"{name}.state"
        self.gnupg = root / f"{name}.gnupg"

    @property
    def armored_key(self) -> Path:
        """The public key nodes check the repository with (token-resource.asc)."""
        return self.out / "token-resource.asc"

    def publish(self, releases: str, package: Path) -> None:
        """``package`` (a .deb or .rpm) into ``releases``, comma-separated: Debian codenames
        for a .deb, el9 for a .rpm. The key is made on the first publish."""
        argv = [str(PUBLISH), str(self.out), str(self.state), str(self.gnupg), ""]
        done = subprocess.run(
            [*argv, f"{releases}:{package}"],
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        assert done.returncode == 0, f"publish {releases}:{package}: {done.stdout}{done.stderr}"
