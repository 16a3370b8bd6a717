"""After a node's reboot the DaemonSet's driver registers after the kubelet has tried its pods:
the real agent asks the kubelet (the stand-in's 1.36 pod sync, tests/standin/kubelet_pods.py) to
prepare them at once, by one annotation, instead of at its resync a minute later, whether their
claims come from the node's pool or a cluster pool; with the DRA overlay's own RBAC and
admission policies (deploy/kubernetes), never touching another node's pod or anything else of a
pod."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.apiserver.test_dra_in_cluster import ACCOUNT, ADMISSION, overlay_rules
from tests.dra.node import DRIVER, NODE, TOKEN, config, dra_resource
from tests.harness import AgentProcess
from tests.standin.apiserver import ApiServerStandin, CertificateAuthority
from tests.standin.apiserver.admission import policy_documents
from tests.standin.kubelet import KubeletStandin, KubeletView
from tests.standin.kubelet_pods import FAILED_PREPARE, PodSource
from tests.standin.test_kubelet_dra import access
from token_resource.apiserver.objects.slices import cluster_pool_name, pool_name

# The kubelet's resync in these tests: far shorter than its real minute, far longer than a
# nudge takes, so that which of the two prepared a pod is plain.
SYNC_FREQUENCY = 8.0
TIMEOUT = 30.0
WAITING = "web/waiting"
ELSEWHERE = "web/elsewhere"
# A cluster pool beside the node's own: its claims name no node, and are found from the pods.
SEAT = "example.com/seat"
RESOURCES = dra_resource(2) + dra_resource(2, SEAT) + 'scope = "cluster"\n'


@pytest.fixture
def apiserver(ca: CertificateAuthority) -> Iterator[ApiServerStandin]:
    with ApiServerStandin(ca, nodes=(NODE, "node-b")) as standin:
        standin.apply_admission_policies(policy_documents(ADMISSION))
        yield standin


def allocated_pods(apiserver: ApiServerStandin, resource: str = TOKEN) -> None:
    """An unchanged pod of the node whose claim the scheduler made and allocated from
    ``resource``'s pool (the node's, or the cluster's for SEAT), and one of another node."""
    for pod, node in (("waiting", NODE), ("elsewhere", "node-b")):
        pool = cluster_pool_name(SEAT) if resource == SEAT else pool_name(node, TOKEN)
        apiserver.allocate_claim(
            "web",
            None,
            pod=pod,
            node=node,
            driver=DRIVER,
            results=[("token", pool, "token-0")],
            extended_resource=resource,
        )


def rebooted_node(
    dirs: dict[str, Path],
    apiserver: ApiServerStandin,
    dra_agent: AgentProcess,
    tmp_path: Path,
    *,
    may_patch_pods: bool,
) -> tuple[KubeletStandin, float]:
    """The kubelet up first, its prepare of the pod failed; then the agent, in a pod of the
    DaemonSet (its account's token bound to the node). Returns the kubelet and when the
    failed prepare happened."""
    rules = [rule for rule in overlay_rules() if may_patch_pods or "pods" not in rule.resources]
    apiserver.add_token("agent-token", user=ACCOUNT, rules=rules, node=NODE)
    kubeconfig = apiserver.write_kubeconfig(tmp_path / "agent.conf", token="agent-token")
    kubelet = KubeletStandin(
        dirs["dp"],
        plugins_registry_dir=dirs["reg"],
        node=NODE,
        apiserver=access(apiserver),
        pod_source=PodSource(access(apiserver), sync_frequency=SYNC_FREQUENCY),
    )
    kubelet.start()
    view = kubelet.wait_for(lambda v: bool(v.pod_syncs[WAITING].failed_prepares), TIMEOUT)
    (failed,) = view.pod_syncs[WAITING].failed_prepares
    assert failed.reason == FAILED_PREPARE
    dra_agent.write_config(config(dirs, kubeconfig, RESOURCES))
    dra_agent.start()
    return kubelet, failed.at


