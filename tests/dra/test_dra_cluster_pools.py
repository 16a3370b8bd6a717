"""A node's agent and a cluster-scoped DRA resource (`scope = "cluster"`): the real agent
against the kubelet and API-server stand-ins. The node publishes its own pools only, never the
cluster pool (that is the elected publisher's, here written by an admin as it would be), and
prepares the claims the scheduler allocated from the cluster pool as those of its own pools:
the CDI spec carries the resource's variable, a restart changes nothing, unprepare removes it.
A claim of a pool the agent does not serve is refused with the pool, the driver and the pools
it does serve."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.apiserver.test_slice_publisher import cluster_slice
from tests.dra.node import (
    DRIVER,
    NODE,
    POOL,
    TIMEOUT,
    claim_id,
    config,
    dra_resource,
    kubeconfig_of,
    pool_of,
    registered,
    start_driver,
    status_json,
)
from tests.harness import AgentProcess
from tests.standin.apiserver import ApiServerStandin, ApiServerView, CertificateAuthority
from tests.standin.cdi import CdiRuntime
from tests.standin.kubelet import KubeletStandin
from token_resource.apiserver.connection.client import ApiClient
from token_resource.apiserver.connection.credentials import load_credentials
from token_resource.apiserver.objects.slices import SLICES_PATH, cluster_pool_name, pool_name
from token_resource.config.model import KubernetesSettings

SEAT = "example.com/seat"
SEAT_POOL = cluster_pool_name(SEAT)
SEAT_ENV = "TOKEN_RESOURCE_EXAMPLE_COM_SEAT"
SEATS = 2
REQUEST = "container-0-request-0-0"
ADMIN = "admin-token"


@pytest.fixture
def apiserver(ca: CertificateAuthority) -> Iterator[ApiServerStandin]:
    with ApiServerStandin(ca, nodes=(NODE, "node-b"), tokens={ADMIN: True}) as standin:
        yield standin


def cluster_resource(count: int = SEATS) -> str:
    return dra_resource(count, SEAT) + 'scope = "cluster"\n'


@pytest.fixture
def serving(
    dra_agent: AgentProcess,
    dirs: dict[str, Path],
    apiserver: ApiServerStandin,
    kubelet: KubeletStandin,
    tmp_path: Path,
) -> AgentProcess:
    """The node's agent with a node pool of 4 tokens and the cluster's 2 seats, and the
    cluster pool on the API server, as the elected publisher keeps it."""
    resources = dra_resource(4) + cluster_resource()
    start_driver(dra_agent, dirs, apiserver, kubelet, tmp_path, resources)
    apiserver.wait_for(pool_of(4), timeout=TIMEOUT)
    admin = KubernetesSettings(
        kubeconfig=apiserver.write_kubeconfig(tmp_path / "admin.conf", token=ADMIN)
    )
    with ApiClient(load_credentials(admin)) as client:
        client.create(SLICES_PATH, cluster_slice(DRIVER, SEAT, SEATS))
    return dra_agent


def allocate_seat(apiserver: ApiServerStandin, pod: str, *seats: str) -> dict[str, Any]:
    """The scheduler's part: a claim for ``pod`` on the node, allocated from the cluster pool."""
    results = [(REQUEST, SEAT_POOL, seat) for seat in seats]
    return apiserver.allocate_claim(
        "default", f"{pod}-seats", pod=pod, node=NODE, driver=DRIVER, results=results
    )


def only_the_node_pool(view: ApiServerView) -> bool:
    """The driver's slices are exactly the node's pool of 4, whoever else writes."""
    pools = {item["spec"]["pool"]["name"] for item in view.slices_of(driver=DRIVER)}
    return pool_of(4)(view) and pools - {SEAT_POOL} == {POOL}


