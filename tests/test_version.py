"""The version the agent reports is the one of the code it imported: the metadata beside its
package, not the first installation's on the path (an upgrade's check would pass either way)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import token_resource

REPORT = "import token_resource as t; print(t.__version__); print(t.PACKAGE_DIR)"


def installation(root: Path, version: str, *, code: bool) -> Path:
    """A dist-packages-like directory: token-resource's metadata at ``version`` and, with
    ``code``, a copy of the package beside it."""
    info = root / f"token_resource-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: token-resource\nVersion: {version}\n"
    )
    if code:
        shutil.copytree(
            token_resource.PACKAGE_DIR,
            root / "token_resource",
            ignore=shutil.ignore_patterns("__pycache__"),
        )
    return root


def reported(*path: Path) -> tuple[str, str]:
    environ = {**os.environ, "PYTHONPATH": os.pathsep.join(map(str, path))}
    done = subprocess.run(
        [sys.executable, "-c", REPORT], capture_output=True, text=True, env=environ, check=True
    )
    version, package = done.stdout.splitlines()
    return version, package


def test_the_version_is_the_one_beside_the_imported_code(tmp_path: Path) -> None:
    new = installation(tmp_path / "new", "0.1.0+upgrade1", code=True)
    old = installation(tmp_path / "old", "0.1.0", code=True)
    assert reported(new, old) == ("0.1.0+upgrade1", str(new / "token_resource"))
    assert reported(old, new) == ("0.1.0", str(old / "token_resource"))


def test_metadata_of_another_installation_is_not_the_codes_version(tmp_path: Path) -> None:
    """Metadata first on the path, with no code beside it (what an installation over another
    leaves when only its metadata is read first): the code's own installation speaks."""
    stray = installation(tmp_path / "stray", "9.9.9", code=False)
    assert reported(stray) == (token_resource.__version__, str(token_resource.PACKAGE_DIR))
    assert token_resource.__version__ != "9.9.9"
