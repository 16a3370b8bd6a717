"""Fixtures of the tests against real Kubernetes components."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.kube.chart import Helm
from tests.kube.controlplane import ControlPlane


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """One real 1.37 control plane for the whole run (about 3 s to the API server's /readyz,
    8 s to a working controller manager here): tests keep apart by their own node names."""
    with ControlPlane(tmp_path_factory.mktemp("control-plane")) as plane:
        yield plane


@pytest.fixture(autouse=True)
def nodes_removed(request: pytest.FixtureRequest) -> Iterator[None]:
    """After each test on the control plane, the Nodes it added are gone with their pods
    (ControlPlane.remove_added_nodes): tests keep apart by their node names, and a Node left
    with capacity would take the next tests' pods. Autouse, so set up before the test's other
    function-scoped fixtures and torn down after them (its agents stopped first); the Nodes of
    module-scoped fixtures, set up before it, are theirs to remove."""
    if "control_plane" not in request.fixturenames:
        yield
        return
    plane: ControlPlane = request.getfixturevalue("control_plane")
    kept = len(plane.added_nodes)
    yield
    plane.remove_added_nodes(kept)


@pytest.fixture(scope="session")
def helm(tmp_path_factory: pytest.TempPathFactory) -> Helm:
    """The real helm (tests/kube/go/helm), with a home of its own for the run."""
    return Helm(tmp_path_factory.mktemp("helm"))
