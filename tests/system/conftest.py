"""System tests: the .deb in booted Debian 12 and 13 containers (the self-contained one in 11).

They run as root on the host and FAIL (never skip) when the host lacks something: CI must not
pass them silently. Needs: packaging/README-system-tests.md. `make system-test` runs them.

Every test that boots a container runs on Debian 12 (harness.DEFAULT_SUITE); one marked
``@pytest.mark.suites("bookworm", "trixie")`` runs once per suite named, its id ending in the
suite (``test_x[trixie]``). The suite is a module-scoped parameter: a module's tests run on one
suite after the other, each suite's in file order, with the module's container fixtures set
up once per suite.

Environment:
  TOKEN_RESOURCE_DEB          the .deb under test (default: built now with packaging/deb.mk)
  TOKEN_RESOURCE_UPGRADE_DEB  a newer build of the same tree (default: built now)
  TOKEN_RESOURCE_BUNDLED_DEB  the self-contained .deb for Debian 11 (default: built now,
                              packaging/bundled.mk; only when a test runs on Debian 11)
  TOKEN_RESOURCE_BUNDLED_UPGRADE_DEB  a newer build of it (default: built now)
  TOKEN_RESOURCE_IMAGE        the OCI archive under test (default: built now, `make image`)
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import TypeVar

import pytest
import yaml

from tests.system import harness
from tests.system.node import AgentNode

REPO = harness.REPO
HERE = Path(__file__).resolve().parent
# The kubelet stand-in and what it imports from tests/, copied into /srv/test/ with their paths
# (the containers run `python3 -m tests.standin.kubelet_script` with /srv/test on PYTHONPATH).
STANDIN_FILES = tuple(
    f"tests/{name}"
    for name in (
        "__init__.py",
        "standin/__init__.py",
        "standin/admission.py",
        "standin/kubelet.py",
        "standin/kubelet_endpoints.py",
        "standin/kubelet_links.py",
        "standin/kubelet_pod_admission.py",
        "standin/kubelet_registration.py",
        "standin/kubelet_rules.py",
        "standin/kubelet_script.py",
        "standin/kubelet_state.py",
        # The DRA side, imported only with its options.
        "standin/kubelet_plugins.py",
        "standin/kubelet_dra.py",
        "standin/kubelet_dra_calls.py",
        "standin/kubelet_dra_health.py",
        "standin/kubelet_dra_state.py",
        "standin/kubelet_dra_wipes.py",
    )
)
# Booting, installing and the watchdog test take longer than the unit tests' 120 s default.
SYSTEM_TEST_TIMEOUT = 900

ACTIVE_NODES: list[AgentNode] = []

Node = TypeVar("Node", bound=AgentNode)


@contextmanager
def started(node: Node, session_dir: Path) -> Iterator[Node]:
    """``node`` booted and listed in ACTIVE_NODES (whose journals a failure report shows);
    a harness error in the block fails the test with its message, and the node always stops."""
    try:
        node.start(session_dir)
        ACTIVE_NODES.append(node)
        yield node
    except harness.HarnessError as error:
        pytest.fail(str(error), pytrace=False)
    finally:
        if node in ACTIVE_NODES:
            ACTIVE_NODES.remove(node)
        node.stop()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "suites(*names): run this system test on each of these Debian suites "
        f"(default: {harness.DEFAULT_SUITE} only)",
    )


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "suite" not in metafunc.fixturenames:
        return
    marker = metafunc.definition.get_closest_marker("suites")
    suites = tuple(marker.args) if marker else (harness.DEFAULT_SUITE,)
    unknown = [name for name in suites if name not in harness.KNOWN_SUITES]
    if unknown or not suites:
        raise pytest.UsageError(
            f"{metafunc.definition.nodeid}: suites {unknown or '()'} are not among "
            f"{harness.KNOWN_SUITES}"
        )
    metafunc.parametrize("suite", suites, indirect=True, scope="module")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(str(item.fspath)).parents and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(SYSTEM_TEST_TIMEOUT))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if report.failed and HERE in Path(str(item.fspath)).parents:
        for node in ACTIVE_NODES:
            report.sections.append((f"journalctl -b of container {node.name}", node.journal()))


@pytest.fixture(scope="session")
def host() -> None:
    problem = ""
    try:
        harness.check_host()
        return
    except harness.HarnessError as error:
        problem = str(error)
    pytest.fail(problem, pytrace=False)


@pytest.fixture(scope="session")
def session_dir(host: None) -> Iterator[Path]:
    directory = Path(tempfile.mkdtemp(prefix="token-resource-systest-"))
    try:
        yield directory
    finally:
        shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture(scope="module")
def suite(request: pytest.FixtureRequest) -> str:
    """The Debian suite of the container(s) a test boots (see pytest_generate_tests)."""
    return str(request.param)


@pytest.fixture(scope="session")
def unpacked_rootfs(session_dir: Path) -> Callable[[str], Path]:
    """unpacked_rootfs(suite) -> that suite's rootfs, unpacked once a session when first asked."""
    unpacked: dict[str, Path] = {}

    def get(suite: str) -> Path:
        if suite not in unpacked:
            into = session_dir / f"rootfs-{suite}"
            shutil.rmtree(into, ignore_errors=True)  # what a failed earlier attempt left
            into.mkdir()
            unpacked[suite] = harness.unpack_rootfs(harness.rootfs_tarball(suite), into)
        return unpacked[suite]

    return get


