"""The installed .deb under a real systemd: readiness, reload, watchdog, kubelet restarts.

One container per suite for the module (booting and installing cost ~15 s); each test leaves
the agent running the shipped configuration for the next one, and the module's tests run in
file order. Every test runs on Debian 12 (systemd 252); those marked BOTH also run on Debian 13
(systemd 257, Python 3.13): install, start, reload with a valid and an invalid file, the
watchdog restart, and the unit's checks by that systemd.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import pytest

from tests.standin.apiserver.certificates import CertificateAuthority
from tests.standin.apiserver.server import ApiServerStandin
from tests.system import harness
from tests.system.node import (
    CONFIG,
    KUBELET_UNIT,
    UNIT,
    UNIT_FILE,
    AgentNode,
    kubelet_unit,
    wait_for,
)

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

REPO = Path(__file__).resolve().parents[2]
PYTHON_LIBRARIES = ("python3-grpcio", "python3-protobuf", "python3-sdnotify", "python3-watchdog")


def shipped_counts() -> dict[str, int]:
    resources = tomllib.loads((REPO / "etc/token-resource.toml").read_text())["resources"]
    return {
        name: value if isinstance(value, int) else value["count"]
        for name, value in resources.items()
    }


SHIPPED = shipped_counts()
TOKEN = "example.com/token"
BROKEN = '[resources]\n"example.com/token" = -1\n'
BROKEN_REASON = 'key resources."example.com/token"'
BOTH = pytest.mark.suites(*harness.SUITES)
MAX_EXPOSURE = 1.5


@pytest.fixture(scope="module")
def node(boot_node: Callable[[], AbstractContextManager[AgentNode]]) -> Iterator[AgentNode]:
    with boot_node() as node:
        # The stand-in imports grpc and token_resource, which the .deb brings: its unit is
        # enabled now and started after the install, so the agent also proves it waits for a
        # kubelet that comes up after it.
        node.install_kubelet(start=False)
        node.install_output = node.exec(  # type: ignore[attr-defined]
            ["apt-get", "install", "-y", "-q", "/srv/test/token-resource.deb"], timeout=300
        ).stdout
        node.systemctl("start", "kubelet.service")
        yield node


def put_back_the_shipped_config(node: AgentNode) -> None:
    node.exec(
        [
            "sh",
            "-c",
            f"dpkg-deb --fsys-tarfile /srv/test/token-resource.deb | tar -xO .{CONFIG} > {CONFIG}",
        ]
    )


@pytest.fixture
def shipped_config_after(node: AgentNode) -> Iterator[None]:
    """Put the shipped configuration back after the test and wait until it is served."""
    yield
    put_back_the_shipped_config(node)
    if node.show("ActiveState") != "active":
        node.systemctl("start", UNIT)
    node.systemctl("reload", UNIT)
    node.wait_for_counts(SHIPPED)


@BOTH
def test_install_pulls_debian_python_libraries(node: AgentNode) -> None:
    installed = node.install_output  # type: ignore[attr-defined]
    # Installed by apt as the .deb's dependencies (the rootfs only has them downloaded).
    automatic = node.exec(["apt-mark", "showauto"]).stdout.split()
    for package in PYTHON_LIBRARIES:
        assert package in automatic, f"{package} not pulled in:\n{installed}"
        status = node.exec(["dpkg-query", "-W", "-f=${Status} ${Version}", package]).stdout
        assert status.startswith("install ok installed"), status
    # Debian's libraries and the package's code, all in Debian's dist-packages; no virtualenv.
    where = node.exec(
        [
            "python3",
            "-c",
            "import grpc, google.protobuf, token_resource; "
            "print(grpc.__file__, google.protobuf.__file__, token_resource.__file__)",
        ]
    ).stdout.split()
    assert all(path.startswith("/usr/lib/python3/dist-packages/") for path in where), where
    files = node.exec(["dpkg", "-L", "token-resource"]).stdout
    assert "pyvenv.cfg" not in files, files
    assert "site-packages" not in files, files
    shebang = node.exec(["head", "-1", "/usr/bin/token-resource"]).stdout.strip()
    assert shebang == "#!/usr/bin/python3"
    version = node.exec(["dpkg-query", "-W", "-f=${Version}", "token-resource"]).stdout
    assert node.exec(["token-resource", "--version"]).stdout.split() == ["token-resource", version]
    # Where both Debian 12 and Debian 13 (merged /usr) expect units; nothing under /lib.
    assert UNIT_FILE in files.splitlines(), files
    assert not [line for line in files.splitlines() if line.startswith("/lib/")], files
    # (systemd 252 still names it /lib/systemd/system/..., the same file on merged /usr.)


@BOTH
def test_unit_enabled_active_and_kubelet_sees_every_resource(node: AgentNode) -> None:
    assert node.systemctl("is-enabled", UNIT).stdout.strip() == "enabled"
    assert node.systemctl("is-active", UNIT).stdout.strip() == "active"
    view = node.wait_for_counts(SHIPPED)
    for name, resource in view["resources"].items():
        assert resource["endpoint"] == f"token-resource/{name.replace('/', '_')}.sock"
    assert not view["rejected"], view["rejected"]


def test_ordered_before_kubelet_without_depending_on_it(node: AgentNode) -> None:
    # As systemd has loaded the unit: ready before the kubelet starts (tests/system/
    # test_reboot.py shows it at boot), never pulling it in or taking it down.
    assert "kubelet.service" in node.show("Before").split()
    assert "kubelet.service" not in node.show("After").split()
    assert "token-resource.service" in node.show("After", "kubelet.service").split()
    for prop in ("Requires", "Requisite", "BindsTo", "PartOf", "Wants", "Conflicts"):
        assert "kubelet.service" not in node.show(prop).split(), prop
    # A hung start holds the kubelet back by 15 s at most, not systemd's default 90 s.
    assert node.show("TimeoutStartUSec") == "15s"
    # The kubelet stopping does not take the agent down with it.
    node.systemctl("stop", "kubelet.service")
    try:
        assert node.show("ActiveState") == "active"
    finally:
        node.systemctl("start", "kubelet.service")
    node.wait_for_counts(SHIPPED)


@BOTH
def test_start_returns_after_ready_and_status_shows_the_agents_status(node: AgentNode) -> None:
    node.systemctl("stop", UNIT)
    assert node.show("ActiveState") == "inactive"
    node.systemctl("start", UNIT)
    # Type=notify: by the time `systemctl start` returns, READY=1 has come, so the agent is
    # serving: running, with its control socket answering and its STATUS= published.
    assert (node.show("ActiveState"), node.show("SubState")) == ("active", "running")
    answer = node.exec(["token-resource", "status"]).stdout
    status_text = node.show("StatusText")
    assert f"{TOKEN}={SHIPPED[TOKEN]}" in status_text, status_text
    status = node.systemctl("status", "--no-pager", "--lines=0", UNIT).stdout
    assert f'Status: "{status_text}"' in status, status
    assert f"{TOKEN}={SHIPPED[TOKEN]}" in answer, answer
    node.wait_for_counts(SHIPPED)


def test_broken_file_fails_the_start_with_its_reason(
    node: AgentNode, shipped_config_after: None
) -> None:
    node.systemctl("stop", UNIT)
    node.write(CONFIG, BROKEN)
    result = node.systemctl("start", UNIT, check=False)
    assert result.returncode != 0
    assert BROKEN_REASON in node.unit_journal()
    # Restart= keeps trying (every RestartSec, never giving up).
    assert node.show("ActiveState") in ("activating", "failed")
    status = node.systemctl("status", "--no-pager", UNIT, check=False).stdout
    assert "ExecStartPre=/usr/bin/token-resource check (code=exited, status=1" in status, status


def test_status_shows_why_a_broken_file_keeps_the_agent_down(
    node: AgentNode, shipped_config_after: None
) -> None:
    node.systemctl("stop", UNIT)
    node.write(CONFIG, BROKEN)
    node.systemctl("start", UNIT, check=False)
    # While a unit waits to restart, systemd 252's `systemctl status` shows no log lines;
    # `token-resource check` puts the reason into STATUS= instead (NotifyAccess=exec).
    status = node.systemctl("status", "--no-pager", UNIT, check=False).stdout
    assert BROKEN_REASON in status, status


@BOTH
def test_edit_applies_live_with_the_same_process(
    node: AgentNode, shipped_config_after: None
) -> None:
    pid = node.main_pid()
    changed = {**SHIPPED, TOKEN: SHIPPED[TOKEN] + 1}
    node.write_config(changed)
    node.wait_for_counts(changed)
    assert node.main_pid() == pid


@BOTH
def test_systemctl_reload_applies_a_valid_file_before_returning(
    node: AgentNode, shipped_config_after: None
) -> None:
    pid = node.main_pid()
    changed = {**SHIPPED, TOKEN: SHIPPED[TOKEN] + 2, "example.com/extra": 3}
    node.write_config(changed)
    node.systemctl("reload", UNIT)
    # Applied when reload returns: the agent already serves the new counts.
    status = node.exec(["token-resource", "status"]).stdout
    for name, count in changed.items():
        assert f"{name}={count}" in status, status
    assert node.show("ActiveState") == "active"
    node.wait_for_counts(changed, timeout=10)
    assert node.main_pid() == pid


@BOTH
def test_systemctl_reload_rejects_an_invalid_file_and_keeps_serving(
    node: AgentNode, shipped_config_after: None
) -> None:
    pid = node.main_pid()
    node.write(CONFIG, '[resources]\n"example.com/token" = "many"\n')
    result = node.systemctl("reload", UNIT, check=False)
    assert result.returncode != 0, result.stdout + result.stderr
    # systemctl points at the unit's status; the reason is there and in the journal.
    status = node.systemctl("status", "--no-pager", "--lines=20", UNIT, check=False).stdout
    assert "example.com/token" in status, status
    assert node.show("ActiveState") == "active"
    assert node.main_pid() == pid
    node.wait_for_counts(SHIPPED, timeout=5)
    assert "rejected" in node.show("StatusText")


def test_errors_reach_the_journal_at_priority_err(
    node: AgentNode, shipped_config_after: None
) -> None:
    # A key no other test uses, so that only this test's lines match.
    reason = 'key resources."example.com/priority"'
    node.write(CONFIG, '[resources]\n"example.com/priority" = -7\n')
    assert node.systemctl("reload", UNIT, check=False).returncode != 0
    node.systemctl("stop", UNIT)
    assert node.systemctl("start", UNIT, check=False).returncode != 0

    errors = node.exec(
        ["journalctl", "-b", "--no-pager", "-o", "cat", "-p", "err", "-u", UNIT]
    ).stdout.splitlines()
    ours = [line for line in errors if reason in line and CONFIG in line]
    # The running agent's log line, what `token-resource reload` (ExecReload=) answered, and
    # `token-resource check` (ExecStartPre=) at the failed start: not only systemd's verdict.
    assert any(
        line.startswith("ERROR token_resource.agent: reload (") and " rejected" in line
        for line in ours
    ), errors
    assert any(line.startswith("token-resource reload: ") for line in ours), errors
    assert any(line.startswith("token-resource: invalid configuration: ") for line in ours), errors

    entries = node.exec(["journalctl", "-b", "--no-pager", "-o", "json", "-u", UNIT]).stdout
    messages = [
        (entry["PRIORITY"], str(entry.get("MESSAGE", "")))
        for entry in map(json.loads, entries.splitlines())
    ]
    ready = {
        priority for priority, message in messages if "token_resource.agent: ready: " in message
    }
    assert ready == {"6"}, messages  # info lines stay info
    assert {priority for priority, message in messages if reason in message} == {"3"}, messages
    # journald took off the prefix it read: no line shows it.
    assert not [message for _, message in messages if re.match(r"<\d>", message)], messages


def test_kubelet_restart_is_followed_by_registration(node: AgentNode) -> None:
    before = node.wait_for_counts(SHIPPED)
    # In-process restart: every file in the directory but the checkpoint is wiped, and
    # kubelet.sock is new.
    node.systemctl("reload", "kubelet.service")
    node.wait_for_counts(SHIPPED, min_generation=before["generation"] + 1)
    assert set(node.agent_sockets()) == {
        f"token-resource/{name.replace('/', '_')}.sock" for name in SHIPPED
    }
    # A new kubelet process (its state file starts empty).
    node.systemctl("stop", "kubelet.service")
    node.exec(["rm", "-f", "/run/kubelet-standin/state.json"])
    node.systemctl("start", "kubelet.service")
    node.wait_for_counts(SHIPPED, min_registrations=1)


@BOTH
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
    registrations = {name: before["resources"][name]["registrations"] + 1 for name in SHIPPED}
    view = node.wait_for_view(
        lambda v: all(
            v["resources"][n]["registrations"] >= registrations[n]
            and v["resources"][n]["allocatable"] == SHIPPED[n]
            for n in SHIPPED
        ),
        "the restarted agent to register every resource again",
    )
    assert view["resources"]
    assert node.main_pid() == new_pid


@BOTH
def test_systemd_analyze_verify_is_silent(node: AgentNode) -> None:
    result = node.exec(["systemd-analyze", "verify", "--man=no", UNIT_FILE], check=False)
    assert (result.returncode, result.stdout + result.stderr) == (0, "")


@BOTH
def test_systemd_analyze_security_exposure_is_within_target(node: AgentNode) -> None:
    # The installed unit as this suite's systemd rates it (252 on Debian 12, 257 on Debian 13;
    # tests/system/test_unit_static.py rates the tree's unit with the host's).
    version = node.exec(["systemctl", "--version"]).stdout.split()[1]
    result = node.exec(
        ["systemd-analyze", "security", "--offline=yes", "--no-pager", UNIT_FILE], check=False
    )
    match = re.search(
        r"Overall exposure level for token-resource\.service: (\d+\.\d+)", result.stdout
    )
    assert match, result.stdout + result.stderr
    exposure = float(match.group(1))
    print(f"systemd {version}: systemd-analyze security --offline=yes: exposure {exposure}")
    assert exposure <= MAX_EXPOSURE, result.stdout


DRA_DRIVER = "tokens.example.com"
DRA_RESOURCE = "example.com/dratoken"
DRA_CONFIG = f"""
[resources]
"{TOKEN}" = 2

