"""The Ansible role and site.yml (packaging/ansible) against real systemd hosts.

The example inventory's hosts are booted Debian 12 containers (one each, booted once for the
module), reached through the project's nsenter connection plugin; each runs the kubelet
stand-in as kubelet.service. The tests run in file order and build on each other: install,
idempotence, check mode, a count change for one group, refusals, upgrade and rollback,
removal. Needs `make ansible-venv` (ansible-core and ansible-lint in .venv/ansible, or
TOKEN_RESOURCE_ANSIBLE_VENV); without it the tests fail.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, ExitStack
from pathlib import Path
from typing import Any

import pytest

from tests.repositories import Repository
from tests.system import harness
from tests.system.ansible_fleet import (
    ANSIBLE_DIR,
    Fleet,
    PlaybookRun,
    ansible_env,
    ansible_venv,
    missing_tools,
)
from tests.system.node import CONFIG, UNIT, UNIT_FILE, AgentNode

# Groups and hosts of packaging/ansible/inventory/example.
ALL_NODES = "token_resource_nodes"
WORKER = "worker-1.example.com"
GPU_NODE = "gpu-1.example.com"
WRITE_CONFIG = "Write /etc/token-resource.toml (validated by token-resource check first)"
INSTALL_FILE = "Install the package file with apt"
RELOAD = "Reload token-resource"
HANDOVER = "Hand over to the new token-resource"
# A floating license of a FlexNet triad, as docs/cluster-pools.md configures one.
TRIAD = "27000@license-1,27000@license-2,27000@license-3"
SOLVER = {
    "count": 20,
    "advertise": "dra",
    "scope": "cluster",
    "probe": {"flexlm": TRIAD, "feature": "solver"},
}
# Starts the kubelet stand-in (which imports the agent's package) once the .deb is installed.
KUBELET_PATH_UNIT = """\
[Unit]
Description=start the kubelet stand-in once token-resource's Python package is installed

[Path]
PathExists=/usr/lib/python3/dist-packages/token_resource/protocol/deviceplugin_pb2.py
Unit=kubelet.service

