"""Health probes under the shipped unit: they run in its sandbox, with the agent's privileges.

One Debian 12 container for the module (the installed .deb, the shipped unit, the kubelet
stand-in: test_deb_service.py's `node` fixture), about 25 s in all. Not marked for Debian 13:
the sandbox is the unit's, and test_deb_service.py already runs that unit on both suites.

- A command probe (SANDBOX_PROBE, written into the node) looks at the sandbox it runs in and
  prints on its first line how many of FACTS hold there; the agent takes that for as many
  healthy tokens. The resource has one token more than there are facts, so the kubelet's
  allocatable is len(FACTS) only if the probe ran inside the unit's sandbox and said so (all
  tokens healthy, had it never run; fewer, had any protection been missing). The same probe
  run by hand with `token-resource check --probe` runs as the caller (root, no sandbox) and
  sees none of them.
- A path probe of a real device node, /dev/net/tun (the only one systemd-nspawn gives its
  containers that is not among PrivateDevices=yes's pseudo devices), finds it missing under
  the shipped unit and present with a PrivateDevices=no drop-in; `check --probe` by hand
  finds it either way.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from tests.system.node import CONFIG, UNIT, AgentNode, wait_for
from tests.system.test_deb_service import node

# The module-scoped container of test_deb_service.py, booted once for this module.
node = node  # noqa: PLW0127

SANDBOX = "example.com/sandbox"
TUN = "example.com/tun"
TUN_NODE = "/dev/net/tun"
SANDBOX_PROBE = "/usr/local/lib/token-resource-tests/sandbox-probe"
# Where the probe writes what it saw: /tmp, which PrivateTmp=yes makes the unit's own.
REPORT = "/tmp/token-resource-sandbox-probe"
# Left by the test where the node's root sees them and the unit must not (PrivateTmp=yes,
# ProtectHome=yes).
MARKERS = ("/tmp/token-resource-tests.marker", "/root/token-resource-tests.marker")
DROP_IN = "/etc/systemd/system/token-resource.service.d/50-devices.conf"

# What the probe checks, each a line "NAME yes|no WHAT-IT-SAW" of its report.
FACTS = (
    "root-alone",  # uid 0, and a user namespace mapping only root to itself (PrivateUsers=yes)
    "no-capabilities",  # CapEff 0 (CapabilityBoundingSet= empty)
    "empty-bounding-set",  # CapBnd 0: none to regain
    "no-new-privileges",  # NoNewPrivs 1 (NoNewPrivileges=yes)
    "etc-read-only",  # a file cannot be created in /etc (ProtectSystem=strict)
    "usr-read-only",  # ... nor in /usr
    "only-pseudo-devices",  # no device node in /dev but the pseudo ones (PrivateDevices=yes)
    "private-tmp",  # the node's /tmp marker is not in its /tmp (PrivateTmp=yes)
    "no-home",  # the node's /root marker is out of reach (ProtectHome=yes)
)


def _filled(text: str, **values: str) -> str:
    for name, value in values.items():
        text = text.replace(name, value)
    return text


PROBE_SCRIPT = _filled(
    r"""#!/bin/sh
# A command probe that reports the sandbox it runs in: a line "NAME yes|no WHAT-IT-SAW" for each
# fact into REPORT and, on its first output line, how many facts hold (the healthy tokens).
held=0
lines=
fact() {
    if [ "$2" = yes ]; then held=$((held + 1)); fi
    lines="$lines$1 $2 $3
"
}
is() { if [ "$1" = "$2" ]; then echo yes; else echo no; fi; }
field() { grep "^$1:" /proc/self/status | cut -f2; }
absent() { if [ -e "$1" ]; then echo no; else echo yes; fi; }
read_only() {
    if said=$(touch "$1/.sandbox-probe" 2>&1); then
        rm -f "$1/.sandbox-probe"
        fact "$2" no "created $1/.sandbox-probe"
    else
        fact "$2" yes "$said"
    fi
}

uid=$(id -u)
map=$(echo $(cat /proc/self/uid_map))
fact root-alone "$(is "$uid/$map" "0/0 0 1")" "uid=$uid uid_map=$map"
fact no-capabilities "$(is "$(field CapEff)" 0000000000000000)" "CapEff=$(field CapEff)"
fact empty-bounding-set "$(is "$(field CapBnd)" 0000000000000000)" "CapBnd=$(field CapBnd)"
fact no-new-privileges "$(is "$(field NoNewPrivs)" 1)" "NoNewPrivs=$(field NoNewPrivs)"
read_only /etc etc-read-only
read_only /usr usr-read-only
nodes=$(echo $(find /dev \( -type c -o -type b \) -print | sort))
pseudo='/dev/(null|zero|full|random|urandom|tty|pts/.*)'
real=$(echo $(echo "$nodes" | tr ' ' '\n' | grep -vxE "$pseudo"))
fact only-pseudo-devices "$(is "$real" "")" "device nodes: $nodes"
fact private-tmp "$(absent MARKER_TMP)" "MARKER_TMP"
fact no-home "$(absent MARKER_HOME)" "MARKER_HOME"

