"""DRA as the DaemonSet runs it: the pod's ServiceAccount token, bound to the pod on its node,
with exactly the RBAC rules and the admission policy of deploy/kubernetes/overlays/dra, and the
Node's name from $NODE_NAME. In-process (the service account's directory is a fixed path the
test points elsewhere), against the API-server stand-in."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml

from tests.standin.apiserver import ApiServerStandin, ApiServerView, CertificateAuthority
from tests.standin.apiserver.admission import policy_documents
from tests.standin.apiserver.authz import Rule
from token_resource.apiserver.connection import credentials
from token_resource.apiserver.connection.client import ApiClient, ApiError, KubeError
from token_resource.apiserver.connection.credentials import load_credentials
from token_resource.apiserver.keeping.node_slices import PoolWanted, SlicePublisher
from token_resource.apiserver.objects.claims import read_claim
from token_resource.apiserver.objects.slices import pool_name
from token_resource.config.model import KubernetesSettings

REPO = Path(__file__).resolve().parents[2]
OVERLAY = REPO / "deploy" / "kubernetes" / "overlays" / "dra"
# The base's ClusterRole (read Nodes) and the overlay's (slices, claims), both bound to the
# DaemonSet's ServiceAccount.
RBAC = (REPO / "deploy" / "kubernetes" / "base" / "agent" / "rbac.yaml", OVERLAY / "rbac.yaml")
ADMISSION = OVERLAY / "admission.yaml"
ACCOUNT = "system:serviceaccount:token-resource:token-resource"
NODE = "node-a"
DRIVER = "tokens.example.com"
IN_CLUSTER = KubernetesSettings(in_cluster=True)


def overlay_rules() -> list[Rule]:
    """The ClusterRoles the DaemonSet's ServiceAccount is bound to, as RBAC rules."""
    roles = [
        item
        for path in RBAC
        for item in yaml.safe_load_all(path.read_text())
        if item["kind"] == "ClusterRole"
    ]
    assert len(roles) == len(RBAC)
    return [
        Rule(tuple(rule["apiGroups"]), tuple(rule["resources"]), tuple(rule["verbs"]))
        for role in roles
        for rule in role["rules"]
    ]


@pytest.fixture
def apiserver(ca: CertificateAuthority) -> Iterator[ApiServerStandin]:
    with ApiServerStandin(ca, nodes=(NODE, "node-b")) as standin:
        standin.add_token("pod-token", user=ACCOUNT, rules=overlay_rules(), node=NODE)
        standin.apply_admission_policies(policy_documents(ADMISSION))
        yield standin


@pytest.fixture
def in_pod(apiserver: ApiServerStandin, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The pod's view: its token and CA mounted, the API server's address and its Node's name
    in the environment, as the overlay's DaemonSet gives them."""
    environment = apiserver.write_service_account(tmp_path / "sa", "pod-token")
    monkeypatch.setattr(credentials, "SERVICE_ACCOUNT_DIR", tmp_path / "sa")
    for name, value in {**environment, "NODE_NAME": NODE}.items():
        monkeypatch.setenv(name, value)


def published(count: int) -> Callable[[ApiServerView], bool]:
    def holds(view: ApiServerView) -> bool:
        pool = view.pools(NODE, DRIVER).get(pool_name(NODE, "example.com/token"))
        return pool is not None and pool.complete and len(pool.devices) == count

    return holds


@pytest.mark.usefixtures("in_pod")
def test_the_overlays_account_publishes_its_nodes_slices(apiserver: ApiServerStandin) -> None:
    async def scenario() -> None:
        publisher = SlicePublisher(IN_CLUSTER, DRIVER, lambda: None)
        publisher.apply(IN_CLUSTER, DRIVER, {"example.com/token": PoolWanted(3)})
        try:
            deadline = time.monotonic() + 30
            # The publisher calls it accepted once it has read the API server's answer, a
            # moment after the stand-in stored the slices.
            while not (
                published(3)(apiserver.snapshot())
                and publisher.publisher_state().state == "accepted"
            ):
                assert time.monotonic() < deadline, publisher.publisher_state()
                await asyncio.sleep(0.05)
            assert publisher.publisher_state().node == NODE
        finally:
            await publisher.close()

    asyncio.run(scenario())
    writes = [r for r in apiserver.snapshot().requests if r.method in ("POST", "PUT", "GET")]
    assert writes
    assert {r.identity for r in writes} == {ACCOUNT}


@pytest.mark.usefixtures("in_pod")
def test_the_overlays_account_reads_the_claims_it_prepares(apiserver: ApiServerStandin) -> None:
    pool = pool_name(NODE, "example.com/token")
    claim = apiserver.allocate_claim(
        "apps", "web-tokens", pod="web", node=NODE, driver=DRIVER, results=[("r", pool, "token-2")]
    )
    with ApiClient(load_credentials(IN_CLUSTER)) as client:
        read = read_claim(client, "apps", "web-tokens", claim["metadata"]["uid"], DRIVER)
    assert [(device.pool, device.device) for device in read.devices] == [(pool, "token-2")]
    assert read.pods == ("web",)


def test_without_the_overlays_rules_the_account_is_refused(
    apiserver: ApiServerStandin, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The same account with no role bound: 403, named as the API server names it.
    apiserver.add_token("bare-token", user=ACCOUNT, rules=[])
    environment = apiserver.write_service_account(tmp_path / "sa", "bare-token")
    monkeypatch.setattr(credentials, "SERVICE_ACCOUNT_DIR", tmp_path / "sa")
    for name, value in {**environment, "NODE_NAME": NODE}.items():
        monkeypatch.setenv(name, value)
    with ApiClient(load_credentials(IN_CLUSTER)) as client, pytest.raises(KubeError, match="403"):
        client.get("/apis/resource.k8s.io/v1/resourceslices?fieldSelector=spec.nodeName%3Dnode-a")


@pytest.mark.usefixtures("in_pod")
def test_the_overlays_account_may_not_write_another_nodes_slice() -> None:
    """The overlay's admission policy, as the API server enforces it: 422, not RBAC's 403."""
    body = {
        "metadata": {"name": "elsewhere"},
        "spec": {
            "driver": DRIVER,
            "nodeName": "node-b",
            "pool": {"name": "node-b", "resourceSliceCount": 1},
        },
    }
    with ApiClient(load_credentials(IN_CLUSTER)) as client, pytest.raises(ApiError) as refused:
        client.create("/apis/resource.k8s.io/v1/resourceslices", body)
    assert refused.value.status == 422
    assert str(refused.value).endswith(
        f"the agent on node {NODE} may only write the ResourceSlices of its own node, not of node-b"
    )
