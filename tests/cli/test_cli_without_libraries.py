"""The command without its runtime libraries: what needs none works, the rest says what to install.

The command runs as a real subprocess. ``python -S`` leaves out site-packages altogether, so
grpc, protobuf, watchdog and sdnotify are really absent (tomli, needed before Python 3.11, is
linked into a directory of its own); to take away one library at a time, ``sys.modules`` holds
None under its name, which makes every import of it fail as if it were not installed.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

import token_resource
from token_resource.cli import run as run_command
from token_resource.cli.run import METRICS_LIBRARY, RUNTIME_LIBRARIES

AGENT_SOURCE = Path(token_resource.__file__).resolve().parents[1]
VALID = '[agent]\ndevice_plugin_dir = "{dir}"\n\n[resources]\n"example.com/token" = 2\n'
INVALID = '[resources]\n"example.com/token" = -1\n'
BLOCK_AND_RUN = (
    "import runpy, sys\n"
    "for name in sys.argv.pop(1).split(','):\n"
    "    sys.modules[name] = None\n"
    "runpy.run_module('token_resource', run_name='__main__', alter_sys=True)\n"
)


@pytest.fixture
def bare_path(tmp_path: Path) -> str:
    """PYTHONPATH for ``python -S``: the agent's source, and tomli where Python lacks tomllib."""
    entries = [str(AGENT_SOURCE)]
    if sys.version_info < (3, 11):
        tomli = tmp_path / "tomli-only"
        tomli.mkdir()
        distribution = importlib.metadata.distribution("tomli")
        for top in {Path(str(file)).parts[0] for file in distribution.files or ()}:
            if not top.endswith(".dist-info") and top != "..":
                (tomli / top).symlink_to(Path(str(distribution.locate_file(top))))
        entries.append(str(tomli))
    return os.pathsep.join(entries)


@pytest.fixture
def configs(tmp_path: Path, device_plugin_dir: Path) -> dict[str, Path]:
    valid, invalid = tmp_path / "valid.toml", tmp_path / "invalid.toml"
    valid.write_text(VALID.format(dir=device_plugin_dir))
    invalid.write_text(INVALID)
    return {"valid": valid, "invalid": invalid}


def run(
    python_options: Sequence[str], args: Sequence[str], pythonpath: str, **env: str
) -> subprocess.CompletedProcess[str]:
    environ = {
        key: value
        for key, value in os.environ.items()
        if key not in ("NOTIFY_SOCKET", "JOURNAL_STREAM", "PYTHONPATH", "WATCHDOG_USEC")
    }
    environ.update(PYTHONPATH=pythonpath, **env)
    return subprocess.run(
        [sys.executable, *python_options, *args],
        capture_output=True,
        text=True,
        env=environ,
        timeout=60,
        check=False,
    )


def bare(args: Sequence[str], pythonpath: str, **env: str) -> subprocess.CompletedProcess[str]:
    """The command with nothing but the standard library (and tomli) importable."""
    return run(["-S", "-m", "token_resource"], args, pythonpath, **env)


def without(
    modules: Sequence[str], args: Sequence[str], **env: str
) -> subprocess.CompletedProcess[str]:
    """The command in the full environment, except that ``modules`` cannot be imported."""
    pythonpath = os.environ.get("PYTHONPATH", str(AGENT_SOURCE))
    return run(["-c", BLOCK_AND_RUN, ",".join(modules)], args, pythonpath, **env)


def test_the_libraries_are_really_absent(bare_path: str) -> None:
    for module in RUNTIME_LIBRARIES:
        probe = run(["-S", "-c", f"import {module}"], [], bare_path)
        assert probe.returncode == 1, probe
        assert "ModuleNotFoundError" in probe.stderr


HELP = [
    ["--help"],
    *([command, "--help"] for command in ("run", "check", "reload", "status", "node-status")),
    *(["node-status", action, "--help"] for action in ("show", "set", "remove")),
]


@pytest.mark.parametrize("args", [["--version"], *HELP], ids=" ".join)
def test_version_and_help_need_no_library(bare_path: str, args: list[str]) -> None:
    result = bare(args, bare_path)
    assert (result.returncode, result.stderr) == (0, "")
    first = result.stdout.splitlines()[0]
    assert first.startswith("token-resource " if args == ["--version"] else "usage: token-resource")


def test_check_needs_no_library(bare_path: str, configs: dict[str, Path], socket_dir: Path) -> None:
    valid = bare(["check", "--config", str(configs["valid"])], bare_path)
    assert (valid.returncode, valid.stderr) == (0, ""), valid
    assert "example.com/token: device plugin: 2 token(s)" in valid.stdout
    # As ExecStartPre=, with $NOTIFY_SOCKET set: without sdnotify there is no STATUS=, the
    # reason is still given.
    notify = str(socket_dir / "notify.sock")
    for env in ({}, {"NOTIFY_SOCKET": notify}):
        invalid = bare(["check", "--config", str(configs["invalid"])], bare_path, **env)
        assert invalid.returncode == 1, invalid
        [line] = invalid.stderr.splitlines()
        assert line.startswith(f"token-resource: invalid configuration: {configs['invalid']}")