def test_a_node_agent_publishes_its_node_pools_and_no_cluster_pool(
    dra_agent: AgentProcess,
    dirs: dict[str, Path],
    apiserver: ApiServerStandin,
    kubelet: KubeletStandin,
    tmp_path: Path,
) -> None:
    kubeconfig = kubeconfig_of(apiserver, tmp_path)
    # The seats were the node's own at first: a pool of the node's.
    dra_agent.write_config(config(dirs, kubeconfig, dra_resource(4) + dra_resource(SEATS, SEAT)))
    dra_agent.start()
    kubelet.wait_for(registered, timeout=TIMEOUT)
    own_seats = pool_name(NODE, SEAT)
    apiserver.wait_for(lambda view: own_seats in view.pools(NODE, DRIVER), timeout=TIMEOUT)
    # Made the cluster's: the node's pool of them goes, its other pool stays, and no slice
    # of the cluster pool, nor any without the node's name, is written by the node.
    dra_agent.write_config(config(dirs, kubeconfig, dra_resource(4) + cluster_resource()))
    view = apiserver.wait_for(
        lambda view: own_seats not in view.pools(NODE, DRIVER), timeout=TIMEOUT
    )
    assert only_the_node_pool(view)
    assert view.pools(NODE, DRIVER)[POOL].generation == 1
    assert all(item["spec"].get("nodeName") == NODE for item in view.slices_of(driver=DRIVER))
    assert status_json(dra_agent)["dra"]["slices_state"] == "accepted"
    # A node whose only DRA resource is the cluster's still serves the driver (the kubelet
    # calls it for the pods it runs) and publishes nothing at all.
    dra_agent.write_config(config(dirs, kubeconfig, cluster_resource()))
    apiserver.wait_for(lambda view: not view.slices_of(driver=DRIVER), timeout=TIMEOUT)
    assert dra_agent.stop() == 0
    dra_agent.start()
    kubelet.wait_for(registered, timeout=TIMEOUT)
    report = status_json(dra_agent)
    assert (report["dra"]["registered"], report["dra"]["slices_state"]) == (True, "accepted")
    assert not apiserver.snapshot().slices_of(driver=DRIVER)


def test_a_claim_of_the_cluster_pool_is_prepared_as_a_node_pools_and_unprepared(
    serving: AgentProcess,
    kubelet: KubeletStandin,
    apiserver: ApiServerStandin,
    dirs: dict[str, Path],
) -> None:
    claim = allocate_seat(apiserver, "app", "token-1")
    # Allocated from a slice for every node: the claim names no node.
    assert "nodeSelector" not in claim["status"]["allocation"]
    namespace, uid, name = claim_id(claim)
    result = kubelet.prepare(DRIVER, [(namespace, uid, name)])
    assert result.error is None
    cdi_id = f"{DRIVER}/claim={uid}-0"
    assert result.claims[uid].devices == (((REQUEST,), SEAT_POOL, "token-1", (cdi_id,)),)
    assert CdiRuntime([dirs["cdi"]]).environment([cdi_id]) == {SEAT_ENV: "token-1"}
    # Restarted (an upgrade), its spec lost (a reboot): answered from the record, the spec back.
    assert serving.stop() == 0
    spec = dirs["cdi"] / f"{DRIVER}-{uid}.json"
    spec.unlink()
    serving.start()
    kubelet.wait_for(registered, timeout=TIMEOUT)
    assert kubelet.prepare(DRIVER, [(namespace, uid, name)]).claims == result.claims
    assert CdiRuntime([dirs["cdi"]]).environment([cdi_id]) == {SEAT_ENV: "token-1"}
    report = status_json(serving)
    assert report["dra"]["claims"] == [{"namespace": namespace, "name": name, "pods": ["app"]}]
    # The seat's resource, with this node's holder; its count is the cluster's.
    (seat,) = [resource for resource in report["resources"] if resource["name"] == SEAT]
    assert [holder["device_ids"] for holder in seat["holders"]] == [["token-1"]]
    assert seat["slices"] is None
    done = kubelet.unprepare(DRIVER, [(namespace, uid, name)])
    assert (done.error, done.claims[uid].error) == (None, "")
    assert not spec.exists()
    assert status_json(serving)["dra"]["claims"] == []
    # Still only the node's own pool on the API server besides the publisher's.
    assert only_the_node_pool(apiserver.snapshot())


def test_claims_of_pools_the_agent_does_not_serve_name_the_pool_and_the_ones_it_serves(
    serving: AgentProcess, kubelet: KubeletStandin, apiserver: ApiServerStandin
) -> None:
    other = claim_id(
        apiserver.allocate_claim(
            "default",
            "other",
            pod="other",
            node=NODE,
            driver=DRIVER,
            results=[(REQUEST, "example.com/other", "token-0")],
        )
    )
    beyond = claim_id(allocate_seat(apiserver, "beyond", f"token-{SEATS}"))
    result = kubelet.prepare(DRIVER, [other, beyond])
    assert result.claims[other[1]].error == (
        f'claim default/other: pool "example.com/other" of driver "{DRIVER}" is not served by '
        f'this agent (its pools: "{SEAT_POOL}", "{POOL}"; is its resource configured for DRA '
        "here?)"
    )
    # The cluster pool's tokens are the resource's count, as a node pool's.
    assert result.claims[beyond[1]].error == (
        f"claim default/beyond-seats: token-{SEATS} is not one of the {SEATS} token(s) of {SEAT}"
    )
