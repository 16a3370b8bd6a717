"""Fixtures of the real node's tests: one control plane for the run, and one node at a time.

The tests run on a fresh node per release (1.36, then 1.37) and way of advertising (``mode``),
both session-scoped parameters, so pytest orders the tests by them and makes each node once: a
node keeps what one way left behind (a device plugin's resource stays in the Node's capacity
for the device manager's grace period, a node-status capacity for good), which would change
what the scheduler does with the next way's pods. Each test leaves its node without agents or
token pods; what the Node offers may still lag behind (a count the test changed), so a test
waits for what it expects before it counts on it (``wait_offered``)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.kube.chart import Helm
from tests.kube.controlplane import ControlPlane
from tests.kube.programs import RELEASES, MissingProgram
from tests.node.daemonset import ChartForm
from tests.node.demo import Demo
from tests.node.figures import Figures
from tests.node.host import HostForm
from tests.node.modes import LICENSE, MODES, Mode
from tests.node.network import SERVICE_IP
from tests.node.node import RealNode


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """The real 1.37 control plane, with every controller (node-lifecycle takes a new Node's
    not-ready taint off) and a serving certificate for the ``kubernetes`` Service's address,
    which the node's pods dial."""
    with ControlPlane(
        tmp_path_factory.mktemp("control-plane"), server_names=(SERVICE_IP,), controllers="*"
    ) as plane:
        yield plane


@pytest.fixture(scope="session")
def agent_image() -> Path:
    """The agent's image archive (`make image`), which the DaemonSet runs."""
    given = os.environ.get("TOKEN_RESOURCE_IMAGE")
    if not given or not Path(given).is_file():
        raise MissingProgram(f"TOKEN_RESOURCE_IMAGE={given!r}: run these tests with make node-test")
    return Path(given)


@pytest.fixture(scope="session")
def figures(request: pytest.FixtureRequest) -> Figures:
    """What the tests measured, printed at the end of the run (conftest's summary hook)."""
    found: Figures = request.config.stash[FIGURES]
    return found


FIGURES = pytest.StashKey[Figures]()


def pytest_configure(config: pytest.Config) -> None:
    config.stash[FIGURES] = Figures()


# A test on the node may wait for the kubelet's own retries (a minute and a half after a late
# DRA driver) besides a reboot: more than the suite's 120 s.
NODE_TEST_TIMEOUT = 360


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(NODE_TEST_TIMEOUT))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    figures = terminalreporter.config.stash.get(FIGURES, None)
    if figures:
        terminalreporter.write_sep("=", "measured on the real node")
        terminalreporter.write_line(figures.table())


@pytest.fixture(scope="session", params=RELEASES, ids=[f"v{r}" for r in RELEASES])
def release(request: pytest.FixtureRequest) -> str:
    value: str = request.param
    return value


@pytest.fixture(scope="session", params=sorted(MODES))
def mode(request: pytest.FixtureRequest) -> Mode:
    """A way of advertising; a module that tests only some says so with
    ``@pytest.mark.parametrize("mode", [...], indirect=True)``."""
    return MODES[request.param]


@pytest.fixture(scope="session")
def node(
    release: str,
    mode: Mode,
    control_plane: ControlPlane,
    agent_image: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[RealNode]:
    directory = tmp_path_factory.mktemp(f"node-{release}-{mode.advertise}")
    with RealNode(release, control_plane, directory, images=(agent_image,)) as real:
        yield real


@pytest.fixture
def demo(node: RealNode) -> Iterator[Demo]:
    """The token-demo example, deleted with its pods after the test."""
    workload = Demo(node.control_plane)
    yield workload
    workload.delete()


@pytest.fixture
def license_demo(node: RealNode) -> Iterator[Demo]:
    workload = Demo(node.control_plane, LICENSE)
    yield workload
    workload.delete()


@pytest.fixture
def chart(node: RealNode, mode: Mode, tmp_path: Path) -> Iterator[ChartForm]:
    """The chart's DaemonSet, not installed yet; uninstalled after the test."""
    home = tmp_path / "helm"
    kubeconfig = node.control_plane.admin_kubeconfig(tmp_path / "admin.kubeconfig")
    helm = Helm(home)
    helm.env["KUBECONFIG"] = str(kubeconfig)
    form = ChartForm(node, mode, helm, tmp_path)
    try:
        yield form
    finally:
        form.delete()


@pytest.fixture
def host(node: RealNode, mode: Mode, tmp_path: Path) -> Iterator[HostForm]:
    """The host form, configured with 2 tokens (and 2 licenses) but not started."""
    form = HostForm(node, mode, tmp_path)
    form.configure(2)
    try:
        yield form
    finally:
        form.close()
