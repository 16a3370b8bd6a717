"""Booted containers as an Ansible fleet: an inventory, playbook runs and what they reported.

The inventory is a copy of packaging/ansible/inventory/example (its groups, group_vars and
host_vars) plus one file that points each of its hosts at a container: the project's nsenter
connection plugin with the container's leader PID as ansible_host. Playbooks run with the
default callback, whose text is parsed here (ansible-core has no machine-readable one) and
shown in full when a test fails.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.system.node import AgentNode

REPO = Path(__file__).resolve().parents[2]
ANSIBLE_DIR = REPO / "packaging/ansible"
EXAMPLE_INVENTORY = ANSIBLE_DIR / "inventory/example"
ANSIBLE_TOOLS = ("ansible-playbook", "ansible-inventory", "ansible-lint")

_HEADER = re.compile(r"^(?P<kind>PLAY|TASK|RUNNING HANDLER) \[(?P<name>.*)\] \**$")
_STATUS = re.compile(r"^(?P<status>ok|changed|fatal|failed|skipping): \[(?P<host>[^\]]+)\]")
_RECAP = re.compile(
    r"^(?P<host>\S+)\s+: ok=(?P<ok>\d+)\s+changed=(?P<changed>\d+)\s+"
    r"unreachable=(?P<unreachable>\d+)\s+failed=(?P<failed>\d+)\s+skipped=(?P<skipped>\d+)\s+"
    r"rescued=(?P<rescued>\d+)\s+ignored=(?P<ignored>\d+)"
)


def ansible_venv() -> Path:
    return Path(os.environ.get("TOKEN_RESOURCE_ANSIBLE_VENV", str(REPO / ".venv/ansible")))


def missing_tools() -> list[str]:
    return [tool for tool in ANSIBLE_TOOLS if not (ansible_venv() / "bin" / tool).is_file()]


def _tool(name: str) -> str:
    return str(ansible_venv() / "bin" / name)


def ansible_env(home: Path) -> dict[str, str]:
    """The environment for ansible-*: the venv first on PATH, all state under `home`."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("ANSIBLE_", "PYTHON", "VIRTUAL_ENV"))
    }
    env.update(
        PATH=f"{ansible_venv() / 'bin'}:{env.get('PATH', '/usr/bin:/bin')}:/usr/sbin:/sbin",
        ANSIBLE_CONFIG=str(ANSIBLE_DIR / "ansible.cfg"),
        ANSIBLE_HOME=str(home),
        ANSIBLE_LOCAL_TEMP=str(home / "tmp"),
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_FORCE_COLOR="0",
        ANSIBLE_RETRY_FILES_ENABLED="0",
        ANSIBLE_DEPRECATION_WARNINGS="0",
    )
    return env


@dataclass
class TaskResult:
    kind: str  # "TASK" or "RUNNING HANDLER"
    name: str
    host: str
    status: str  # ok, changed, fatal, failed, skipping


@dataclass(repr=False)
class PlaybookRun:
    argv: Sequence[str]
    returncode: int
    stdout: str
    stderr: str

    @property
    def results(self) -> list[TaskResult]:
        results: list[TaskResult] = []
        kind = name = ""
        for line in self.stdout.splitlines():
            header = _HEADER.match(line)
            if header:
                kind, name = header["kind"], header["name"]
                continue
            status = _STATUS.match(line)
            if status and kind in ("TASK", "RUNNING HANDLER"):
                results.append(TaskResult(kind, name, status["host"], status["status"]))
        return results

    @property
    def recap(self) -> dict[str, dict[str, int]]:
        """PLAY RECAP: host -> ok, changed, unreachable, failed, skipped, rescued, ignored."""
        recap: dict[str, dict[str, int]] = {}
        for line in self.stdout.splitlines():
            match = _RECAP.match(line)
            if match:
                recap[match["host"]] = {
                    key: int(value) for key, value in match.groupdict().items() if key != "host"
                }
        return recap

    def changed(self, host: str) -> int:
        return self.recap[host]["changed"]

    def ran(self, host: str, task: str, status: str | None = None) -> bool:
        """Whether `task` (a task or handler name, without the role prefix) ran on host."""
        return any(
            result.host == host
            and result.name.split(" : ", 1)[-1] == task
            and (status is None or result.status == status)
            for result in self.results
        )

    def __repr__(self) -> str:
        # In full: pytest shows an assertion's message object with repr().
        return (
            f"$ {' '.join(self.argv)}\nexit status {self.returncode}\n"
            f"--- stdout\n{self.stdout}\n--- stderr\n{self.stderr}"
        )


