"""Node-status mode: the real agent and ``node-status`` command against an API server stand-in.

The stand-in (tests/standin/apiserver/) speaks HTTPS with certificates made here, applies
JSON patches with a real RFC 6902 implementation and authorizes like the Node authorizer.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.harness import AGENT_USER_AGENT, AgentProcess
from tests.standin.apiserver import ApiServerStandin, ApiServerView, CertificateAuthority
from tests.standin.kubelet import KubeletStandin
from token_resource.apiserver.connection import credentials as credentials_module
from token_resource.apiserver.connection.client import ApiError, KubeError
from token_resource.apiserver.connection.credentials import load_credentials
from token_resource.apiserver.keeping.node_capacity import sync_node
from token_resource.apiserver.objects.node import (
    OWNED_ANNOTATION,
    NodeClient,
    Ownership,
    capacity_path,
    quantity_value,
)
from token_resource.config.model import KubernetesSettings

NODE = "node-a"
DONGLE = "example.com/dongle"
SEAT = "acme/seat"
OTHER_TOOLS = "other.example/gpu"  # an extended resource the agent never listed
OWNED = OWNED_ANNOTATION


@pytest.fixture
def apiserver() -> Iterator[ApiServerStandin]:
    with ApiServerStandin(nodes=(NODE, "node-b")) as server:
        yield server


@pytest.fixture
def kubeconfig(apiserver: ApiServerStandin, tmp_path: Path) -> Path:
    """The kubelet's kind of kubeconfig: node identity, certificates inline."""
    return apiserver.write_kubeconfig(
        tmp_path / "kubelet.conf", identity=apiserver.ca.node_certificate(NODE)
    )


def kubernetes_table(kubeconfig: Path, node: str = NODE) -> str:
    return f'[kubernetes]\nkubeconfig = "{kubeconfig}"\nnode_name = "{node}"\nresync_seconds = 1\n'


def resources(token: int = 2, dongle: int | None = 4) -> str:
    text = f'[resources]\n"example.com/token" = {token}\n'
    if dongle is not None:
        text += f'[resources."{DONGLE}"]\ncount = {dongle}\nadvertise = "node-status"\n'
    return text


def holds(node: str, **expected: str | None) -> Callable[[ApiServerView], bool]:
    """A predicate: the Node's capacity AND allocatable hold these extended resources."""
    wanted = {name.replace("__", "/").replace("_", "."): v for name, v in expected.items()}

    def check(view: ApiServerView) -> bool:
        return all(
            view.capacity(node).get(name) == value and view.allocatable(node).get(name) == value
            for name, value in wanted.items()
        )

    check.__qualname__ = f"node {node} holds {wanted}"
    return check


def dongle_is(value: str | None) -> Callable[[ApiServerView], bool]:
    return holds(NODE, example_com__dongle=value)


def owned(view: ApiServerView, node: str = NODE) -> str | None:
    """The agent's annotation on the Node: the names it lists, or None."""
    return view.annotations(node).get(OWNED)


def status_patches(view: ApiServerView) -> list[Any]:
    return [patch.json() for patch in view.patches(NODE) if patch.path.endswith("/status")]


def seat_table(count: int = 2) -> str:
    return f'[resources."{SEAT}"]\ncount = {count}\nadvertise = "node-status"\n'


