"""The extras: what `pip install 'token-resource[EXTRA]'` brings besides the agent.

A copy of this tree is built into a wheel by its real build backend, the host's setuptools (as
the .deb and .rpm builds use it; python3-setuptools and python3-wheel, .ci/run), and pip
resolves it offline: ``--dry-run --no-index --ignore-installed`` against a directory holding
that wheel and, for every library it names, an empty wheel at the library's version floor.
pip only reports what it would install; nothing is installed, downloaded or cached. A missing
setuptools is a failure, never a skip.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BUILD = "import sys; from setuptools import build_meta; print(build_meta.build_wheel(sys.argv[1]))"
# "name[extras]>=floor", or "name[extras] (>=floor)" as the host's setuptools 66 writes it.
REQUIREMENT = re.compile(r"([A-Za-z0-9._-]+)(?:\[[^]]*\])?\s*\(?\s*(?:>=\s*([0-9.]+))?")


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The agent's wheel, and a stand-in wheel for each library its metadata names."""
    source = tmp_path_factory.mktemp("source")
    shutil.copy(REPO / "pyproject.toml", source)
    shutil.copy(REPO / "README.md", source)
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info")
    shutil.copytree(REPO / "agent", source / "agent", ignore=ignore)
    # As the .deb and .rpm builds do first: setuptools 66 reads no SPDX license.
    subprocess.run(
        ["/usr/bin/python3", REPO / "packaging/license_for_setuptools.py", "pyproject.toml"],
        cwd=source,
        check=True,
    )
    wheels = tmp_path_factory.mktemp("wheels")
    built = subprocess.run(
        ["/usr/bin/python3", "-c", BUILD, str(wheels)],
        cwd=source,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    for line in _metadata(wheels / built.stdout.split()[-1]):
        if line.startswith("Requires-Dist:"):
            match = REQUIREMENT.match(line.partition(":")[2].strip())
            assert match, line
            if match[1] != "token-resource":
                _empty_wheel(wheels, match[1], match[2] or "1.0")
    return wheels


def _metadata(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as archive:
        [metadata] = [item for item in archive.namelist() if item.endswith(".dist-info/METADATA")]
        return archive.read(metadata).decode().splitlines()


def test_the_wheel_says_the_license(wheels: Path) -> None:
    [agent] = wheels.glob("token_resource-*.whl")
    assert "License: Apache-2.0" in _metadata(agent)


def _empty_wheel(directory: Path, name: str, version: str) -> None:
    """A wheel that is nothing but its metadata, which is all a dry run reads."""
    stem = f"{re.sub(r'[-.]+', '_', name)}-{version}"
    with zipfile.ZipFile(directory / f"{stem}-py3-none-any.whl", "w") as wheel:
        metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
        wheel.writestr(f"{stem}.dist-info/METADATA", metadata)
        wheel.writestr(
            f"{stem}.dist-info/WHEEL",
            "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        )
        wheel.writestr(f"{stem}.dist-info/RECORD", "")


def resolved(wheels: Path, requirement: str, report: Path) -> set[str]:
    """The distributions pip would install for ``requirement``, by lower-case name."""
    environ = {key: value for key, value in os.environ.items() if not key.startswith("PIP_")}
    environ.update(PIP_CONFIG_FILE=os.devnull, PIP_DISABLE_PIP_VERSION_CHECK="1")
    offline = ["--dry-run", "--no-index", "--no-cache-dir", "--ignore-installed"]
    found = ["--find-links", str(wheels), "--report", str(report)]
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", *offline, *found, requirement],
        env=environ,
        timeout=120,
        check=True,
    )
    answer = json.loads(report.read_text())
    return {item["metadata"]["name"].lower() for item in answer["install"]}


@pytest.mark.parametrize("extra", ["kubernetes", "node-status"])
def test_the_extra_brings_pyyaml(wheels: Path, tmp_path: Path, extra: str) -> None:
    assert "pyyaml" in resolved(wheels, f"token-resource[{extra}]", tmp_path / "report.json")


def test_without_an_extra_there_is_no_pyyaml(wheels: Path, tmp_path: Path) -> None:
    installed = resolved(wheels, "token-resource", tmp_path / "report.json")
    assert {"token-resource", "grpcio", "protobuf", "watchdog", "sdnotify"} <= installed
    assert "pyyaml" not in installed
