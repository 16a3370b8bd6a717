"""The signed apt repository (``make repo``: packaging/repo/publish) in booted containers of
each Debian release it serves: docs/install.md's commands as written (the repository a
directory bound into the container, ``file:`` for ``https:``) install the package by name; a
repository signed by another key is refused, whatever it offers; a newer build published is
taken by ``apt-get upgrade``, handed over to (the unit never restarts).
"""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.documented import example, replaced
from tests.repositories import Repository
from tests.system import harness
from tests.system.conftest import started
from tests.system.node import AgentNode, wait_for

pytestmark = pytest.mark.suites(*harness.BUNDLED_SUITES, *harness.SUITES)

INSIDE = "/srv/repositories"
DOCUMENTED_URI = "https://packages.example.com/token-resource"
SOURCES = "/etc/apt/sources.list.d/token-resource.sources"
KEYRING = "/etc/apt/keyrings/token-resource.gpg"


def update_only(sources: str) -> str:
    """``apt-get update`` of one sources file: the containers have no network, so Debian's
    sources are left out, and their lists (made with the rootfs, the package's dependencies in
    its apt cache) kept."""
    return (
        f"apt-get update -o Dir::Etc::SourceList={sources} -o Dir::Etc::SourceParts=- "
        "-o APT::Get::List-Cleanup=0"
    )


def uri(repository: Repository) -> str:
    """Where the node finds ``repository``: the directory bound into it."""
    return f"file:{INSIDE}/{repository.name}"


@pytest.fixture(scope="module")
def packages(suite: str, artifacts: Path, request: pytest.FixtureRequest) -> tuple[str, Path, Path]:
    """(name, deb, newer deb) of the package the repository serves ``suite``."""
    if suite in harness.BUNDLED_SUITES:
        deb = request.getfixturevalue("bundled_deb")
        newer = request.getfixturevalue("bundled_upgrade_deb")
        return "token-resource-bundled", deb, newer
    native = artifacts / "token-resource.deb", artifacts / "token-resource-upgrade.deb"
    return "token-resource", *native


@pytest.fixture(scope="module")
def repositories(suite: str, session_dir: Path) -> Iterator[Path]:
    root = session_dir / f"repositories-{suite}"
    root.mkdir()
    yield root
    shutil.rmtree(root)


@pytest.fixture(scope="module")
def node(rootfs: Path, repositories: Path, session_dir: Path) -> Iterator[AgentNode]:
    with started(AgentNode(rootfs=rootfs, binds=[(repositories, INSIDE)]), session_dir) as node:
        # apt-get install as an operator answers it: yes.
        node.write("/etc/apt/apt.conf.d/90assume-yes", 'APT::Get::Assume-Yes "true";\n')
        yield node


def version_of(node: AgentNode, package: str) -> str:
    return node.exec(["dpkg-query", "-W", "-f=${Version}", package]).stdout


def active_pid(node: AgentNode) -> int:
    """The agent's main PID, once the unit is active."""
    return wait_for(
        lambda: node.main_pid() if node.show("ActiveState") == "active" else None,
        60,
        "the agent's unit active",
    )


def test_the_documented_commands_install_the_package_by_name(
    node: AgentNode, suite: str, repositories: Path, packages: tuple[str, Path, Path]
) -> None:
    name, deb, _ = packages
    repository = Repository(repositories, "main")
    repository.publish(suite, deb)
    script = example("install.md", "sh", SOURCES)
    script = replaced(script, DOCUMENTED_URI, uri(repository))
    script = replaced(script, "Suites: bookworm", f"Suites: {suite}")
    script = replaced(script, "apt-get update\n", update_only(SOURCES) + "\n")
    script = replaced(script, "apt-get install token-resource ", f"apt-get install -q {name} ")
    # The key is copied to the node first, as the document says: here, it is the repository's.
    installed = node.sh(f"cd {INSIDE}/main && {{\n{script}}}", timeout=300)
    assert version_of(node, name) == harness.deb_version(deb), installed.stdout
    assert "is not signed" not in installed.stdout + installed.stderr
    key = hashlib.sha256((repository.out / "token-resource.gpg").read_bytes()).hexdigest()
    assert node.exec(["sha256sum", KEYRING]).stdout.split()[0] == key
    active_pid(node)


def test_a_repository_signed_by_another_key_is_refused(
    node: AgentNode, suite: str, repositories: Path, packages: tuple[str, Path, Path]
) -> None:
    """A repository under another key (its own, made anew) offering a newer version: apt-get
    update refuses it, the node keeps the version it has."""
    name, deb, newer = packages
    impostor = Repository(repositories, "impostor")
    impostor.publish(suite, newer)
    sources = "/etc/apt/sources.list.d/impostor.sources"
    node.write(
        sources,
        f"Types: deb\nURIs: {uri(impostor)}\nSuites: {suite}\nComponents: main\n"
        f"Signed-By: {KEYRING}\n",
    )
    refused = node.sh(update_only(sources), check=False, timeout=120)
    said = refused.stdout + refused.stderr
    assert refused.returncode != 0, said
    # gpgv (Debian 11, 12) says NO_PUBKEY first, sqv (13) "Missing key"; then both this.
    assert f"The repository '{uri(impostor)} {suite} InRelease' is not signed." in said, said
    node.sh(f"rm {sources} && {update_only(SOURCES)}", timeout=120)
    node.exec(["apt-get", "upgrade", "-q"], timeout=300)
    assert version_of(node, name) == harness.deb_version(deb)


def test_apt_get_upgrade_takes_a_newer_build_and_hands_over(
    node: AgentNode, suite: str, repositories: Path, packages: tuple[str, Path, Path]
) -> None:
    name, _, newer = packages
    before = active_pid(node)
    Repository(repositories, "main").publish(suite, newer)
    upgraded = node.sh(f"{update_only(SOURCES)} && apt-get upgrade -q", timeout=300)
    assert version_of(node, name) == harness.deb_version(newer), upgraded.stdout
    assert active_pid(node) != before
    assert node.show("NRestarts") == "0"
