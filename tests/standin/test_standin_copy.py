"""The kubelet stand-in as the system tests copy it into their containers (/srv/test): its
files on their own must import, or every booted test fails at the kubelet's start."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.system.conftest import copy_standin

# What the containers run, and the DRA side that the script imports only with its options.
MODULES = (
    "tests.standin.kubelet_script",
    "tests.standin.kubelet_plugins",
    "tests.standin.kubelet_dra",
)


@pytest.mark.parametrize("module", MODULES)
def test_the_copied_standin_imports_from_its_own_files(tmp_path: Path, module: str) -> None:
    copy_standin(tmp_path)
    # Run in the copy: "-c" puts the current directory first on sys.path.
    result = subprocess.run(
        [sys.executable, "-c", f"import {module}, tests; print(tests.__file__)"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert Path(result.stdout.strip()).parent == tmp_path / "tests"