@pytest.fixture(scope="module")
def rootfs(suite: str, unpacked_rootfs: Callable[[str], Path]) -> Path:
    problem = ""
    try:
        return unpacked_rootfs(suite)
    except harness.HarnessError as error:
        problem = str(error)
    pytest.fail(problem, pytrace=False)


@pytest.fixture(scope="session")
def artifacts(session_dir: Path) -> Path:
    """A directory bound read-only into every container at /srv/test."""
    directory = session_dir / "artifacts"
    directory.mkdir()
    version = harness.project_version()
    deb = os.environ.get("TOKEN_RESOURCE_DEB")
    upgrade = os.environ.get("TOKEN_RESOURCE_UPGRADE_DEB")
    problem = None
    try:
        current = Path(deb) if deb else harness.build_deb(version, session_dir / "deb-current")
        newer = (
            Path(upgrade)
            if upgrade
            else harness.build_deb(f"{version}+systest1", session_dir / "deb-upgrade")
        )
    except harness.HarnessError as error:
        problem = f"cannot build the .deb under test: {error}"
    if problem:
        pytest.fail(problem, pytrace=False)
    for path in (current, newer):
        if not path.is_file():
            pytest.fail(f"{path} is missing", pytrace=False)
    shutil.copy(current, directory / "token-resource.deb")
    shutil.copy(newer, directory / "token-resource-upgrade.deb")
    copy_standin(directory)
    return directory


def copy_standin(directory: Path) -> None:
    """The kubelet stand-in's files into ``directory`` (the containers' /srv/test)."""
    for name in STANDIN_FILES:
        (directory / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / name, directory / name)


# The self-contained package for Debian 11: its Python, and where it keeps its libraries.
BUNDLED_PYTHON = "3.9"
BUNDLED_PRIVATE = "/usr/lib/token-resource/site-packages"


def build_bundled_deb(version: str, into: Path) -> Path:
    """`make bundled-deb` for Debian 11 (pip fetches PyPI's wheels)."""
    harness.run(
        [
            "make",
            "-s",
            "-C",
            str(REPO),
            "-f",
            "packaging/bundled.mk",
            "bundled-deb",
            f"BUNDLED_PYTHON={BUNDLED_PYTHON}",
            f"BUNDLED_VERSION={version}",
            f"BUNDLED_DIST={into}",
            f"BUNDLED_BUILD={into / 'build'}",
            "BUNDLED_LINT=no",
            f"BUNDLED_PIP={sys.executable} -m pip",
        ],
        timeout=900,
    )
    return into / f"token-resource-bundled_{version}_amd64.deb"


def given_or_built_bundled_deb(variable: str, version: str, into: Path) -> Path:
    """The bundled .deb named by $``variable``, else ``version`` built into ``into``."""
    given = os.environ.get(variable)
    problem = ""
    try:
        deb = Path(given) if given else build_bundled_deb(version, into)
    except harness.HarnessError as error:
        problem = f"cannot build the bundled .deb: {error}"
    if problem:
        pytest.fail(problem, pytrace=False)
    if not deb.is_file():
        pytest.fail(f"{deb} is missing", pytrace=False)
    return deb


@pytest.fixture(scope="session")
def bundled_deb(session_dir: Path) -> Path:
    """The bundled .deb under test: $TOKEN_RESOURCE_BUNDLED_DEB, else built once a session."""
    return given_or_built_bundled_deb(
        "TOKEN_RESOURCE_BUNDLED_DEB", harness.project_version(), session_dir / "bdeb"
    )


@pytest.fixture(scope="session")
def bundled_upgrade_deb(session_dir: Path) -> Path:
    """A newer build of the same tree: $TOKEN_RESOURCE_BUNDLED_UPGRADE_DEB, else built once a
    session."""
    return given_or_built_bundled_deb(
        "TOKEN_RESOURCE_BUNDLED_UPGRADE_DEB",
        f"{harness.project_version()}+systest1",
        session_dir / "bundled-new",
    )


@pytest.fixture(scope="session")
def image(host: None, session_dir: Path) -> Path:
    """The OCI archive under test: $TOKEN_RESOURCE_IMAGE, else built now with `make image`
    (tests/system/test_image.py, test_image_import.py)."""
    given = os.environ.get("TOKEN_RESOURCE_IMAGE")
    if given:
        return Path(given)
    into = session_dir / "image"
    try:
        harness.run(
            ["make", "-s", "-C", str(REPO), "image", "DEB_LINT=no", f"DEB_DIST={into}",
             f"IMAGE_BUILD_DIR={session_dir / 'image-build'}"],
            timeout=900,
        )  # fmt: skip
    except harness.HarnessError as error:
        pytest.fail(f"make image failed: {error}", pytrace=False)
    return into / f"token-resource-{harness.project_version()}.oci.tar"


def base_image() -> str:
    """The image deploy/kubernetes/base runs, which `make image` names its archive."""
    daemon_set = yaml.safe_load((REPO / "deploy/kubernetes/base/agent/daemonset.yaml").read_text())
    (container,) = daemon_set["spec"]["template"]["spec"]["containers"]
    return str(container["image"])


@pytest.fixture(scope="module")
def boot_node(
    rootfs: Path, artifacts: Path, session_dir: Path
) -> Callable[[], AbstractContextManager[AgentNode]]:
    """boot_node() -> context manager yielding a freshly booted container of the test's suite
    (torn down on exit)."""

    @contextmanager
    def boot() -> Iterator[AgentNode]:
        with started(
            AgentNode(rootfs=rootfs, binds=[(artifacts, "/srv/test")]), session_dir
        ) as node:
            yield node

    return boot