def test_the_whole_life_of_a_node_status_resource(
    agent: AgentProcess, kubelet: KubeletStandin, apiserver: ApiServerStandin, kubeconfig: Path
) -> None:
    agent.write_config(kubernetes_table(kubeconfig) + resources(dongle=4))
    agent.start()
    apiserver.wait_for(dongle_is("4"))
    kubelet.wait_for(lambda view: view.counts() == {"example.com/token": 2})
    agent.notify.wait_for(
        lambda lines: any(f"node status of {NODE}: accepted" in line for line in lines)
    )
    view = apiserver.snapshot()
    # Named as client-go's clients name themselves: the version, then the OS and Go's arch name.
    (agent_name,) = {request.user_agent for request in view.requests}
    assert AGENT_USER_AGENT.fullmatch(agent_name or ""), agent_name
    # The name is listed on the Node first, then its capacity added.
    assert [patch.path for patch in view.patches(NODE)] == [
        f"/api/v1/nodes/{NODE}",
        f"/api/v1/nodes/{NODE}/status",
    ]
    assert all(patch.content_type == "application/json-patch+json" for patch in view.patches())
    assert view.patches(NODE)[0].json()[-1] == {
        "op": "add",
        "path": "/metadata/annotations",
        "value": {OWNED: DONGLE},
    }
    assert status_patches(view) == [
        [{"op": "add", "path": "/status/capacity/example.com~1dongle", "value": "4"}]
    ]

    agent.write_config(kubernetes_table(kubeconfig) + resources(dongle=1000))
    apiserver.wait_for(dongle_is("1k"))

    apiserver.reset_capacity(NODE)
    apiserver.wait_for(dongle_is("1k"))
    # "1k" is 1000: stored canonically, it is not patched again and again. Wait for three
    # more resyncs (one a second) and count the patches.
    patches, requests = len(apiserver.snapshot().patches(NODE)), len(apiserver.requests)
    apiserver.wait_for(lambda view: len(view.requests) >= requests + 3)
    assert len(apiserver.snapshot().patches(NODE)) == patches

    agent.write_config(kubernetes_table(kubeconfig) + resources(token=3, dongle=None))
    view = apiserver.wait_for(lambda view: DONGLE not in view.capacity(NODE) and not owned(view))
    assert status_patches(view)[-1] == [
        {"op": "remove", "path": "/status/capacity/example.com~1dongle"}
    ]
    kubelet_view = kubelet.wait_for(lambda view: view.counts() == {"example.com/token": 3})
    # Device-plugin resources were never disturbed by any of this.
    assert kubelet_view.resources["example.com/token"].registrations == 1


def test_stopping_the_agent_leaves_the_capacity(
    agent: AgentProcess, apiserver: ApiServerStandin, kubeconfig: Path
) -> None:
    agent.write_config(kubernetes_table(kubeconfig) + resources(dongle=4))
    agent.start()
    apiserver.wait_for(dongle_is("4"))
    assert agent.stop() == 0
    assert apiserver.snapshot().capacity(NODE)[DONGLE] == "4"
    assert apiserver.snapshot().patches(NODE)[-1].json()[0]["op"] == "add"


def test_a_resource_removed_while_the_agent_was_stopped_goes_at_its_next_start(
    agent: AgentProcess, apiserver: ApiServerStandin, kubeconfig: Path
) -> None:
    agent.write_config(kubernetes_table(kubeconfig) + resources(dongle=4) + seat_table())
    agent.start()
    apiserver.wait_for(lambda view: owned(view) == f"{SEAT},{DONGLE}")
    apiserver.wait_for(holds(NODE, example_com__dongle="4", acme__seat="2"))
    apiserver.set_capacity(NODE, OTHER_TOOLS, "1")
    assert agent.stop() == 0

    agent.write_config(kubernetes_table(kubeconfig) + resources(dongle=None) + seat_table())
    agent.start()
    view = apiserver.wait_for(lambda view: DONGLE not in view.capacity(NODE))
    view = apiserver.wait_for(lambda view: owned(view) == SEAT)
    assert view.extended(NODE) == {SEAT: "2", OTHER_TOOLS: "1"}
    assert agent.stop() == 0

    # The last node-status resource gone while stopped: the [kubernetes] table is enough
    # for the agent to look.
    agent.write_config(kubernetes_table(kubeconfig) + resources(dongle=None))
    agent.start()
    view = apiserver.wait_for(lambda view: SEAT not in view.capacity(NODE) and not owned(view))
    assert OWNED not in view.annotations(NODE)
    assert view.extended(NODE) == view.extended(NODE, "allocatable") == {OTHER_TOOLS: "1"}
    # Nothing left to advertise, and done: the status line no longer mentions the Node.
    agent.notify.wait_for(lambda lines: "node status" not in lines[-1])


