"""The self-contained token-resource-bundled .deb on Debian 11 (systemd 247, Python 3.9).

Debian 11's own python3-grpcio (1.30, no grpc.aio) and python3-protobuf (3.12) are too old
for the agent; the bundled package carries PyPI's wheels in /usr/lib/token-resource and its
launcher runs /usr/bin/python3 isolated, without site-packages. To prove that the
distribution's libraries are not used, the container has them installed beside the package.
The scenario, in file order on one container: install, start, reload with a valid and an
invalid file, the watchdog restart, what systemd 247 says about the unit, upgrade keeping a
local edit, purge; then the Ansible role on the purged host, which must pick the bundled
package for Debian 11 by itself.

Environment:
  TOKEN_RESOURCE_BUNDLED_DEB          the package under test (default: built now, Python 3.9)
  TOKEN_RESOURCE_BUNDLED_UPGRADE_DEB  a newer build of the same tree (default: built now)
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.standin.apiserver import ApiServerStandin
from tests.standin.apiserver.certificates import CertificateAuthority
from tests.system.ansible_fleet import ANSIBLE_DIR, ansible_env, ansible_venv, missing_tools
from tests.system.conftest import (
    BUNDLED_PRIVATE,
    copy_standin,
    started,
)
from tests.system.harness import project_version
from tests.system.node import (
    CONFIG,
    PLUGIN_DIR,
    UNIT,
    AgentNode,
    config_text,
    kubelet_unit,
    wait_for,
)

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

REPO = Path(__file__).resolve().parents[2]
PACKAGE = "token-resource-bundled"
PRIVATE = BUNDLED_PRIVATE
# Where Debian 11's own units are (packaging/bundled/debian/rules).
UNIT_FILE = f"/lib/systemd/system/{UNIT}"
DEBIAN_LIBRARIES = ("python3-grpcio", "python3-protobuf", "python3-watchdog", "python3-sdnotify")
TOKEN = "example.com/token"
LOCAL = {"example.com/token": 7, "example.com/local": 1}

pytestmark = pytest.mark.suites("bullseye")


def shipped_counts() -> dict[str, int]:
    resources = tomllib.loads((REPO / "etc/token-resource.toml").read_text())["resources"]
    return {
        name: value if isinstance(value, int) else value["count"]
        for name, value in resources.items()
    }


SHIPPED = shipped_counts()


@pytest.fixture(scope="module")
def bundled_artifacts(session_dir: Path, bundled_deb: Path, bundled_upgrade_deb: Path) -> Path:
    """The bundled .deb, a newer build of it and the kubelet stand-in, for /srv/test."""
    directory = session_dir / "bundled-artifacts"
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir()
    shutil.copy(bundled_deb, directory / "bundled.deb")
    shutil.copy(bundled_upgrade_deb, directory / "bundled-upgrade.deb")
    copy_standin(directory)
    return directory


# The stand-in needs a grpc with grpc.aio: the package's own, ahead of Debian 11's.
KUBELET_UNIT_BULLSEYE = kubelet_unit(pythonpath=("/srv/test", PRIVATE))


@pytest.fixture(scope="module")
def node(rootfs: Path, bundled_artifacts: Path, session_dir: Path) -> Iterator[AgentNode]:
    with started(
        AgentNode(rootfs=rootfs, binds=[(bundled_artifacts, "/srv/test")]), session_dir
    ) as node:
        # Debian 11's own libraries first (from the rootfs's apt cache), as on a host that
        # has them for something else.
        node.exec(["apt-get", "install", "-y", "-q", *DEBIAN_LIBRARIES], timeout=300)
        node.write("/etc/systemd/system/kubelet.service", KUBELET_UNIT_BULLSEYE)
        node.systemctl("daemon-reload")
        node.systemctl("enable", "kubelet.service")
        node.install_output = node.exec(  # type: ignore[attr-defined]
            ["apt-get", "install", "-y", "-q", "/srv/test/bundled.deb"], timeout=300
        ).stdout
        node.systemctl("start", "kubelet.service")
        yield node


def package_version(node: AgentNode) -> str:
    return node.exec(["dpkg-query", "-W", "-f=${Version}", PACKAGE]).stdout


def restore_shipped(node: AgentNode) -> None:
    node.exec(
        [
            "sh",
            "-c",
            f"dpkg-deb --fsys-tarfile /srv/test/bundled.deb | tar -xO .{CONFIG} > {CONFIG}",
        ]
    )
    node.systemctl("reload", UNIT)
    node.wait_for_counts(SHIPPED)


def test_install_runs_on_its_own_libraries_not_debian_11s(node: AgentNode) -> None:
    depends = node.exec(["dpkg-deb", "-f", "/srv/test/bundled.deb", "Depends"]).stdout
    assert not [name for name in DEBIAN_LIBRARIES if name in depends], depends
    # Debian 11's grpcio is there, and too old: no grpc.aio.
    debian_grpc = node.exec(
        ["python3", "-c", "import grpc; print(grpc.__version__, grpc.__file__)"]
    ).stdout.split()
    assert debian_grpc[0].startswith("1.30."), debian_grpc
    assert debian_grpc[1].startswith("/usr/lib/python3/dist-packages/"), debian_grpc
    version = package_version(node)
    assert node.exec(["token-resource", "--version"]).stdout.split() == ["token-resource", version]
    assert node.read("/usr/bin/token-resource").startswith("#!/usr/bin/python3 -IS\n")
    # The running agent: Debian 11's Python 3.9, with the package's grpcio and protobuf
    # extension modules mapped, and nothing from dist-packages.
    pid = wait_for(node.main_pid, 30, "the agent's main process")
    exe = node.exec(["readlink", f"/proc/{pid}/exe"]).stdout.strip()
    assert exe == "/usr/bin/python3.9", exe
    maps = node.read(f"/proc/{pid}/maps")
    assert f"{PRIVATE}/grpc/_cython/cygrpc.cpython-39-x86_64-linux-gnu.so" in maps, maps
    assert f"{PRIVATE}/google/_upb/_message.abi3.so" in maps, maps
    assert "/usr/lib/python3/dist-packages/" not in maps, maps
    # Byte-compiled by the postinst (the agent cannot write under ProtectSystem=strict).
    assert node.exec(["test", "-d", f"{PRIVATE}/grpc/__pycache__"], check=False).returncode == 0


def test_the_bundled_agent_reads_a_kubeconfig(
    node: AgentNode, ca: CertificateAuthority, tmp_path: Path
) -> None:
    """PyYAML comes with the package (Debian 11's python3-yaml is hidden from it, as every
    dist-package is): node-status and DRA resources read the kubelet's kubeconfig."""
    absent = ApiServerStandin(ca, port=9)
    kubeconfig = absent.write_kubeconfig(
        tmp_path / "kubelet.conf", identity=ca.node_certificate("node-a")
    )
    node.write("/run/kubelet.conf", kubeconfig.read_text())
    try:
        result = node.exec(
            ["token-resource", "node-status", "--kubeconfig", "/run/kubelet.conf", "show"],
            check=False,
        )
    finally:
        node.exec(["rm", "-f", "/run/kubelet.conf"])
    assert result.returncode == 1
    # The file was read: its server was tried (nobody listens there).
    assert "API server https://127.0.0.1:9 unreachable" in result.stderr, result.stderr