def prepared(view: KubeletView) -> bool:
    return view.pod_syncs[WAITING].prepared_at is not None


def without_versions(pod: dict[str, Any]) -> dict[str, Any]:
    metadata = {
        k: v for k, v in pod["metadata"].items() if k not in ("resourceVersion", "annotations")
    }
    return {**pod, "metadata": metadata}


def seconds_to_prepare(kubelet: KubeletStandin) -> float:
    """From the driver's registration to the kubelet's prepare of the waiting pod."""
    view = kubelet.wait_for(prepared, TIMEOUT)
    assert view.dra is not None
    registered_at = view.dra.drivers[DRIVER].registered_at
    prepared_at = view.pod_syncs[WAITING].prepared_at
    assert registered_at is not None
    assert prepared_at is not None
    return prepared_at - registered_at


@pytest.mark.parametrize("resource", [TOKEN, SEAT], ids=["node-pool", "cluster-pool"])
def test_the_pod_is_prepared_at_once_after_the_driver_registers(
    dirs: dict[str, Path],
    apiserver: ApiServerStandin,
    dra_agent: AgentProcess,
    tmp_path: Path,
    resource: str,
) -> None:
    allocated_pods(apiserver, resource)
    before = apiserver.snapshot().pods
    kubelet, _ = rebooted_node(dirs, apiserver, dra_agent, tmp_path, may_patch_pods=True)
    try:
        seconds = seconds_to_prepare(kubelet)
        print(f"prepared {seconds:.2f} s after the driver registered")
        assert seconds < 2.0
        dra_agent.wait_for_log("asked the kubelet to prepare 1 pod(s) it could not while the")
        # One annotation on the node's pod, nothing else of it; the other node's pod untouched.
        after = apiserver.snapshot().pods
        annotations = after[WAITING]["metadata"]["annotations"]
        assert list(annotations) == [f"{DRIVER}/prepare-retry"]
        assert without_versions(after[WAITING]) == without_versions(before[WAITING])
        assert after[ELSEWHERE] == before[ELSEWHERE]
    finally:
        kubelet.stop()


def test_without_the_permission_the_pod_waits_for_the_resync(
    dirs: dict[str, Path], apiserver: ApiServerStandin, dra_agent: AgentProcess, tmp_path: Path
) -> None:
    allocated_pods(apiserver)
    kubelet, failed_at = rebooted_node(dirs, apiserver, dra_agent, tmp_path, may_patch_pods=False)
    try:
        view = kubelet.wait_for(prepared, TIMEOUT)
        prepared_at = view.pod_syncs[WAITING].prepared_at
        assert prepared_at is not None
        assert prepared_at - failed_at >= SYNC_FREQUENCY - 0.1
        dra_agent.wait_for_log("cannot ask the kubelet to retry the prepares")
        assert "annotations" not in apiserver.snapshot().pods[WAITING]["metadata"]
    finally:
        kubelet.stop()


def test_a_pod_whose_claim_the_agent_prepared_before_the_reboot_is_prepared_at_once_too(
    dirs: dict[str, Path], apiserver: ApiServerStandin, dra_agent: AgentProcess, tmp_path: Path
) -> None:
    """The agent's record says the claim is prepared (it was, before the reboot), but the
    kubelet prepares every claim again after a reboot, and its pod runs no container: it is
    asked for too (a real 1.37 kubelet left such pods to its resync:
    tests/node/test_daemonset.py)."""
    allocated_pods(apiserver)
    kubelet, _ = rebooted_node(dirs, apiserver, dra_agent, tmp_path, may_patch_pods=True)
    try:
        kubelet.wait_for(prepared, TIMEOUT)
    finally:
        kubelet.stop()
    assert dra_agent.process is not None
    dra_agent.process.kill()  # the power cut; its record of the claim stays on disk
    dra_agent.process.wait()
    kubelet, _ = rebooted_node(dirs, apiserver, dra_agent, tmp_path, may_patch_pods=True)
    try:
        assert seconds_to_prepare(kubelet) < 2.0
    finally:
        kubelet.stop()