def test_a_crash_between_the_two_writes_leaves_nothing_untracked(
    apiserver: ApiServerStandin, kubeconfig: Path
) -> None:
    """The annotation (metadata) and the capacity (status) take two requests: a sync that
    dies after the first leaves at most a listed name without capacity, never the reverse."""
    settings = KubernetesSettings(kubeconfig=kubeconfig, node_name=NODE)
    metadata, status = f"/api/v1/nodes/{NODE}", f"/api/v1/nodes/{NODE}/status"
    apiserver.set_capacity(NODE, OTHER_TOOLS, "1")

    apiserver.fail_requests("PATCH", status)
    with pytest.raises(KubeError, match="500"):
        sync_node(settings, {DONGLE: 4})
    view = apiserver.snapshot()
    assert (owned(view), view.extended(NODE)) == (DONGLE, {OTHER_TOOLS: "1"})
    apiserver.stop_failing()
    # Taken out of the configuration meanwhile: only the name has to go.
    patches = len(view.patches(NODE))
    sync_node(settings, {})
    view = apiserver.snapshot()
    assert (owned(view), view.extended(NODE)) == (None, {OTHER_TOOLS: "1"})
    assert [patch.path for patch in view.patches(NODE)[patches:]] == [metadata]

    sync_node(settings, {DONGLE: 4})
    apiserver.fail_requests("PATCH", metadata)
    with pytest.raises(KubeError, match="500"):
        sync_node(settings, {})
    view = apiserver.snapshot()
    assert (owned(view), view.extended(NODE)) == (DONGLE, {OTHER_TOOLS: "1"})
    apiserver.stop_failing()
    sync_node(settings, {})
    view = apiserver.snapshot()
    assert (owned(view), view.extended(NODE)) == (None, {OTHER_TOOLS: "1"})


def test_the_annotation_changes_only_as_it_was_read(
    apiserver: ApiServerStandin, kubeconfig: Path, request: pytest.FixtureRequest
) -> None:
    """Two writers of the list: the one that read an older Node is refused, not obeyed."""
    client = NodeClient(load_credentials(KubernetesSettings(kubeconfig=kubeconfig)))
    request.addfinalizer(client.close)
    absent = Ownership.of(client.get_node(NODE))
    assert absent.names == frozenset()
    assert absent.value is None
    client.list_as_owned(NODE, absent, frozenset({DONGLE}))
    # Its resourceVersion is stale now.
    with pytest.raises(KubeError, match=f"{OWNED} changed after it was read"):
        client.list_as_owned(NODE, absent, frozenset({SEAT}))
    listed = Ownership.of(client.get_node(NODE))
    assert listed.names == {DONGLE}
    client.list_as_owned(NODE, listed, frozenset({DONGLE, SEAT}))
    # The value it tests is stale now.
    with pytest.raises(KubeError, match=r"another writer\?\): 422"):
        client.list_as_owned(NODE, listed, frozenset())
    assert owned(apiserver.snapshot()) == f"{SEAT},{DONGLE}"
    # Any other refusal is passed on as it is.
    with pytest.raises(ApiError) as refused:
        client.list_as_owned("node-b", listed, frozenset())
    assert refused.value.status == 403


@pytest.mark.parametrize(
    ("value", "names"),
    [
        (f"{SEAT},{DONGLE}", {SEAT, DONGLE}),
        (f" {DONGLE} ,,", {DONGLE}),
        # Never a native resource, whatever is written there.
        (f"cpu,memory,kubernetes.io/x,{DONGLE}", {DONGLE}),
        ("", set()),
    ],
)
def test_only_extended_resources_are_read_from_the_annotation(value: str, names: set[str]) -> None:
    node = {"metadata": {"annotations": {OWNED: value}, "resourceVersion": "7"}}
    assert Ownership.of(node).names == names