def test_unit_enabled_active_and_kubelet_sees_every_resource(node: AgentNode) -> None:
    assert node.systemctl("is-enabled", UNIT).stdout.strip() == "enabled"
    assert node.systemctl("is-active", UNIT).stdout.strip() == "active"
    view = node.wait_for_counts(SHIPPED)
    assert not view["rejected"], view["rejected"]
    # Type=notify: a restart returns once the agent is serving.
    node.systemctl("restart", UNIT)
    assert (node.show("ActiveState"), node.show("SubState")) == ("active", "running")
    status = node.exec(["token-resource", "status"]).stdout
    assert f"{TOKEN}={SHIPPED[TOKEN]}" in status, status
    node.wait_for_counts(SHIPPED)


def test_systemctl_reload_applies_a_valid_file(node: AgentNode) -> None:
    pid = node.main_pid()
    changed = {**SHIPPED, TOKEN: SHIPPED[TOKEN] + 2, "example.com/extra": 3}
    node.write_config(changed)
    node.systemctl("reload", UNIT)
    status = node.exec(["token-resource", "status"]).stdout
    for name, count in changed.items():
        assert f"{name}={count}" in status, status
    node.wait_for_counts(changed, timeout=10)
    assert node.main_pid() == pid
    restore_shipped(node)


