"""The DRA tests' fixtures: the node's short directories, both stand-ins, the agent, and the
agent serving a pool of four tokens."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.dra.node import (
    NODE,
    TIMEOUT,
    dra_resource,
    node_kubelet,
    pool_of,
    start_driver,
)
from tests.harness import AgentProcess
from tests.paths import short_temporary_directory
from tests.standin.apiserver import ApiServerStandin, CertificateAuthority
from tests.standin.kubelet import KubeletStandin


@pytest.fixture
def dirs() -> Iterator[dict[str, Path]]:
    """The kubelet's directories and the CDI directory, short (unix socket paths)."""
    with short_temporary_directory("tr-dra-") as root:
        paths = {name: root / name for name in ("dp", "reg", "plugins", "cdi")}
        for path in paths.values():
            path.mkdir()
        yield paths


@pytest.fixture
def apiserver(ca: CertificateAuthority) -> Iterator[ApiServerStandin]:
    with ApiServerStandin(ca, nodes=(NODE, "node-b")) as standin:
        yield standin


@pytest.fixture
def kubelet(dirs: dict[str, Path], apiserver: ApiServerStandin) -> Iterator[KubeletStandin]:
    with node_kubelet(dirs, apiserver, deregistration_grace=1.0) as standin:
        yield standin


@pytest.fixture
def dra_agent(
    tmp_path: Path, dirs: dict[str, Path], apiserver: ApiServerStandin
) -> Iterator[AgentProcess]:
    process = AgentProcess(tmp_path / "agent", dirs["dp"])
    try:
        yield process
    finally:
        process.kill()


@pytest.fixture
def serving(
    dra_agent: AgentProcess,
    dirs: dict[str, Path],
    apiserver: ApiServerStandin,
    kubelet: KubeletStandin,
    tmp_path: Path,
) -> AgentProcess:
    start_driver(dra_agent, dirs, apiserver, kubelet, tmp_path, dra_resource(4))
    apiserver.wait_for(pool_of(4), timeout=TIMEOUT)
    return dra_agent
