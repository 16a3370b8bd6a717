"""The role's own tasks run by ansible-playbook on this machine (``connection: local``), for
the tests that check what it computes or renders without a host to change."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
ROLE = REPO / "packaging/ansible/roles/token_resource"


def ansible_venv() -> Path:
    return Path(os.environ.get("TOKEN_RESOURCE_ANSIBLE_VENV") or REPO / ".venv/ansible")


def run_playbook(
    play: Sequence[Mapping[str, Any]], hosts: Mapping[str, Mapping[str, Any]], directory: Path
) -> subprocess.CompletedProcess[str]:
    """``play`` against ``hosts`` (each its variables), local, with ``out_dir`` = ``directory``;
    fails the test if ansible-playbook is missing or the run fails."""
    playbook_bin = ansible_venv() / "bin/ansible-playbook"
    if not playbook_bin.exists():
        pytest.fail(f"{playbook_bin} is missing: run `make ansible-venv`", pytrace=False)
    local = {
        "ansible_connection": "local",
        "ansible_python_interpreter": str(ansible_venv() / "bin/python"),
    }
    inventory = {"all": {"hosts": {name: {**local, **values} for name, values in hosts.items()}}}
    (directory / "play.yml").write_text(json.dumps(play))
    (directory / "inventory.json").write_text(json.dumps(inventory))
    env = {
        "PATH": f"{ansible_venv() / 'bin'}:/usr/bin:/bin",
        "HOME": str(directory),
        "ANSIBLE_ROLES_PATH": str(ROLE.parent),
        # The role's filters also for a play's own tasks (its template's, say).
        "ANSIBLE_FILTER_PLUGINS": str(ROLE / "filter_plugins"),
        "ANSIBLE_LOCAL_TEMP": str(directory / "tmp"),
        "ANSIBLE_NOCOLOR": "1",
    }
    result = subprocess.run(
        [
            str(playbook_bin),
            "-i",
            str(directory / "inventory.json"),
            "-e",
            f"out_dir={directory}",
            str(directory / "play.yml"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result