def test_systemctl_reload_rejects_an_invalid_file_and_keeps_serving(node: AgentNode) -> None:
    pid = node.main_pid()
    node.write(CONFIG, '[resources]\n"example.com/token" = "many"\n')
    result = node.systemctl("reload", UNIT, check=False)
    assert result.returncode != 0, result.stdout + result.stderr
    status = node.systemctl("status", "--no-pager", "--lines=20", UNIT, check=False).stdout
    assert "example.com/token" in status, status
    assert node.show("ActiveState") == "active"
    assert node.main_pid() == pid
    node.wait_for_counts(SHIPPED, timeout=5)
    restore_shipped(node)


def test_watchdog_restarts_a_frozen_agent_which_registers_again(node: AgentNode) -> None:
    before = node.wait_for_counts(SHIPPED)
    pid, restarts = node.main_pid(), int(node.show("NRestarts"))
    node.exec(["kill", "-STOP", str(pid)])
    new_pid = wait_for(
        lambda: (p := node.main_pid()) not in (0, pid) and p,
        timeout=60,
        what="systemd's watchdog to replace the frozen agent",
    )
    assert "Watchdog timeout" in node.unit_journal()
    wait_for(lambda: node.show("ActiveState") == "active", 30, "the new agent to be active")
    assert int(node.show("NRestarts")) == restarts + 1
    node.wait_for_view(
        lambda v: all(
            v["resources"][n]["registrations"] > before["resources"][n]["registrations"]
            and v["resources"][n]["allocatable"] == SHIPPED[n]
            for n in SHIPPED
        ),
        "the restarted agent to register every resource again",
    )
    assert node.main_pid() == new_pid


def test_systemd_247_runs_the_same_unit(node: AgentNode) -> None:
    version = node.exec(["systemctl", "--version"]).stdout.split()[1]
    assert version == "247", version
    # The very unit whose exposure tests/system/test_deb_service.py holds to <= 1.5 under
    # systemd 252 and 257.
    assert node.read(UNIT_FILE) == (REPO / "systemd/token-resource.service").read_text()
    verify = node.exec(["systemd-analyze", "verify", "--man=no", UNIT_FILE], check=False)
    said = (verify.stdout + verify.stderr).strip()
    print(f"systemd {version}: systemd-analyze verify: exit {verify.returncode}: {said!r}")
    # Whatever 247 does not know it ignores with a warning (it would otherwise not have
    # started the unit, which the tests above prove it does); no setting is rejected.
    assert verify.returncode == 0, said
    # What PID 1 logged about the unit file when it loaded it (unknown settings are logged
    # as "Unknown key name ..., ignoring." / "Unknown lvalue ..."); printed for the record.
    loaded = node.exec(["journalctl", "-b", "--no-pager", "-o", "cat", "_PID=1"]).stdout
    about_unit = [line for line in loaded.splitlines() if re.search(rf"{UNIT}:\d+: ", line)]
    print(f"systemd {version}: PID 1 on loading the unit: {about_unit or 'nothing'}")
    security = node.exec(["systemd-analyze", "security", "--no-pager", UNIT], check=False)
    match = re.search(
        r"Overall exposure level for token-resource\.service: (\d+\.\d+)", security.stdout
    )
    assert match, security.stdout + security.stderr
    print(f"systemd {version}: systemd-analyze security (the loaded unit): {match.group(1)}")


def test_upgrade_keeps_a_modified_conffile_and_hands_over_to_the_new_agent(
    node: AgentNode,
) -> None:
    node.write_config(LOCAL)
    node.wait_for_counts(LOCAL)
    old_version, old_pid = package_version(node), node.main_pid()
    invocation, restarts = node.show("InvocationID"), node.show("NRestarts")
    upgrade = node.exec(
        ["apt-get", "install", "-y", "-q", "/srv/test/bundled-upgrade.deb"], timeout=300
    )
    assert "warning" not in upgrade.stdout + upgrade.stderr, upgrade.stdout + upgrade.stderr
    new_version = package_version(node)
    assert (
        node.exec(
            ["dpkg", "--compare-versions", new_version, "gt", old_version], check=False
        ).returncode
        == 0
    ), (old_version, new_version)
    assert node.read(CONFIG) == config_text(LOCAL)
    assert node.exec(["token-resource", "--version"]).stdout.split() == [
        "token-resource",
        new_version,
    ]
    assert node.show("ActiveState") == "active"
    new_pid = node.main_pid()
    assert new_pid not in (0, old_pid), "the upgrade did not hand over to a new agent"
    # The launcher run again (python3 -IS, the private libraries), in the same run of the unit.
    assert (node.show("InvocationID"), node.show("NRestarts")) == (invocation, restarts)
    assert f"stopping: handed over to pid {new_pid}" in node.journal()
    status = node.exec(["token-resource", "status", "--json"]).stdout
    assert f'"pid": {new_pid}' in status, status
    node.wait_for_counts(LOCAL, min_registrations=2)


