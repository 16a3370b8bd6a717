"""Removing the .deb while pods hold DRA claims: the prerm names them, an upgrade does not.

Without its driver the kubelet cannot unprepare a claim, so such a pod, once deleted, stays
Terminating until a driver of that name runs on the node again. The agent here has a claim
it prepared on record (its prepared.json, as the agent itself writes it) and an API server
that is not there, which status and the driver's start do not need.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path

import pytest

from tests.standin.apiserver.certificates import CertificateAuthority
from tests.standin.apiserver.server import ApiServerStandin
from tests.system import harness
from tests.system.node import CONFIG, UNIT, AgentNode, kubelet_unit, wait_for
from token_resource.dra.prepared import PreparedClaim, PreparedClaims, PreparedDevice

NODE = "node-a"
DRIVER = "tokens.example.com"
RESOURCE = "example.com/dratoken"
CONFIG_TEXT = f"""
[resources."{RESOURCE}"]
count = 2
advertise = "dra"

[dra]
driver = "{DRIVER}"

[kubernetes]
node_name = "{NODE}"
"""
DRIVER_DIR = f"/var/lib/kubelet/plugins/{DRIVER}"
CLAIM = PreparedClaim(
    namespace="default",
    name="web-1-tokens",
    uid="8ec1876b-170f-42d6-8eed-6a902ceca2ec",
    pods=("web-1",),
    devices=(
        PreparedDevice(
            request="container-0-request-0-0",
            pool=f"{NODE}/{RESOURCE}",
            device="token-1",
            resource=RESOURCE,
            env="TOKEN_RESOURCE_EXAMPLE_COM_DRATOKEN",
            cdi_device_ids=(f"{DRIVER}/claim=8ec1876b-170f-42d6-8eed-6a902ceca2ec-0",),
        ),
    ),
)
LISTED = "default/web-1 (claim web-1-tokens)"
WARNING = "these pods hold DRA claims"
# As the upgrade and purge tests: on every suite.
pytestmark = pytest.mark.suites(*harness.SUITES)


def prepared_record(tmp_path: Path) -> str:
    """prepared.json holding CLAIM, written by the agent's own code."""
    claims = PreparedClaims(tmp_path / "driver")
    claims.add(CLAIM)
    return (tmp_path / "driver/prepared.json").read_text()


@pytest.fixture(scope="module")
def node(
    boot_node: Callable[[], AbstractContextManager[AgentNode]],
    ca: CertificateAuthority,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[AgentNode]:
    scratch = tmp_path_factory.mktemp("removal")
    with boot_node() as node:
        node.write(
            "/etc/systemd/system/kubelet.service",
            kubelet_unit("--plugins-registry-dir", "/var/lib/kubelet/plugins_registry"),
        )
        node.systemctl("daemon-reload")
        # The kubeconfig is YAML: DRA resources need python3-yaml (Suggests:).
        node.exec(
            ["apt-get", "install", "-y", "-q", "/srv/test/token-resource.deb", "python3-yaml"],
            timeout=300,
        )
        # After the package, which brings the stand-in's grpc.
        node.systemctl("enable", "--now", "kubelet.service")
        absent = ApiServerStandin(ca, port=9)
        kubeconfig = absent.write_kubeconfig(
            scratch / "kubelet.conf", identity=ca.node_certificate(NODE)
        )
        node.write("/etc/kubernetes/kubelet.conf", kubeconfig.read_text())
        node.write(CONFIG, CONFIG_TEXT)
        node.write(f"{DRIVER_DIR}/prepared.json", prepared_record(scratch))
        node.systemctl("restart", UNIT)
        yield node


def listed_claims(node: AgentNode) -> str | None:
    result = node.exec(["token-resource", "status", "--prepared-claims"], check=False)
    return result.stdout if result.returncode == 0 and result.stdout else None


def test_an_upgrade_says_nothing_of_the_prepared_claims(node: AgentNode) -> None:
    assert wait_for(lambda: listed_claims(node), 30, "the agent to list its claim") == (
        f"{LISTED}\n"
    )
    upgrade = node.exec(
        ["apt-get", "install", "-y", "-q", "/srv/test/token-resource-upgrade.deb"], timeout=300
    )
    assert WARNING not in upgrade.stdout + upgrade.stderr, upgrade.stdout + upgrade.stderr
    assert node.show("ActiveState") == "active"
    assert wait_for(lambda: listed_claims(node), 30, "the upgraded agent to list it") == (
        f"{LISTED}\n"
    )


def test_removal_names_the_pods_and_goes_on(node: AgentNode) -> None:
    removal = node.exec(["apt-get", "remove", "-y", "-q", "token-resource"], timeout=300)
    # apt-get passes on what the maintainer scripts print, stderr included, on its stdout.
    output = removal.stdout + removal.stderr
    assert WARNING in output, output
    assert f"\n  {LISTED}\n" in output, output
    assert "stays Terminating" in output, output
    status = node.exec(["dpkg-query", "-W", "-f=${db:Status-Abbrev}", "token-resource"]).stdout
    assert status.strip() == "rc", status
    assert node.exec(["pgrep", "-f", "token-resource run"], check=False).returncode != 0
    # What a reinstall needs to release the claim stays: the record and the conffile.
    assert json.loads(node.read(f"{DRIVER_DIR}/prepared.json"))["claims"].keys() == {CLAIM.uid}
    assert node.read(CONFIG) == CONFIG_TEXT


def test_removal_without_a_running_agent_says_nothing(node: AgentNode) -> None:
    node.exec(["apt-get", "install", "-y", "-q", "/srv/test/token-resource.deb"], timeout=300)
    wait_for(lambda: listed_claims(node), 30, "the reinstalled agent to list its claim")
    node.systemctl("stop", UNIT)
    removal = node.exec(["apt-get", "remove", "-y", "-q", "token-resource"], timeout=300)
    assert "token-resource:" not in removal.stdout + removal.stderr, removal