printf '%s' "$lines" > REPORT.new && mv REPORT.new REPORT
echo "$held"
""",
    MARKER_TMP=MARKERS[0],
    MARKER_HOME=MARKERS[1],
    REPORT=REPORT,
)

CONFIG_TEXT = f"""\
# written by tests/system/test_health_sandbox.py
[resources."{SANDBOX}"]
count = {len(FACTS) + 1}
[resources."{SANDBOX}".probe]
command = ["{SANDBOX_PROBE}"]
interval = 1
timeout = 10
failure_threshold = 1

[resources."{TUN}"]
count = 1
[resources."{TUN}".probe]
path = "{TUN_NODE}"
interval = 1
timeout = 5
failure_threshold = 1
"""


@pytest.fixture(scope="module")
def probed(node: AgentNode) -> AgentNode:
    """The node with the probe script, the markers and the two probed resources served."""
    node.write(SANDBOX_PROBE, PROBE_SCRIPT)
    node.exec(["chmod", "0755", SANDBOX_PROBE])
    node.exec(["touch", *MARKERS])
    node.write(CONFIG, CONFIG_TEXT)
    node.systemctl("reload", UNIT)
    return node


def allocatable(view: dict[str, Any], name: str) -> int | None:
    """The kubelet's allocatable for name once its stream is open and has listed the tokens."""
    resource = view["resources"].get(name)
    if resource is None or not resource["stream_open"] or not resource["devices"]:
        return None
    return int(resource["allocatable"])


def wait_for_allocatable(node: AgentNode, wanted: dict[str, int]) -> dict[str, Any]:
    return node.wait_for_view(
        lambda view: all(allocatable(view, name) == count for name, count in wanted.items()),
        f"the kubelet to see allocatable {wanted}",
    )


def resource_status(node: AgentNode, name: str) -> dict[str, Any]:
    status = json.loads(node.exec(["token-resource", "status", "--json"]).stdout)
    [report] = [r for r in status["resources"] if r["name"] == name]
    return report  # type: ignore[no-any-return]


def facts(report: str) -> dict[str, tuple[str, str]]:
    """The probe's report: fact -> (yes or no, what it saw)."""
    seen = {}
    for line in report.splitlines():
        name, held, saw = [*line.split(" ", 2), ""][:3]
        seen[name] = (held, saw)
    assert tuple(seen) == FACTS, report
    return seen


def unit_report(node: AgentNode) -> dict[str, tuple[str, str]]:
    """What the probe last saw, from the unit's own /tmp (through the agent's mount namespace),
    once it has run there."""

    def read() -> str | None:
        pid = str(node.main_pid())
        result = node.exec(["nsenter", "-t", pid, "-m", "--", "cat", REPORT], check=False)
        return result.stdout if result.returncode == 0 and result.stdout else None

    return facts(wait_for(read, 30, f"the probe's report in the unit's {REPORT}"))


def wait_for_journal(node: AgentNode, text: str) -> None:
    """The agent's log line, once journald has it (it may lag behind the kubelet's view)."""
    wait_for(lambda: text in node.unit_journal(), 30, f"{text!r} in the unit's journal", 0.5)


def agent_status(node: AgentNode) -> dict[str, str]:
    text = node.read(f"/proc/{node.main_pid()}/status")
    return dict(re.findall(r"^(\w+):\s*(.*)$", text, re.M))


def checked_once(output: str, target: str) -> str:
    """The `checked once:` line of check --probe after the resource's probe line."""
    match = re.search(rf"    probe: \S+ {re.escape(target)} .*\n    (checked once: .*)", output)
    assert match, output
    return match.group(1)