class Fleet:
    """The example inventory's hosts, each one a booted container."""

    def __init__(self, nodes: Mapping[str, AgentNode], workdir: Path) -> None:
        self.nodes = dict(nodes)
        self.workdir = workdir
        self.inventory = workdir / "inventory"
        self.home = workdir / "ansible-home"
        self.home.mkdir(parents=True, exist_ok=True)
        shutil.copytree(EXAMPLE_INVENTORY, self.inventory)
        containers = {
            "token_resource_nodes": {
                "hosts": {
                    host: {
                        "ansible_connection": "nsenter",
                        "ansible_host": str(node.leader),
                        "ansible_python_interpreter": "/usr/bin/python3",
                        # nsenter already runs as the container's root (no sudo there).
                        "ansible_become": False,
                    }
                    for host, node in self.nodes.items()
                }
            }
        }
        (self.inventory / "containers.json").write_text(json.dumps(containers, indent=1) + "\n")

    @staticmethod
    def example_hosts(home: Path) -> list[str]:
        listing = _inventory_list(EXAMPLE_INVENTORY, home)
        return sorted(listing["_meta"]["hostvars"])

    def set_vars(self, kind: str, name: str, values: Mapping[str, Any]) -> None:
        """Replace group_vars/<name>.yml or host_vars/<name>.yml (JSON is YAML too)."""
        assert kind in ("group_vars", "host_vars"), kind
        (self.inventory / kind / f"{name}.yml").write_text(json.dumps(values, indent=1) + "\n")

    def read_vars(self, kind: str, name: str) -> str:
        return (self.inventory / kind / f"{name}.yml").read_text()

    def restore_vars(self, kind: str, name: str, text: str) -> None:
        (self.inventory / kind / f"{name}.yml").write_text(text)

    def hostvars(self) -> dict[str, dict[str, Any]]:
        return _inventory_list(self.inventory, self.home)["_meta"]["hostvars"]  # type: ignore[no-any-return]

    def expected_counts(self) -> dict[str, dict[str, int]]:
        """host -> resource -> count, as the inventory says."""
        return {
            host: {
                name: value["count"] if isinstance(value, dict) else value
                for name, value in variables.get("token_resource_resources", {}).items()
            }
            for host, variables in self.hostvars().items()
        }

    def playbook(
        self, *args: str, extra_vars: Mapping[str, Any] | None = None, timeout: float = 300
    ) -> PlaybookRun:
        argv = [_tool("ansible-playbook"), "-i", str(self.inventory), str(ANSIBLE_DIR / "site.yml")]
        # A canary, then all the others: two batches instead of site.yml's three here.
        argv += [
            "--extra-vars",
            json.dumps({"token_resource_serial": [1, "100%"], **(extra_vars or {})}),
        ]
        argv += list(args)
        result = subprocess.run(
            argv,
            cwd=ANSIBLE_DIR,
            env=ansible_env(self.home),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        return PlaybookRun(argv, result.returncode, result.stdout, result.stderr)


def _inventory_list(inventory: Path, home: Path) -> dict[str, Any]:
    result = subprocess.run(
        [_tool("ansible-inventory"), "-i", str(inventory), "--list"],
        env=ansible_env(home),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if result.returncode != 0:
        raise AssertionError(f"ansible-inventory failed:\n{result.stdout}\n{result.stderr}")
    return json.loads(result.stdout)  # type: ignore[no-any-return]