def test_status_and_reload_need_no_library(bare_path: str, socket_dir: Path) -> None:
    for command in ("status", "reload"):
        result = bare([command, "--control-socket", str(socket_dir / "none.sock")], bare_path)
        assert result.returncode == 1, result
        [line] = result.stderr.splitlines()
        assert line.startswith(f"token-resource {command}: cannot reach the agent"), line


def test_run_names_every_missing_library_and_its_package(
    bare_path: str, configs: dict[str, Path]
) -> None:
    result = bare(["run", "--config", str(configs["valid"])], bare_path)
    assert (result.returncode, result.stdout) == (1, ""), result
    assert result.stderr.splitlines() == [
        "token-resource: cannot run without the Python modules grpc, google.protobuf, watchdog, "
        "sdnotify: install python3-grpcio python3-protobuf python3-watchdog python3-sdnotify "
        "(Debian, Fedora/RHEL; pip: grpcio protobuf watchdog sdnotify)"
    ]


@pytest.mark.parametrize("module", RUNTIME_LIBRARIES)
def test_run_without_one_library(module: str, configs: dict[str, Path]) -> None:
    result = without([module], ["run", "--config", str(configs["valid"])])
    assert (result.returncode, result.stdout) == (1, ""), result
    package, pypi = RUNTIME_LIBRARIES[module]
    assert result.stderr.splitlines() == [
        f"token-resource: cannot run without the Python module {module}: "
        f"install {package} (Debian, Fedora/RHEL; pip: {pypi})"
    ]


def test_metrics_need_prometheus_client_only_when_configured(
    configs: dict[str, Path], tmp_path: Path
) -> None:
    with_metrics = tmp_path / "metrics.toml"
    with_metrics.write_text(configs["valid"].read_text() + '[metrics]\nlisten = "127.0.0.1:0"\n')
    result = without([METRICS_LIBRARY], ["run", "--config", str(with_metrics)])
    assert (result.returncode, result.stdout) == (1, ""), result
    assert result.stderr.splitlines() == [
        "token-resource: [metrics] needs the Python module prometheus_client: install "
        "python3-prometheus-client (Debian), python3-prometheus_client (Fedora/RHEL; "
        "pip: prometheus-client)"
    ]
    checked = without([METRICS_LIBRARY], ["check", "--config", str(with_metrics)])
    assert (checked.returncode, checked.stderr) == (0, ""), checked
    assert "metrics: http://127.0.0.1:0/metrics" in checked.stdout
    # Without [metrics], the agent's modules import (and run) without the library.
    block = f"import sys; sys.modules['{METRICS_LIBRARY}'] = None; import token_resource.agent"
    imported = run(["-c", block], [], os.environ.get("PYTHONPATH", str(AGENT_SOURCE)))
    assert (imported.returncode, imported.stderr) == (0, ""), imported


def test_a_kubeconfig_needs_pyyaml_named_by_its_packages_and_extra(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\n")
    args = ["node-status", "--config", str(tmp_path / "none.toml"), "--kubeconfig"]
    result = without(["yaml"], [*args, str(kubeconfig), "--node", "node-a", "show"])
    assert (result.returncode, result.stdout) == (1, ""), result
    assert result.stderr.splitlines() == [
        "token-resource node-status: node node-a: reading a kubeconfig needs PyYAML: install "
        "python3-yaml (Debian), python3-pyyaml (Fedora/RHEL) or token-resource[kubernetes]"
    ]


def test_check_without_sdnotify_under_systemd(configs: dict[str, Path], socket_dir: Path) -> None:
    notify = str(socket_dir / "notify.sock")
    valid = without(
        ["sdnotify"], ["check", "--config", str(configs["valid"])], NOTIFY_SOCKET=notify
    )
    assert (valid.returncode, valid.stderr) == (0, ""), valid
    invalid = without(
        ["sdnotify"], ["check", "--config", str(configs["invalid"])], NOTIFY_SOCKET=notify
    )
    assert invalid.returncode == 1, invalid
    [line] = invalid.stderr.splitlines()
    assert line.startswith("token-resource: invalid configuration: "), line


def test_an_incompatible_library_is_named_with_its_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    # Debian 12's protobuf 3.21 with code generated for a newer one fails like this.
    import_module = importlib.import_module

    def incompatible_protobuf(name: str) -> object:
        if name == "token_resource.agent":
            raise ImportError(
                "cannot import name 'runtime_version' from 'google.protobuf' (/x/__init__.py)",
                name="google.protobuf",
            )
        return import_module(name)

    monkeypatch.setattr(importlib, "import_module", incompatible_protobuf)
    assert run_command.missing_libraries() == (
        "token-resource: cannot run without the Python module google.protobuf (cannot import "
        "name 'runtime_version' from 'google.protobuf' (/x/__init__.py)): install "
        "python3-protobuf (Debian, Fedora/RHEL; pip: protobuf)"
    )


def test_a_library_missing_a_dependency_is_named_with_its_reason(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import_module = importlib.import_module

    def broken_watchdog(name: str) -> object:
        if name == "watchdog":
            raise ModuleNotFoundError("No module named 'pathtools'", name="pathtools")
        return import_module(name)

    monkeypatch.setattr(importlib, "import_module", broken_watchdog)
    assert run_command.missing_libraries() == (
        "token-resource: cannot run without the Python module watchdog (No module named "
        "'pathtools'): install python3-watchdog (Debian, Fedora/RHEL; pip: watchdog)"
    )
