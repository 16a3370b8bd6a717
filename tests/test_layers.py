"""The package's layers and the tests' own rule hold (pyproject.toml's import-linter contracts),
and a wrong-way import breaks them: the check in `make lint` can fail."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "agent" / "token_resource"
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def lint_imports(source_root: Path) -> subprocess.CompletedProcess[str]:
    """import-linter on the package found under ``source_root``, with the project's contracts."""
    return subprocess.run(
        [str(LINT_IMPORTS), "--config", str(REPO / "pyproject.toml"), "--no-cache"],
        cwd=source_root,
        env={"PYTHONPATH": str(source_root), "PATH": "/usr/bin:/bin", "NO_COLOR": "1"},
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


def copy_package(tmp_path: Path) -> Path:
    """The package and the tests (a root package of the contracts too) under ``tmp_path``."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(REPO / "tests", tmp_path / "tests", ignore=ignore)
    shutil.copytree(PACKAGE, tmp_path / "token_resource", ignore=ignore)
    return tmp_path / "token_resource"


def test_the_package_keeps_its_layers(tmp_path: Path) -> None:
    copy_package(tmp_path)
    result = lint_imports(tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "4 kept, 0 broken" in result.stdout


def test_an_upward_import_breaks_the_layers(tmp_path: Path) -> None:
    # config is below the composition root: it may never import it.
    model = copy_package(tmp_path) / "config" / "model.py"
    model.write_text(model.read_text() + "\nimport token_resource.agent  # noqa\n")
    result = lint_imports(tmp_path)
    assert result.returncode != 0
    assert "BROKEN" in result.stdout
    assert "token_resource.config.model -> token_resource.agent" in result.stdout


def test_the_kubelet_wing_may_not_import_the_api_server_wing(tmp_path: Path) -> None:
    tokens = copy_package(tmp_path) / "kubelet" / "tokens.py"
    tokens.write_text(
        tokens.read_text() + "\nimport token_resource.apiserver.connection.client  # noqa\n"
    )
    result = lint_imports(tmp_path)
    assert result.returncode != 0
    assert (
        "token_resource.kubelet.tokens -> token_resource.apiserver.connection.client"
        in result.stdout
    )


def test_the_api_server_wings_connection_may_not_import_what_keeps_objects(
    tmp_path: Path,
) -> None:
    client = copy_package(tmp_path) / "apiserver" / "connection" / "client.py"
    client.write_text(
        client.read_text() + "\nimport token_resource.apiserver.keeping.keeper  # noqa\n"
    )
    result = lint_imports(tmp_path)
    assert result.returncode != 0
    # import-linter wraps its long lines.
    assert (
        "token_resource.apiserver.connection.client -> token_resource.apiserver.keeping.keeper"
        in " ".join(result.stdout.split())
    )


def test_a_stand_in_may_not_import_a_wings_tests(tmp_path: Path) -> None:
    copy_package(tmp_path)
    kubelet = tmp_path / "tests" / "standin" / "kubelet.py"
    kubelet.write_text(kubelet.read_text() + "\nimport tests.dra.test_dra  # noqa\n")
    result = lint_imports(tmp_path)
    assert result.returncode != 0
    assert "tests.standin.kubelet -> tests.dra.test_dra" in result.stdout
