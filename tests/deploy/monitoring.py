"""The alerts and the dashboard (deploy/kubernetes/overlays/metrics/monitoring) and Debian 12's
Prometheus tools that check them: `promtool` and the `prometheus` server (.ci/run installs the
`prometheus` package). A missing tool fails the test that needs it, with what to install."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from token_resource._compat import tomllib

REPO = Path(__file__).resolve().parents[2]
MONITORING = REPO / "deploy" / "kubernetes" / "overlays" / "metrics" / "monitoring"
RULES = MONITORING / "token-resource.rules.yml"
RULES_TESTS = MONITORING / "token-resource.rules.test.yml"
DASHBOARD = MONITORING / "token-resource-dashboard.json"
PROMETHEUS_RULE = MONITORING / "prometheusrule.yaml"
OBSERVABILITY = REPO / "docs" / "observability.md"
# Where the packages install the rules, the tests and the dashboard (the docs' paths).
INSTALLED_EXAMPLES = "/usr/share/doc/token-resource/examples"


def runbook_base() -> str:
    """Where each alert's runbook_url points: docs/observability.md of the rules' own version,
    at the project's home (the chart's `home`) under the tag v<pyproject.toml's version>."""
    home = yaml.safe_load((REPO / "deploy" / "helm" / "token-resource" / "Chart.yaml").read_text())
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    return f"{home['home']}/blob/v{version}/docs/observability.md"


def tool(name: str) -> str:
    """The path of ``promtool`` or ``prometheus``; the test fails without it."""
    path = shutil.which(name)
    if path is None:
        pytest.fail(
            f"{name} is not installed: apt-get install prometheus (Debian 12's 2.42; .ci/run)",
            pytrace=False,
        )
    return path


def promtool(*args: str, cwd: Path = MONITORING) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [tool("promtool"), *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def check_rules(path: Path) -> str:
    """promtool's check of a rule file: its output; AssertionError if it finds a fault."""
    done = promtool("check", "rules", str(path))
    assert done.returncode == 0, f"{path}:\n{done.stdout}{done.stderr}"
    return done.stdout


def alerting_rules(groups: dict[str, Any]) -> list[dict[str, Any]]:
    return [rule for group in groups["groups"] for rule in group["rules"] if "alert" in rule]


def shipped_rules() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(RULES.read_text())
    return loaded


def dashboard_queries() -> list[tuple[str, str]]:
    """(panel title, PromQL) of every target of every panel of the dashboard."""
    dashboard = json.loads(DASHBOARD.read_text())
    return [
        (panel["title"], target["expr"])
        for panel in dashboard["panels"]
        for target in panel["targets"]
    ]


def code_blocks(path: Path = OBSERVABILITY) -> list[list[str]]:
    """The lines of each fenced code block of a Markdown document, unindented."""
    blocks: list[list[str]] = []
    block: list[str] | None = None
    for line in path.read_text().splitlines():
        if line.lstrip().startswith("```"):
            if block is None:
                block, indent = [], len(line) - len(line.lstrip())
            else:
                blocks.append(block)
                block = None
        elif block is not None:
            block.append(line[indent:])
    assert block is None, f"{path}: unterminated code block"
    return blocks


def documented_commands(program: str) -> list[str]:
    """The command lines of ``program`` in docs/observability.md's code blocks."""
    return [line for block in code_blocks() for line in block if line.startswith(f"{program} ")]


def documented_prometheus_config() -> dict[str, Any]:
    """docs/observability.md's configuration of a plain Prometheus."""
    (found,) = [block for block in code_blocks() if block and block[0] == "rule_files:"]
    config: dict[str, Any] = yaml.safe_load("\n".join(found))
    return config
