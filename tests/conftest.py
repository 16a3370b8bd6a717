from __future__ import annotations

import os
import signal
from types import FrameType

# The tests fork (subprocess) while the in-process kubelet stand-in runs gRPC threads. gRPC's
# fork handlers restart its poller in the child between fork and exec, where it can crash on
# the descriptors subprocess closed (grpc/grpc#43055); the children exec at once and need none.
os.environ["GRPC_ENABLE_FORK_SUPPORT"] = "false"

from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.harness import AgentProcess
from tests.paths import short_temporary_directory
from tests.standin.apiserver import CertificateAuthority
from tests.standin.kubelet import KubeletStandin
from tests.standin.podresources import PodResourcesStandin

# The seeded ``rng`` fixture of the randomized tests (tests/seeded.py).
pytest_plugins = ["tests.seeded"]


@pytest.fixture(scope="session")
def ca() -> CertificateAuthority:
    """The API-server stand-ins' certificate authority (making one costs a key pair)."""
    return CertificateAuthority()


@pytest.fixture
def device_plugin_dir() -> Iterator[Path]:
    """A short path of its own (tests/paths.py): room for the agent's socket names."""
    with short_temporary_directory("tr-dp-") as directory:
        yield directory


@pytest.fixture
def socket_dir() -> Iterator[Path]:
    """A short directory for the sockets a test binds itself (tests/paths.py)."""
    with short_temporary_directory("tr-s-") as directory:
        yield directory


@pytest.fixture
def kubelet(device_plugin_dir: Path) -> Iterator[KubeletStandin]:
    with KubeletStandin(device_plugin_dir) as standin:
        yield standin


@pytest.fixture
def pod_resources_dir() -> Iterator[Path]:
    """Where the kubelet stand-in serves PodResources (short, like device_plugin_dir)."""
    with short_temporary_directory("tr-pr-") as directory:
        yield directory


@pytest.fixture
def pod_resources(
    kubelet: KubeletStandin, pod_resources_dir: Path
) -> Iterator[PodResourcesStandin]:
    with PodResourcesStandin(kubelet, pod_resources_dir) as standin:
        yield standin


@pytest.fixture
def agent(tmp_path: Path, device_plugin_dir: Path) -> Iterator[AgentProcess]:
    process = AgentProcess(tmp_path, device_plugin_dir)
    try:
        yield process
    finally:
        process.kill()


def pytest_configure(config: pytest.Config) -> None:
    signal.signal(signal.SIGTERM, _interrupt)


def _interrupt(signum: int, frame: FrameType | None) -> None:
    """SIGTERM (a time limit, a cancelled CI job) ends the run as Ctrl-C does: pytest then
    tears every fixture down, where Python's default would end it on the spot and leave the
    agents' socket directories, the booted containers and their mounts behind. A second
    SIGTERM ends it at once."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    raise KeyboardInterrupt(f"signal {signum}")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, Any, None]:
    """On failure, show what the agent logged: the first thing anyone asks for."""
    outcome = yield
    report = outcome.get_result()
    arguments = getattr(item, "funcargs", {})
    for name, value in arguments.items():
        if report.failed and isinstance(value, AgentProcess):
            report.sections.append((f"agent log ({name})", value.log()))