def test_api_server_down_at_start_then_up(
    agent: AgentProcess, kubelet: KubeletStandin, apiserver: ApiServerStandin, kubeconfig: Path
) -> None:
    apiserver.stop()
    agent.write_config(kubernetes_table(kubeconfig) + resources(dongle=4))
    agent.start()
    # The device plugin does not wait for the API server.
    kubelet.wait_for(lambda view: view.counts() == {"example.com/token": 2})
    agent.notify.wait_for(
        lambda lines: any("failing (API server" in line and "unreachable" in line for line in lines)
    )
    apiserver.start()
    apiserver.wait_for(dongle_is("4"), timeout=30)
    agent.notify.wait_for(lambda lines: "accepted" in lines[-1])


@pytest.mark.parametrize(
    ("node", "identity_node", "reason"),
    [("node-b", NODE, "403 Forbidden"), ("node-z", "node-z", "404 Not Found")],
    ids=["other-node", "unknown-node"],
)
def test_refusals_are_reported_and_retried(
    agent: AgentProcess,
    apiserver: ApiServerStandin,
    tmp_path: Path,
    node: str,
    identity_node: str,
    reason: str,
) -> None:
    kubeconfig = apiserver.write_kubeconfig(
        tmp_path / "kubelet.conf", identity=apiserver.ca.node_certificate(identity_node)
    )
    agent.write_config(kubernetes_table(kubeconfig, node) + resources(dongle=4))
    agent.start()
    agent.notify.wait_for(lambda lines: any(reason in line for line in lines))
    assert f"node status not applied, retrying in 1 s and later: {reason}" in agent.wait_for_log(
        reason
    )
    if node == "node-z":
        apiserver.add_node("node-z")
        apiserver.wait_for(holds("node-z", example_com__dongle="4"), timeout=30)


def test_a_server_the_kubeconfig_does_not_trust_is_refused(
    agent: AgentProcess, apiserver: ApiServerStandin, tmp_path: Path
) -> None:
    kubeconfig = apiserver.write_kubeconfig(
        tmp_path / "kubelet.conf",
        identity=apiserver.ca.node_certificate(NODE),
        ca=CertificateAuthority("some-other-ca"),
    )
    agent.write_config(kubernetes_table(kubeconfig) + resources(dongle=4))
    agent.start()
    agent.notify.wait_for(lambda lines: any("CERTIFICATE_VERIFY_FAILED" in line for line in lines))
    assert not apiserver.snapshot().patches()


