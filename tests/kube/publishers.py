"""Publishers of cluster pools and the pods that draw from them, for the tests against the
real control plane (test_cp_cluster_publisher.py): the publisher's ServiceAccount and RBAC,
its processes, and what the real API server stores of its Lease and slices, and of the
scheduler's placements and claims."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.harness import AgentProcess
from tests.kube.client import wait_until
from tests.kube.controlplane import ControlPlane
from tests.kube.test_cp_dra import RESOURCE_API, SLICES, unschedulable
from token_resource.apiserver.keeping.cluster_slices import lease_name

NAMESPACE = "cp-publisher"
ACCOUNT = "publisher"
RBAC_API = "/apis/rbac.authorization.k8s.io/v1"
LEASES = f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases"
PODS = f"/api/v1/namespaces/{NAMESPACE}/pods"
CLAIMS = f"{RESOURCE_API}/namespaces/{NAMESPACE}/resourceclaims"


def rbac(control_plane: ControlPlane) -> None:
    """The publisher's account as docs/cluster-pools.md describes it: its Lease in its own
    namespace (a Role), the slices and the claims (a ClusterRole: slices are cluster-scoped)."""
    control_plane.ensure("/api/v1/namespaces", {"metadata": {"name": NAMESPACE}})
    control_plane.ensure(
        f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts", {"metadata": {"name": ACCOUNT}}
    )
    subject = [{"kind": "ServiceAccount", "name": ACCOUNT, "namespace": NAMESPACE}]
    control_plane.ensure(
        f"{RBAC_API}/namespaces/{NAMESPACE}/roles",
        {
            "metadata": {"name": ACCOUNT},
            "rules": [
                {
                    "apiGroups": ["coordination.k8s.io"],
                    "resources": ["leases"],
                    "verbs": ["get", "create", "update"],
                }
            ],
        },
    )
    control_plane.ensure(
        f"{RBAC_API}/namespaces/{NAMESPACE}/rolebindings",
        {
            "metadata": {"name": ACCOUNT},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": ACCOUNT},
            "subjects": subject,
        },
    )
    control_plane.ensure(
        f"{RBAC_API}/clusterroles",
        {
            "metadata": {"name": "cp-publisher"},
            "rules": [
                {
                    "apiGroups": ["resource.k8s.io"],
                    "resources": ["resourceslices"],
                    "verbs": ["get", "list", "watch", "create", "update", "delete"],
                },
                {
                    "apiGroups": ["resource.k8s.io"],
                    "resources": ["resourceclaims"],
                    "verbs": ["get", "list", "watch"],
                },
            ],
        },
    )
    control_plane.ensure(
        f"{RBAC_API}/clusterrolebindings",
        {
            "metadata": {"name": "cp-publisher"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "cp-publisher",
            },
            "subjects": subject,
        },
    )


def account_kubeconfig(control_plane: ControlPlane, path: Path, server: str | None = None) -> Path:
    """A kubeconfig with a token of the publisher's ServiceAccount (a TokenRequest bound to
    nothing: the publisher needs no node), for ``server`` if given (a relay's address)."""
    answer = control_plane.admin.create(
        f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/{ACCOUNT}/token",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}},
    )
    return control_plane.write_kubeconfig(path, token=answer["status"]["token"], server=server)


def publisher_config(kubeconfig: Path, driver: str, resources: str, timing: str = "") -> str:
    return (
        f'[kubernetes]\nkubeconfig = "{kubeconfig}"\nlease_namespace = "{NAMESPACE}"\n{timing}'
        f'[dra]\ndriver = "{driver}"\n{resources}'
    )


def cluster_resource(resource: str, count: int, extra: str = "") -> str:
    return (
        f'[resources."{resource}"]\ncount = {count}\nadvertise = "dra"\nscope = "cluster"\n{extra}'
    )


@contextmanager
def publishers(workdir: Path, config: str, *names: str) -> Iterator[list[AgentProcess]]:
    """Publishers ``names`` (workdir/<name>) started at once, so that they race for the Lease
    from the start; each ready (READY=1) before this yields; killed at the end."""
    started: list[AgentProcess] = []
    try:
        for name in names:
            process = AgentProcess(workdir / name, workdir / name / "unused", role="publisher")
            process.write_config(config)
            started.append(process)
            process.start(wait_ready=False)
        for process in started:
            process.notify.wait_for(lambda lines: "READY=1" in lines)
        yield started
    finally:
        for process in started:
            process.kill()


def status_of(process: AgentProcess) -> dict[str, Any]:
    answer = process.cli("status", "--json")
    assert answer.returncode == 0, answer.stderr
    report: dict[str, Any] = json.loads(answer.stdout)["cluster_pools"]
    return report


def pool_slices(control_plane: ControlPlane, driver: str, pool: str) -> list[dict[str, Any]]:
    """The real API server's slices of ``driver``'s ``pool``, of its newest generation."""
    items = [
        item
        for item in control_plane.admin.get(f"{SLICES}?fieldSelector=spec.driver={driver}")["items"]
        if item["spec"]["pool"]["name"] == pool
    ]
    newest = max((item["spec"]["pool"]["generation"] for item in items), default=None)
    return [item for item in items if item["spec"]["pool"]["generation"] == newest]


def devices_of(items: list[dict[str, Any]]) -> list[str]:
    return sorted(device["name"] for item in items for device in item["spec"].get("devices", []))


def tokens(count: int) -> list[str]:
    return [f"token-{index}" for index in range(count)]


def stored_pool(
    control_plane: ControlPlane, driver: str, pool: str, count: int
) -> list[dict[str, Any]] | None:
    """The slices of ``pool`` once they hold its ``count`` tokens; None before."""
    items = pool_slices(control_plane, driver, pool)
    return items if devices_of(items) == tokens(count) else None


def generation(control_plane: ControlPlane, driver: str, pool: str) -> int | None:
    items = pool_slices(control_plane, driver, pool)
    return items[0]["spec"]["pool"]["generation"] if items else None


def lease_of(control_plane: ControlPlane, driver: str) -> dict[str, Any] | None:
    status, answer = control_plane.admin.request("GET", f"{LEASES}/{lease_name(driver)}")
    return answer if status == 200 else None


def holder_of(control_plane: ControlPlane, driver: str) -> str | None:
    lease = lease_of(control_plane, driver)
    return None if lease is None else lease["spec"].get("holderIdentity") or None


def make_pod(
    control_plane: ControlPlane, pods: list[str], name: str, node: str, resource: str
) -> None:
    """An unchanged pod asking for one ``resource`` under limits, held to ``node`` by its
    hostname label (so that the scheduler places it there and on no other test's Node)."""
    control_plane.admin.create(
        PODS,
        {
            "metadata": {"name": name},
            "spec": {
                "nodeSelector": {"kubernetes.io/hostname": node},
                "containers": [
                    {
                        "name": "main",
                        "image": "token-resource:test",
                        "resources": {"limits": {resource: "1"}},
                    }
                ],
            },
        },
    )
    pods.append(name)


def placement(
    control_plane: ControlPlane, names: list[str], bound: int, refused: int
) -> tuple[dict[str, str], list[str]] | None:
    """(pod -> its node, the unschedulable pods) among ``names`` once ``bound`` are bound and
    ``refused`` unschedulable; None before."""
    items = [
        pod for pod in control_plane.admin.get(PODS)["items"] if pod["metadata"]["name"] in names
    ]
    nodes = {
        p["metadata"]["name"]: p["spec"]["nodeName"] for p in items if p["spec"].get("nodeName")
    }
    pending = sorted(p["metadata"]["name"] for p in items if unschedulable(p))
    return (nodes, pending) if (len(nodes), len(pending)) == (bound, refused) else None


def wait_for_placement(
    control_plane: ControlPlane, names: list[str], bound: int, refused: int
) -> tuple[dict[str, str], list[str]]:
    return wait_until(
        f"{bound} pods bound, {refused} unschedulable",
        lambda: placement(control_plane, names, bound, refused),
        show=lambda: [
            (p["metadata"]["name"], p["spec"].get("nodeName"), p["status"].get("conditions"))
            for p in control_plane.admin.get(PODS)["items"]
        ],
    )


def allocated(control_plane: ControlPlane, pod: str, driver: str) -> list[tuple[str, str]]:
    """(pool, device) of the results of the claim the scheduler made for ``pod``'s extended
    resource (named in the pod's status), all of ``driver``."""
    status = control_plane.admin.get(f"{PODS}/{pod}")["status"]
    claim = control_plane.admin.get(
        f"{CLAIMS}/{status['extendedResourceClaimStatus']['resourceClaimName']}"
    )
    results = claim["status"]["allocation"]["devices"]["results"]
    assert {result["driver"] for result in results} == {driver}, claim
    return [(result["pool"], result["device"]) for result in results]