[resources."{DRA_RESOURCE}"]
count = 3
advertise = "dra"

[dra]
driver = "{DRA_DRIVER}"

[kubernetes]
node_name = "node-a"
"""
KUBELET_DIR = "/var/lib/kubelet"
KUBECONFIG = "/etc/kubernetes/kubelet.conf"


@pytest.fixture
def dra_node(node: AgentNode, ca: CertificateAuthority, tmp_path: Path) -> Iterator[AgentNode]:
    """The node with the kubelet's plugin watcher and the kubelet's kubeconfig, naming an API
    server that is not there: the driver registers with the kubelet all the same, and would
    publish its slices once one answered. Everything is put back afterwards."""
    # The kubeconfig is YAML: node-status and DRA resources need python3-yaml (Suggests:).
    node.exec(["apt-get", "install", "-y", "-q", "--no-download", "python3-yaml"], timeout=300)
    absent = ApiServerStandin(ca, port=9)
    kubeconfig = absent.write_kubeconfig(
        tmp_path / "kubelet.conf", identity=ca.node_certificate("node-a")
    )
    node.write(KUBECONFIG, kubeconfig.read_text())
    registry = f"{KUBELET_DIR}/plugins_registry"
    node.write(
        "/etc/systemd/system/kubelet.service",
        kubelet_unit("--plugins-registry-dir", registry, "--node", "node-a"),
    )
    node.systemctl("daemon-reload")
    node.systemctl("restart", "kubelet.service")
    try:
        yield node
    finally:
        node.write("/etc/systemd/system/kubelet.service", KUBELET_UNIT)
        node.systemctl("daemon-reload")
        node.systemctl("restart", "kubelet.service")
        node.exec(["rm", "-rf", "/etc/kubernetes"])
        put_back_the_shipped_config(node)
        # The DRA driver, once started, runs until the agent stops.
        node.systemctl("restart", UNIT)
        node.wait_for_counts(SHIPPED)


@BOTH
def test_a_dra_driver_serves_from_inside_the_units_sandbox(dra_node: AgentNode) -> None:
    node = dra_node
    node.write(CONFIG, DRA_CONFIG)
    # A [dra] table takes a restart. It fails (read-only file system) where the unit lets the
    # agent write only in the device-plugin directory.
    node.systemctl("restart", UNIT)

    def driver_registered(view: dict[str, Any]) -> bool:
        plugins = view.get("dra", {}).get("drivers", {}).get(DRA_DRIVER, {}).get("plugins", [])
        return bool(plugins) and plugins[-1]["connected"]

    view = node.wait_for_view(driver_registered, f"the kubelet to register {DRA_DRIVER}")
    plugin = view["dra"]["drivers"][DRA_DRIVER]["plugins"][-1]
    assert plugin["version"] == "v1.DRAPlugin", plugin
    # The sockets of this start (dra.registration.socket_paths): dra-<start>.sock and
    # <driver>-<start>-reg.sock.
    service = plugin["endpoint"]
    start = re.fullmatch(rf"{KUBELET_DIR}/plugins/{DRA_DRIVER}/dra-([0-9a-f]{{8}})\.sock", service)
    assert start is not None, plugin
    registration = f"{KUBELET_DIR}/plugins_registry/{DRA_DRIVER}-{start.group(1)}-reg.sock"
    for socket in (service, registration):
        assert node.exec(["test", "-S", socket], check=False).returncode == 0, socket

    def dra_status() -> dict[str, Any] | None:
        status = json.loads(node.exec(["token-resource", "status", "--json"]).stdout)
        # No API server here: the slices cannot be published (yet).
        return status["dra"] if status["dra"]["slices_state"] == "failing" else None

    dra = wait_for(dra_status, 30, "status to say why the slices are not published")
    assert dra["registered"] is True, dra
    assert "API server https://127.0.0.1:9 unreachable" in (dra["slices_error"] or ""), dra
    # Where a prepare writes (the claims' CDI specs, prepared.json beside the service socket)
    # is writable in the agent's own mount namespace, and the rest of /var/lib is not.
    pid = str(node.main_pid())
    for directory in ("/run/cdi", f"{KUBELET_DIR}/plugins/{DRA_DRIVER}"):
        probe = f"{directory}/.probe"
        node.exec(["nsenter", "-t", pid, "-m", "--", "sh", "-c", f"echo > {probe} && rm {probe}"])
    denied = node.exec(
        ["nsenter", "-t", pid, "-m", "--", "sh", "-c", "echo > /var/lib/.probe"], check=False
    )
    assert denied.returncode != 0, denied
    assert "Read-only file system" in denied.stderr, denied


def test_stop_leaves_no_sockets(node: AgentNode) -> None:
    node.wait_for_counts(SHIPPED)
    assert node.agent_sockets()
    node.systemctl("stop", UNIT)
    assert node.agent_sockets() == []
    assert node.exec(["test", "-e", "/run/token-resource/control.sock"], check=False).returncode
    assert "kubelet.sock" in node.plugin_dir()
    # The kubelet notices: every stream ends, nothing allocatable is left.
    node.wait_for_view(
        lambda v: all(r["allocatable"] == 0 for r in v["resources"].values()),
        "the kubelet to see every resource go",
    )
    node.systemctl("start", UNIT)
    node.wait_for_counts(SHIPPED)
