"""Package life cycle: upgrade with a locally modified conffile (the running agent handing
over to the new code: the unit never restarts), then purge.

On Debian 12 and Debian 13 (where the unit once went to /lib/systemd/system, a directory of
no other package on merged /usr, and purge warned that it was not empty).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager

import pytest

from tests.system import harness
from tests.system.node import CONFIG, PLUGIN_DIR, UNIT, UNIT_FILE, AgentNode, config_text

LOCAL = {"example.com/token": 7, "example.com/local": 1}
# Every test of the module, on every suite.
pytestmark = pytest.mark.suites(*harness.SUITES)


@pytest.fixture(scope="module")
def node(boot_node: Callable[[], AbstractContextManager[AgentNode]]) -> Iterator[AgentNode]:
    with boot_node() as node:
        node.install_kubelet(start=False)
        node.exec(["apt-get", "install", "-y", "-q", "/srv/test/token-resource.deb"], timeout=300)
        node.systemctl("start", "kubelet.service")
        yield node


def package_version(node: AgentNode) -> str:
    return node.exec(["dpkg-query", "-W", "-f=${Version}", "token-resource"]).stdout


def wait_for(what: str, condition: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"{what}: not within {timeout:g} s"
        time.sleep(0.2)


def test_an_upgrade_whose_successor_cannot_start_fails_and_the_agent_serves_on(
    node: AgentNode,
) -> None:
    """A file the running agent refused (it serves the one before) stops the new agent too:
    the postinst fails with the reason, the old agent serves on; once the file is fixed,
    ``dpkg --configure -a`` hands over. A downgrade then hands over back."""
    old_version = package_version(node)
    node.write_config(LOCAL)
    node.wait_for_counts(LOCAL)
    old_pid = node.main_pid()
    node.write(CONFIG, '[resources]\n"example.com/token" = "seven"\n')
    upgrade = node.exec(
        ["apt-get", "install", "-y", "-q", "/srv/test/token-resource-upgrade.deb"],
        timeout=300,
        check=False,
    )
    assert upgrade.returncode != 0, upgrade.stdout
    said = upgrade.stdout + upgrade.stderr
    assert "exited with status 1 before it could serve" in said, said
    assert "the running agent goes on serving" in said, said
    assert node.exec(
        ["dpkg-query", "-W", "-f=${db:Status-Abbrev}", "token-resource"]
    ).stdout.startswith("iF")
    assert (node.show("ActiveState"), node.main_pid()) == ("active", old_pid)
    node.wait_for_counts(LOCAL)
    assert "handover failed, this agent goes on serving" in node.journal()

    node.write_config(LOCAL)
    node.exec(["dpkg", "--configure", "-a"], timeout=300)
    assert node.main_pid() not in (0, old_pid)
    assert package_version(node) != old_version
    downgrade = node.exec(
        ["apt-get", "install", "-y", "-q", "--allow-downgrades", "/srv/test/token-resource.deb"],
        timeout=300,
    )
    assert package_version(node) == old_version, downgrade.stdout
    assert node.show("NRestarts") == "0"
    node.wait_for_counts(LOCAL)


def test_upgrade_keeps_a_modified_conffile_and_hands_over_to_the_new_agent(
    node: AgentNode,
) -> None:
    node.write_config(LOCAL)
    node.wait_for_counts(LOCAL)
    old_version, old_pid = package_version(node), node.main_pid()
    invocation = node.show("InvocationID")
    # No --force-conf* option: an upgrade that would prompt about the conffile hangs or fails.
    upgrade = node.exec(
        ["apt-get", "install", "-y", "-q", "/srv/test/token-resource-upgrade.deb"], timeout=300
    )
    assert "warning" not in upgrade.stdout + upgrade.stderr, upgrade.stdout + upgrade.stderr
    new_version = package_version(node)
    assert new_version != old_version
    assert (
        node.exec(
            ["dpkg", "--compare-versions", new_version, "gt", old_version], check=False
        ).returncode
        == 0
    )
    assert node.read(CONFIG) == config_text(LOCAL)
    assert node.exec(["token-resource", "--version"]).stdout.split() == [
        "token-resource",
        new_version,
    ]
    assert node.show("ActiveState") == "active"
    new_pid = node.main_pid()
    assert new_pid not in (0, old_pid), "the upgrade did not hand over to a new agent"
    # The same run of the unit: no stop, no start, no restart.
    assert (node.show("InvocationID"), node.show("NRestarts")) == (invocation, "0")
    status = node.exec(["token-resource", "status", "--json"]).stdout
    assert f'"pid": {new_pid}' in status, status
    assert f"stopping: handed over to pid {new_pid}" in node.journal()
    node.wait_for_counts(LOCAL, min_registrations=2)
    # systemd speaks with the successor: a reload (ExecReload= over its control socket).
    node.systemctl("reload", UNIT)
    assert node.main_pid() == new_pid

    # systemd watches the successor: frozen, its watchdog (WatchdogSec=20s) has it replaced.
    node.exec(["kill", "-STOP", str(new_pid)])
    wait_for("the frozen agent replaced", lambda: node.main_pid() not in (0, new_pid), 90)
    assert node.show("NRestarts") == "1"
    assert "Watchdog timeout" in node.journal()
    node.wait_for_counts(LOCAL)


def test_purge_removes_unit_config_and_sockets(node: AgentNode) -> None:
    purge = node.exec(["apt-get", "purge", "-y", "-q", "token-resource"], timeout=300)
    # dpkg says nothing about directories it could not remove (such as "directory
    # '/lib/systemd/system' not empty so not removed").
    assert "warning" not in purge.stdout + purge.stderr, purge.stdout + purge.stderr
    status = node.exec(
        ["dpkg-query", "-W", "-f=${db:Status-Abbrev}", "token-resource"], check=False
    ).stdout.strip()
    assert status in ("", "un"), status
    for path in (
        CONFIG,
        UNIT_FILE,
        f"/lib/systemd/system/{UNIT}",
        f"/etc/systemd/system/multi-user.target.wants/{UNIT}",
        "/var/lib/systemd/deb-systemd-helper-enabled/token-resource.service.dsh-also",
        "/run/token-resource",
        "/usr/bin/token-resource",
    ):
        assert node.exec(["test", "-e", path], check=False).returncode != 0, f"{path} is left"
    assert node.show("LoadState") == "not-found"
    assert node.exec(["pgrep", "-f", "token-resource run"], check=False).returncode != 0
    # Only the kubelet's own socket and checkpoint are left in its directory.
    assert node.plugin_dir() == ["kubelet.sock", "kubelet_internal_checkpoint"], node.plugin_dir()
    assert node.exec(["test", "-S", f"{PLUGIN_DIR}/kubelet.sock"], check=False).returncode == 0
