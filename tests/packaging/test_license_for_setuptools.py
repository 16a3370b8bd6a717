"""pyproject.toml's SPDX license (PEP 639) and the package builds that use the system's
setuptools: packaging/license_for_setuptools.py gives one older than 77 the table form it reads
(the wheel that Debian 12's setuptools then builds: tests/packaging/test_extras.py)."""

from __future__ import annotations

import importlib.util
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "packaging/license_for_setuptools.py"
# Debian 12's python3 and its setuptools 66, as pybuild and Debian's rpmbuild use them.
SYSTEM_PYTHON = "/usr/bin/python3"
# The script is no module of a package: loaded from its path.
_spec = importlib.util.spec_from_file_location("license_for_setuptools", SCRIPT)
assert _spec
assert _spec.loader
license_for_setuptools = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(license_for_setuptools)


def rewrite(pyproject: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [SYSTEM_PYTHON, SCRIPT, pyproject], check=False, capture_output=True, text=True
    )


def test_the_project_declares_its_license_in_the_spdx_form(tmp_path: Path) -> None:
    copy = tmp_path / "pyproject.toml"
    copy.write_text((REPO / "pyproject.toml").read_text())
    assert 'requires = ["setuptools>=77"]' in copy.read_text()
    assert rewrite(copy).returncode == 0
    assert 'license = { text = "Apache-2.0" }' in copy.read_text().splitlines()


@pytest.mark.parametrize(
    ("version", "reads"), [("66.1.1", False), ("76.9", False), ("77.0.3", True), ("80.9.0", True)]
)
def test_setuptools_reads_the_spdx_form_from_77_on(version: str, reads: bool) -> None:
    assert license_for_setuptools.reads_spdx(version) is reads


def test_a_file_without_the_spdx_form_is_refused(tmp_path: Path) -> None:
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text('[project]\nlicense = { text = "Apache-2.0" }\n')
    result = rewrite(pyproject)
    assert result.returncode == 1
    assert f"{pyproject}: no project.license in the SPDX form to rewrite" in result.stderr
    assert pyproject.read_text() == '[project]\nlicense = { text = "Apache-2.0" }\n'