def test_a_command_probe_runs_in_the_units_sandbox_with_the_agents_privileges(
    probed: AgentNode,
) -> None:
    node = probed
    everything = len(FACTS)
    # Every fact holds in the unit's sandbox; the probe said so, and the kubelet took its word:
    # the token past them is the only one unhealthy.
    seen = unit_report(node)
    assert {name: held for name, (held, _) in seen.items()} == dict.fromkeys(FACTS, "yes"), seen
    wait_for_allocatable(node, {SANDBOX: everything})
    report = resource_status(node, SANDBOX)
    assert report["healthy"] == everything, report
    reason = f"{SANDBOX_PROBE} reports {everything} healthy"
    assert report["health"]["unhealthy"] == [{"token": f"token-{everything}", "reason": reason}]
    assert report["health"]["probe"] == f"command {SANDBOX_PROBE} every 1 s"
    line = f"{SANDBOX}: token-{everything} unhealthy ({everything} of {everything + 1} healthy)"
    wait_for_journal(node, f"{line}: {reason}")
    # The agent's own privileges, which its probe shared.
    agent = agent_status(node)
    assert seen["no-capabilities"][1] == f"CapEff={agent['CapEff']}" == "CapEff=0000000000000000"
    assert seen["no-new-privileges"][1] == f"NoNewPrivs={agent['NoNewPrivs']}" == "NoNewPrivs=1"
    uid_map = " ".join(node.read(f"/proc/{node.main_pid()}/uid_map").split())
    assert seen["root-alone"][1] == f"uid=0 uid_map={uid_map}" == "uid=0 uid_map=0 0 1"
    assert "Read-only file system" in seen["etc-read-only"][1], seen
    # The report went to the unit's private /tmp, not the node's.
    assert node.exec(["test", "-e", REPORT], check=False).returncode != 0

    # By hand, `check --probe` runs the same probe as its caller: root with every capability,
    # outside the sandbox, where none of the facts holds.
    by_hand = node.exec(["token-resource", "check", "--probe"]).stdout
    assert re.fullmatch(
        rf"checked once: failed in [\d.]+ s: {re.escape(SANDBOX_PROBE)} reports 0 healthy; "
        rf"0 of {everything + 1} token\(s\) healthy",
        checked_once(by_hand, SANDBOX_PROBE),
    ), by_hand
    outside = facts(node.read(REPORT))
    assert {name: held for name, (held, _) in outside.items()} == dict.fromkeys(FACTS, "no")
    print("the probe in the unit's sandbox:", *seen.items(), sep="\n  ")
    print("the probe run by hand (check --probe):", *outside.items(), sep="\n  ")


def test_private_devices_hides_a_device_node_from_a_path_probe_until_a_drop_in(
    probed: AgentNode,
) -> None:
    node = probed
    # A real device node (systemd-nspawn's own /dev/net/tun) that the node's root sees.
    assert node.exec(["test", "-c", TUN_NODE], check=False).returncode == 0
    view = wait_for_allocatable(node, {TUN: 0, SANDBOX: len(FACTS)})
    assert view["resources"][TUN]["devices"] == {"token-0": "Unhealthy"}
    report = resource_status(node, TUN)
    assert report["healthy"] == 0, report
    missing = f"{TUN_NODE} does not exist"
    assert report["health"]["unhealthy"] == [{"token": "token-0", "reason": missing}], report
    wait_for_journal(node, f"{TUN}: token-0 unhealthy (0 of 1 healthy): {missing}")
    # check --probe by hand is not in the sandbox: it sees the node.
    by_hand = node.exec(["token-resource", "check", "--probe"]).stdout
    assert re.fullmatch(
        rf"checked once: passed in [\d.]+ s: {re.escape(TUN_NODE)} exists; "
        r"1 of 1 token\(s\) healthy",
        checked_once(by_hand, TUN_NODE),
    ), by_hand

    # What the docs tell operators: a drop-in with PrivateDevices=no, then a restart.
    node.write(DROP_IN, "[Service]\nPrivateDevices=no\n")
    try:
        node.systemctl("daemon-reload")
        node.systemctl("restart", UNIT)
        assert node.show("PrivateDevices") == "no"
        # The device node is there for the probe now; of the sandbox, only /dev opened up.
        wait_for_allocatable(node, {TUN: 1, SANDBOX: len(FACTS) - 1})
        assert resource_status(node, TUN)["healthy"] == 1
        seen = unit_report(node)
        opened = {name for name, (held, _) in seen.items() if held != "yes"}
        assert opened == {"only-pseudo-devices"}, seen
        assert TUN_NODE in seen["only-pseudo-devices"][1].split(), seen
        print("the probe with PrivateDevices=no:", *seen.items(), sep="\n  ")
    finally:
        node.exec(["rm", "-f", DROP_IN])
        node.systemctl("daemon-reload")
        node.systemctl("restart", UNIT)
    wait_for_allocatable(node, {TUN: 0, SANDBOX: len(FACTS)})