def test_purge_removes_everything_it_installed(node: AgentNode) -> None:
    purge = node.exec(["apt-get", "purge", "-y", "-q", PACKAGE], timeout=300)
    assert "warning" not in purge.stdout + purge.stderr, purge.stdout + purge.stderr
    status = node.exec(
        ["dpkg-query", "-W", "-f=${db:Status-Abbrev}", PACKAGE], check=False
    ).stdout.strip()
    assert status in ("", "un"), status
    for path in (
        CONFIG,
        UNIT_FILE,
        f"/usr/lib/systemd/system/{UNIT}",
        f"/etc/systemd/system/multi-user.target.wants/{UNIT}",
        "/var/lib/systemd/deb-systemd-helper-enabled/token-resource.service.dsh-also",
        "/run/token-resource",
        "/usr/bin/token-resource",
        "/usr/lib/token-resource",  # the .pyc files the postinst compiled included
    ):
        assert node.exec(["test", "-e", path], check=False).returncode != 0, f"{path} is left"
    assert node.show("LoadState") == "not-found"
    assert node.exec(["pgrep", "-f", "token-resource run"], check=False).returncode != 0
    listing = node.exec(["ls", "-A", PLUGIN_DIR], check=False).stdout.split()
    assert sorted(listing) == ["kubelet.sock", "kubelet_internal_checkpoint"], listing


def test_ansible_role_picks_the_bundled_package_for_debian_11(
    node: AgentNode, bundled_artifacts: Path
) -> None:
    missing = missing_tools()
    if missing:
        pytest.fail(f"{', '.join(missing)} missing in {ansible_venv()}", pytrace=False)
    # Ansible's apt module needs python3-apt on the host (from the rootfs's apt cache).
    node.exec(["apt-get", "install", "-y", "-q", "python3-apt"], timeout=300)
    counts = {TOKEN: 3}
    host = {
        "ansible_connection": "nsenter",
        "ansible_host": str(node.leader),
        "ansible_python_interpreter": "/usr/bin/python3",
        "ansible_become": False,
        "token_resource_resources": counts,
        # No flavour given: the role's choice. A native file is given too, and not taken.
        "token_resource_package_file": str(bundled_artifacts / "not-this-one_all.deb"),
        "token_resource_bundled_package_files": {
            "python3.9-amd64": str(bundled_artifacts / "bundled.deb")
        },
    }
    play = [{"hosts": "all", "gather_facts": False, "roles": ["token_resource"]}]
    with tempfile.TemporaryDirectory(prefix="ansible-bullseye-") as tmp:
        work = Path(tmp)
        (work / "inventory.json").write_text(json.dumps({"all": {"hosts": {"bullseye": host}}}))
        (work / "play.yml").write_text(json.dumps(play))

        def playbook(*extra: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                [
                    str(ansible_venv() / "bin/ansible-playbook"),
                    "-i",
                    str(work / "inventory.json"),
                    str(work / "play.yml"),
                    *extra,
                ],
                cwd=ANSIBLE_DIR,
                env=ansible_env(work),
                capture_output=True,
                text=True,
                timeout=600,
                check=False,
            )

        installed = playbook()
        assert installed.returncode == 0, installed.stdout + installed.stderr
        assert package_version(node) == project_version()
        native = node.exec(
            ["dpkg-query", "-W", "-f=${db:Status-Abbrev}", "token-resource"], check=False
        ).stdout.strip()
        assert native in ("", "un"), native
        assert node.systemctl("is-active", UNIT).stdout.strip() == "active"
        node.wait_for_counts(counts)
        removed = playbook("--extra-vars", json.dumps({"token_resource_state": "absent"}))
        assert removed.returncode == 0, removed.stdout + removed.stderr
    status = node.exec(
        ["dpkg-query", "-W", "-f=${db:Status-Abbrev}", PACKAGE], check=False
    ).stdout.strip()
    assert status in ("", "un"), status
