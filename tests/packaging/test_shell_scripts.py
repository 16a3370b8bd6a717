"""Every shell script the project ships or runs (CI's entry point, the packages' maintainer
scripts) parses under the shell its first line names: a broken quote in .ci/run once failed CI
after 0 s, before a single test ran."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = sorted(
    [REPO / ".ci" / "run"]
    + [
        path
        for path in (REPO / "packaging").rglob("*")
        if path.is_file() and path.suffix in {".postinst", ".prerm", ".postrm", ".preinst"}
    ]
)


def shell_of(script: Path) -> str:
    first_line = script.read_text().splitlines()[0]
    assert first_line.startswith("#!"), f"{script}: no #! line"
    interpreter = first_line[2:].split()
    return interpreter[-1].rsplit("/", 1)[-1] if interpreter[0].endswith("env") else interpreter[0]


def parse_errors(script: Path) -> str:
    result = subprocess.run(
        [shell_of(script), "-n", str(script)],
        capture_output=True,
        text=True,
        check=False,
        timeout=30,
    )
    return result.stderr if result.returncode else ""


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda path: str(path.relative_to(REPO)))
def test_the_script_parses(script: Path) -> None:
    assert parse_errors(script) == ""


def test_an_unbalanced_backquote_is_found(tmp_path: Path) -> None:
    broken = tmp_path / "run"
    broken.write_text(
        (REPO / ".ci" / "run")
        .read_text()
        .replace("set -euo pipefail", "set -euo pipefail\necho `date", 1)
    )
    assert "unexpected EOF" in parse_errors(broken)


def test_the_scripts_are_found() -> None:
    assert REPO / ".ci" / "run" in SCRIPTS
    assert len(SCRIPTS) >= 4, SCRIPTS