[Install]
WantedBy=multi-user.target
"""


def require_ansible() -> None:
    missing = missing_tools()
    if missing:
        pytest.fail(
            f"{', '.join(missing)} missing in {ansible_venv()}: run `make ansible-venv` "
            "(or set TOKEN_RESOURCE_ANSIBLE_VENV)",
            pytrace=False,
        )


def prepare(node: AgentNode) -> None:
    """A node as Ansible finds it: python3-apt for the apt module, a kubelet to be."""
    node.exec(["apt-get", "install", "-y", "-q", "python3-apt"], timeout=300)
    node.install_kubelet(start=False)
    node.write("/etc/systemd/system/kubelet.path", KUBELET_PATH_UNIT)
    node.systemctl("daemon-reload")
    node.systemctl("enable", "--now", "kubelet.path")


@pytest.fixture(scope="module")
def fleet(
    boot_node: Callable[[], AbstractContextManager[AgentNode]],
    artifacts: Path,
    session_dir: Path,
) -> Iterator[Fleet]:
    require_ansible()
    workdir = session_dir / "ansible"
    workdir.mkdir()
    hosts = Fleet.example_hosts(workdir / "ansible-home")
    assert len(hosts) >= 2, hosts
    with ExitStack() as stack:
        nodes = {host: stack.enter_context(boot_node()) for host in hosts}
        with ThreadPoolExecutor(len(nodes)) as pool:
            list(pool.map(prepare, nodes.values()))
        fleet = Fleet(nodes, workdir)
        # The .deb built from this tree, for every host (instead of the example's pinned
        # repository version).
        fleet.set_vars(
            "group_vars",
            ALL_NODES,
            {"token_resource_package_file": str(artifacts / "token-resource.deb")},
        )
        yield fleet


def snapshot(fleet: Fleet) -> dict[str, dict[str, Any]]:
    """What must not change when a run is refused or only checks: file, process, reloads."""
    return {
        host: {
            "config": node.read(CONFIG),
            "pid": node.main_pid(),
            "reloads": systemd_reloads(node),
            "status": node.exec(["token-resource", "status"]).stdout,
        }
        for host, node in fleet.nodes.items()
    }


def systemd_reloads(node: AgentNode) -> int:
    """How often the agent was asked to reload (`token-resource reload`: by hand, by the
    role's handler or by `systemctl reload`): its journal's lines of such reloads."""
    lines = node.exec(["journalctl", "-b", "--no-pager", "-o", "cat", "-u", UNIT]).stdout
    return sum("reload (reload command)" in line for line in lines.splitlines())


def assert_serves(fleet: Fleet, expected: dict[str, dict[str, int]]) -> None:
    for host, node in fleet.nodes.items():
        status = node.exec(["token-resource", "status"]).stdout
        for name, count in expected[host].items():
            assert f"{name}={count}" in status, (host, status)
        node.wait_for_counts(expected[host])


def test_run_helpers_parse_the_default_callback() -> None:
    stdout = (
        "PLAY [p] ***\n\nTASK [token_resource : Reload token-resource] ****\n"
        "changed: [h1]\nok: [h2]\n\nPLAY RECAP ****\n"
        "h1                         : ok=3    changed=1    unreachable=0    failed=0    "
        "skipped=2    rescued=0    ignored=0   \n"
    )
    run = PlaybookRun(["ansible-playbook"], 0, stdout, "")
    assert run.ran("h1", RELOAD, "changed")
    assert run.ran("h2", RELOAD, "ok")
    assert not run.ran("h2", RELOAD, "changed")
    assert run.recap["h1"]["changed"] == 1


def test_ansible_lint_production_profile() -> None:
    require_ansible()
    # Offline (.ansible-lint says so): Galaxy cannot be reached, and nothing needs it.
    with tempfile.TemporaryDirectory(prefix="ansible-lint-") as home:
        result = subprocess.run(
            [str(ansible_venv() / "bin/ansible-lint")],
            cwd=ANSIBLE_DIR,
            env=ansible_env(Path(home)),
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "Profile 'production' was required, and it passed" in output, output


def test_first_run_installs_and_each_host_serves_its_counts(fleet: Fleet) -> None:
    expected = fleet.expected_counts()
    # The example gives groups (and one host) different resources.
    assert len({json.dumps(counts, sort_keys=True) for counts in expected.values()}) > 1
    run = fleet.playbook()
    assert run.returncode == 0, str(run)
    # Batches: a canary host first, then the rest in more than one step.
    assert run.stdout.count("PLAY [Roll token-resource out in batches") >= 2, str(run)
    for host, node in fleet.nodes.items():
        assert run.ran(host, INSTALL_FILE, "changed"), str(run)
        assert run.ran(host, WRITE_CONFIG, "changed"), str(run)
        assert node.systemctl("is-enabled", UNIT).stdout.strip() == "enabled"
        assert node.systemctl("is-active", UNIT).stdout.strip() == "active"
        assert "Managed by Ansible" in node.read(CONFIG)
    assert_serves(fleet, expected)
    for host, node in fleet.nodes.items():
        # The agent started with the host's file: the kubelet never saw the packaged example.
        view = node.kubelet_view()
        assert view is not None
        assert set(view["resources"]) == set(expected[host]), (host, view)


def test_second_run_changes_nothing(fleet: Fleet) -> None:
    before = snapshot(fleet)
    run = fleet.playbook()
    assert run.returncode == 0, str(run)
    assert {host: stats["changed"] for host, stats in run.recap.items()} == dict.fromkeys(
        fleet.nodes, 0
    ), str(run)
    assert snapshot(fleet) == before


def test_check_diff_shows_a_change_and_changes_nothing(fleet: Fleet) -> None:
    original = fleet.read_vars("group_vars", "gpu_nodes")
    resources = fleet.hostvars()[GPU_NODE]["token_resource_resources"]
    token = resources["example.com/token"]
    before = snapshot(fleet)
    try:
        fleet.set_vars(
            "group_vars",
            "gpu_nodes",
            {"token_resource_resources": {**resources, "example.com/token": token + 2}},
        )
        run = fleet.playbook("--check", "--diff")
    finally:
        fleet.restore_vars("group_vars", "gpu_nodes", original)
    assert run.returncode == 0, str(run)
    assert f'-"example.com/token" = {token}\n' in run.stdout, str(run)
    assert f'+"example.com/token" = {token + 2}\n' in run.stdout, str(run)
    assert run.ran(GPU_NODE, WRITE_CONFIG, "changed"), str(run)
    assert run.changed(WORKER) == 0, str(run)
    assert snapshot(fleet) == before


def test_count_change_for_one_group_reloads_only_its_hosts(fleet: Fleet) -> None:
    old = fleet.expected_counts()
    before = snapshot(fleet)
    count = old[WORKER]["example.com/token"] + 1
    fleet.set_vars(
        "group_vars", "workers", {"token_resource_resources": {"example.com/token": count}}
    )
    new = fleet.expected_counts()
    changed = {host for host in fleet.nodes if new[host] != old[host]}
    # worker-2 has its own token_resource_resources (host_vars): the group's change skips it.
    assert changed == {WORKER}, new
    run = fleet.playbook()
    assert run.returncode == 0, str(run)
    after = snapshot(fleet)
    for host in fleet.nodes:
        assert after[host]["pid"] == before[host]["pid"], host  # reloaded, never restarted
        assert not run.ran(host, HANDOVER), str(run)
        if host in changed:
            assert run.ran(host, RELOAD, "changed"), str(run)
            assert after[host]["reloads"] == before[host]["reloads"] + 1, host
            assert f'"example.com/token" = {count}\n' in after[host]["config"]
        else:
            assert run.changed(host) == 0, str(run)
            assert after[host] == before[host], host
    assert_serves(fleet, new)
    # The inventory keeps the new count: the following tests expect what it says.


@pytest.mark.parametrize(
    ("group_vars", "reason"),
    [
        pytest.param(
            {"token_resource_resources": {"example.com/token": -1}},
            "the count must be an integer from 0 to 100000, got -1",
            id="negative-count",
        ),
        pytest.param(
            {"token_resource_resources": {"example.com/token": 100001}},
            "the count must be an integer from 0 to 100000, got 100001",
            id="count-too-large",
        ),
        pytest.param(
            {"token_resource_resources": {"Example.com/token": 1}},
            'the domain "Example.com" is not a DNS subdomain',
            id="bad-resource-name",
        ),
        pytest.param(
            {"token_resource_resources": {"kubernetes.io/token": 1}},
            "kubernetes.io names are native resources",
            id="reserved-domain",
        ),
        pytest.param(
            {"token_resource_resources": {"example.com/token": 1}, "token_resource_state": "gone"},
            "value of token_resource_state must be one of: present, absent, got: gone",
            id="argument-spec-choices",
        ),
        pytest.param(
            {
                "token_resource_resources": {"example.com/token": 1},
                "token_resource_agent": {"device_plugins": "/var/lib/kubelet"},
            },
            "token_resource_agent.device_plugins. Supported parameters include: device_plugin_dir",
            id="argument-spec-unknown-option",
        ),
    ],
)
def test_invalid_input_is_refused_before_any_host_changes(
    fleet: Fleet, group_vars: dict[str, Any], reason: str
) -> None:
    original = fleet.read_vars("group_vars", "gpu_nodes")
    before = snapshot(fleet)
    try:
        fleet.set_vars("group_vars", "gpu_nodes", group_vars)
        run = fleet.playbook()
    finally:
        fleet.restore_vars("group_vars", "gpu_nodes", original)
    assert run.returncode != 0, str(run)
    assert reason in run.stdout, str(run)
    # Refused in the first play, for every host: the rollout never started.
    assert "PLAY [Roll token-resource out in batches" not in run.stdout, str(run)
    assert snapshot(fleet) == before


def test_file_refused_by_the_validator_stops_the_rollout(fleet: Fleet) -> None:
    before = snapshot(fleet)
    # Valid one by one, so only `token-resource check` on the host can refuse it.
    shared = {"count": 1, "env": "SHARED_TOKENS"}
    run = fleet.playbook(
        extra_vars={
            "token_resource_resources": {"example.com/one": shared, "example.com/two": shared}
        }
    )
    assert run.returncode != 0, str(run)
    assert "is also the env of resource" in run.stdout, str(run)
    failed = [host for host, stats in run.recap.items() if stats["failed"]]
    assert len(failed) == 1, str(run)  # the canary; max_fail_percentage stopped the rest
    assert [host for host in fleet.nodes if run.ran(host, WRITE_CONFIG)] == failed, str(run)
    assert snapshot(fleet) == before


def installed_version(node: AgentNode) -> str:
    return node.exec(["dpkg-query", "-W", "-f=${Version}", "token-resource"]).stdout


def test_package_upgrade_hands_over_and_rollback_restores(fleet: Fleet, artifacts: Path) -> None:
    expected = fleet.expected_counts()
    original = fleet.read_vars("group_vars", ALL_NODES)
    before = snapshot(fleet)
    versions = {host: installed_version(node) for host, node in fleet.nodes.items()}
    fleet.set_vars(
        "group_vars",
        ALL_NODES,
        {"token_resource_package_file": str(artifacts / "token-resource-upgrade.deb")},
    )
    run = fleet.playbook()
    assert run.returncode == 0, str(run)
    upgraded = snapshot(fleet)
    for host, node in fleet.nodes.items():
        assert run.ran(host, HANDOVER, "changed"), str(run)
        assert not run.ran(host, RELOAD), str(run)
        assert installed_version(node) != versions[host]
        assert upgraded[host]["pid"] != before[host]["pid"], host
        assert upgraded[host]["config"] == before[host]["config"], host
    assert_serves(fleet, expected)
    # Roll back: the previous package file again.
    fleet.restore_vars("group_vars", ALL_NODES, original)
    run = fleet.playbook()
    assert run.returncode == 0, str(run)
    for host, node in fleet.nodes.items():
        assert run.ran(host, HANDOVER, "changed"), str(run)
        assert installed_version(node) == versions[host]
        assert node.main_pid() != upgraded[host]["pid"], host
    assert_serves(fleet, expected)


def test_state_absent_removes_package_and_config(fleet: Fleet) -> None:
    run = fleet.playbook(extra_vars={"token_resource_state": "absent"})
    assert run.returncode == 0, str(run)
    for host, node in fleet.nodes.items():
        status = node.exec(
            ["dpkg-query", "-W", "-f=${db:Status-Abbrev}", "token-resource"], check=False
        ).stdout
        assert status.strip() in ("", "un"), (host, status)
        for path in (CONFIG, UNIT_FILE, "/var/cache/token-resource-ansible"):
            assert node.exec(["test", "-e", path], check=False).returncode != 0, (host, path)
        assert node.agent_sockets() == [], host
        node.wait_for_view(
            lambda view: all(r["allocatable"] == 0 for r in view["resources"].values()),
            f"the kubelet on {host} to see every resource go",
        )
    again = fleet.playbook(extra_vars={"token_resource_state": "absent"})
    assert again.returncode == 0, str(again)
    assert all(stats["changed"] == 0 for stats in again.recap.values()), str(again)


def test_the_role_adds_the_repository_and_installs_from_it_by_name(
    fleet: Fleet, artifacts: Path
) -> None:
    """After the removal: the role given the repository's URL and key (and no package file)
    adds the repository `make repo` builds (packaging/repo/publish; bound into the hosts at
    /srv/test) and installs token-resource by name from it; removing takes the repository
    away too. The hosts cannot reach Debian's mirror: they keep its package lists, from which
    the package's dependencies come (their files in the apt cache)."""
    repository = Repository(artifacts, "repository")  # bound into the hosts at /srv/test
    repository.publish(harness.DEFAULT_SUITE, artifacts / "token-resource.deb")
    for node in fleet.nodes.values():
        node.sh(
            "mv /etc/apt/sources.list /etc/apt/sources.list.unreachable && "
            "echo 'APT::Get::List-Cleanup \"false\";' > /etc/apt/apt.conf.d/90keep-lists"
        )
    from_repository = {
        "token_resource_package_file": "",
        "token_resource_repository_url": "file:/srv/test/repository",
        "token_resource_repository_key": str(repository.armored_key),
    }
    run = fleet.playbook(extra_vars=from_repository)
    assert run.returncode == 0, str(run)
    deb_version = harness.deb_version(artifacts / "token-resource.deb")
    for host, node in fleet.nodes.items():
        assert run.ran(host, "Add the repository for apt", "changed"), str(run)
        assert not run.ran(host, INSTALL_FILE, "changed"), str(run)
        assert installed_version(node) == deb_version, host
        policy = node.exec(["apt-cache", "policy", "token-resource"]).stdout
        assert "file:/srv/test/repository" in policy, (host, policy)
    assert_serves(fleet, fleet.expected_counts())

    # A cluster pool counted by a flexlm probe, from the role's variables: the hosts' own
    # `token-resource check` validates the file before it replaces the old one, and their
    # agents take it (a new [dra] is read at start: a handover). No kubelet registers a DRA
    # driver here, so the role checks the status without registrations.
    pooled = {
        **from_repository,
        "token_resource_resources": {"example.com/token": 3, "example.com/solver": SOLVER},
        "token_resource_dra": {"driver": "tokens.example.com"},
        "token_resource_verify_registered": False,
    }
    run = fleet.playbook(extra_vars=pooled)
    assert run.returncode == 0, str(run)
    for host, node in fleet.nodes.items():
        assert run.ran(host, WRITE_CONFIG, "changed"), str(run)
        check = node.exec(["token-resource", "check"]).stdout
        assert f"probe: flexlm {TRIAD} feature solver" in check, (host, check)
        assert "cluster-wide: 20 token(s)" in check, (host, check)
        status = json.loads(node.exec(["token-resource", "status", "--json"]).stdout)
        served = {entry["name"]: entry for entry in status["resources"]}
        assert served["example.com/solver"]["advertise"] == "dra", (host, served)
        node.wait_for_counts({"example.com/token": 3})
    run = fleet.playbook(extra_vars={**from_repository, "token_resource_state": "absent"})
    assert run.returncode == 0, str(run)
    for host, node in fleet.nodes.items():
        for path in ("/etc/apt/sources.list.d/token-resource.sources",
                     "/etc/apt/keyrings/token-resource.asc"):  # fmt: skip
            assert node.exec(["test", "-e", path], check=False).returncode != 0, (host, path)