def node_status_command(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "token_resource", "node-status", "--config", str(config), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_node_status_command(apiserver: ApiServerStandin, kubeconfig: Path, tmp_path: Path) -> None:
    config = tmp_path / "token-resource.toml"
    config.write_text(kubernetes_table(kubeconfig))
    result = node_status_command(config, "set", f"{DONGLE}=4", "acme/seat=2")
    assert result.returncode == 0, result.stderr
    view = apiserver.wait_for(holds(NODE, example_com__dongle="4", acme__seat="2"))
    assert view.patches(NODE)[-1].json() == [
        {"op": "add", "path": "/status/capacity/example.com~1dongle", "value": "4"},
        {"op": "add", "path": "/status/capacity/acme~1seat", "value": "2"},
    ]
    # As if the agent advertised the dongle: it lists it on the Node.
    sync_node(KubernetesSettings(kubeconfig=kubeconfig, node_name=NODE), {DONGLE: 4})
    show = node_status_command(config, "show")
    assert show.stdout.splitlines() == [
        f"node {NODE}: 2 extended resource(s)",
        "  acme/seat: capacity 2, allocatable 2",
        f"  {DONGLE}: capacity 4, allocatable 4, the agent's ({OWNED})",
    ]
    assert node_status_command(config, "remove", "acme/seat").returncode == 0
    view = apiserver.wait_for(lambda view: "acme/seat" not in view.capacity(NODE))
    assert owned(view) == DONGLE
    removed = node_status_command(config, "remove", DONGLE)
    assert removed.stdout.splitlines() == [f"node {NODE}: 0 extended resource(s)"]
    view = apiserver.snapshot()
    assert (owned(view), view.extended(NODE)) == (None, {})
    assert view.patches(NODE)[-2].path.endswith("/status")  # the capacity went first

    missing = node_status_command(config, "remove", "acme/seat")
    assert missing.returncode == 1
    assert "422" in missing.stderr
    other = node_status_command(config, "--node", "node-b", "show")
    assert other.returncode == 1
    assert "403 Forbidden" in other.stderr
    bad = node_status_command(config, "set", "kubernetes.io/x=1")
    assert bad.returncode == 2
    assert "reserved" in bad.stderr


@pytest.mark.parametrize("inline", [True, False], ids=["inline", "files"])
@pytest.mark.parametrize("credential", ["certificate", "token"])
def test_kubeconfig_forms(
    apiserver: ApiServerStandin, tmp_path: Path, inline: bool, credential: str
) -> None:
    apiserver.add_token("secret-token")
    path = apiserver.write_kubeconfig(
        tmp_path / "kubelet.conf",
        identity=apiserver.ca.node_certificate(NODE) if credential == "certificate" else None,
        token="secret-token" if credential == "token" else None,
        inline=inline,
        relative_paths=not inline,
        key_in_cert_file=not inline,
    )
    credentials = load_credentials(KubernetesSettings(kubeconfig=path))
    with NodeClient(credentials) as client:
        node = client.get_node(NODE)
    assert node["metadata"]["name"] == NODE


def test_in_cluster_credentials(
    apiserver: ApiServerStandin, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    apiserver.add_token("pod-token")
    environment = apiserver.write_service_account(tmp_path / "sa", "pod-token")
    monkeypatch.setattr(credentials_module, "SERVICE_ACCOUNT_DIR", tmp_path / "sa")
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    credentials = load_credentials(KubernetesSettings(in_cluster=True))
    with NodeClient(credentials) as client:
        client.patch_node_status(NODE, [{"op": "add", "path": capacity_path(DONGLE), "value": "3"}])
    assert apiserver.snapshot().capacity(NODE)[DONGLE] == "3"


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ("current-context: nowhere\n", "no context named 'nowhere'"),
        ("{", "is not valid YAML"),
        (
            "clusters: [{name: c, cluster: {server: 'http://127.0.0.1:1'}}]\n"
            "contexts: [{name: x, context: {cluster: c, user: u}}]\n"
            "users: [{name: u, user: {}}]\ncurrent-context: x\n",
            "must be an https:// URL",
        ),
        (
            "clusters: [{name: c, cluster:"
            " {server: 'https://h', insecure-skip-tls-verify: true}}]\n"
            "contexts: [{name: x, context: {cluster: c, user: u}}]\n"
            "users: [{name: u, user: {}}]\ncurrent-context: x\n",
            "insecure-skip-tls-verify is refused",
        ),
        (
            "clusters: [{name: c, cluster: {server: 'https://h'}}]\n"
            "contexts: [{name: x, context: {cluster: c, user: u}}]\n"
            "users: [{name: u, user: {exec: {command: aws}}}]\ncurrent-context: x\n",
            "by 'exec' are not supported",
        ),
    ],
)
def test_unusable_kubeconfigs_are_clear_errors(tmp_path: Path, document: str, message: str) -> None:
    path = tmp_path / "kubeconfig"
    path.write_text(document)
    with pytest.raises(KubeError, match=message):
        load_credentials(KubernetesSettings(kubeconfig=path))


@pytest.mark.parametrize(
    ("text", "value"),
    [("4", 4), ("04", 4), ("1k", 1000), ("1000", 1000), ("1Ki", 1024), ("1e3", 1000), ("x", None)],
)
def test_quantities_compare_by_value(text: str, value: int | None) -> None:
    assert quantity_value(text) == value
