"""The successor's command line: the installed command run again, whatever interpreter its
``#!`` line names (the self-contained package's launcher runs ``python3 -IS`` and sets its own
path), or ``python -m token_resource`` for an agent started that way."""

from __future__ import annotations

import sys
from pathlib import Path

import token_resource
from token_resource.host.handover import successor_command


def test_an_installed_command_is_run_again_itself(tmp_path: Path) -> None:
    launcher = tmp_path / "token-resource"
    launcher.write_text("#!/usr/bin/python3 -IS\n")
    launcher.chmod(0o755)
    argv = [str(launcher), "run", "--config", "/etc/token-resource.toml"]
    assert successor_command(argv) == argv


def test_an_agent_run_as_a_module_is_run_as_one_again() -> None:
    main = str(Path(token_resource.__file__).parent / "__main__.py")
    assert successor_command([main, "run"]) == [sys.executable, "-m", "token_resource", "run"]


def test_a_program_that_cannot_be_executed_is_run_as_the_module(tmp_path: Path) -> None:
    script = tmp_path / "token-resource"
    script.write_text("")
    script.chmod(0o644)
    assert successor_command([str(script), "run"])[1:] == ["-m", "token_resource", "run"]
