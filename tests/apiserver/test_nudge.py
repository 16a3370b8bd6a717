"""Which pods the agent asks the kubelet to prepare again once its DRA driver registered
(apiserver/nudge.py): its node's pods, found by their claims' names as the kubelet finds them,
whose claims hold the driver's devices (of any pool), reserved for them and not prepared, or
prepared but their pods run no container (after a reboot)."""

from __future__ import annotations

from typing import Any

from token_resource.apiserver.keeping.nudge import (
    WaitingPod,
    claim_names,
    describe,
    runs,
    waits_for,
)

DRIVER = "tokens.example.com"
POD_UID = "u-web"


def claim(
    uid: str, *pod_uids: str, driver: str = DRIVER, pool: str = "node-a/token"
) -> dict[str, Any]:
    return {
        "metadata": {"namespace": "web", "name": f"claim-{uid}", "uid": uid},
        "status": {
            "allocation": {
                "devices": {
                    "results": [
                        {"request": "token", "driver": driver, "pool": pool, "device": "token-0"}
                    ]
                }
            },
            "reservedFor": [{"resource": "pods", "name": "web", "uid": u} for u in pod_uids],
        },
    }


def test_a_pods_claims_by_name_as_the_kubelet_finds_them() -> None:
    pod = {
        "spec": {
            "resourceClaims": [
                {"name": "direct", "resourceClaimName": "shared-seat"},
                {"name": "templated", "resourceClaimTemplateName": "seat"},
                {"name": "not-made-yet", "resourceClaimTemplateName": "seat"},
            ]
        },
        "status": {
            "resourceClaimStatuses": [{"name": "templated", "resourceClaimName": "web-seat-x7k2p"}],
            "extendedResourceClaimStatus": {"resourceClaimName": "web-extended-resources-ab3cd"},
        },
    }
    assert claim_names(pod) == ["shared-seat", "web-seat-x7k2p", "web-extended-resources-ab3cd"]
    assert claim_names({"spec": {"containers": []}}) == []


def test_a_pod_waits_for_an_unprepared_claim_of_the_driver_reserved_for_it() -> None:
    assert waits_for(claim("1", POD_UID), POD_UID, DRIVER, set())
    # A cluster pool's claim names no node: it counts as any other of the driver's.
    assert waits_for(claim("2", POD_UID, pool="cluster/token"), POD_UID, DRIVER, set())
    # Prepared already, and the pod runs; prepared before (a reboot), and it runs no container.
    assert not waits_for(claim("3", POD_UID), POD_UID, DRIVER, {"3"}, pod_runs=True)
    assert waits_for(claim("3", POD_UID), POD_UID, DRIVER, {"3"}, pod_runs=False)
    assert not waits_for(claim("4", POD_UID, driver="other.example.com"), POD_UID, DRIVER, set())
    assert not waits_for(claim("5", "u-other"), POD_UID, DRIVER, set())  # reserved for another
    assert not waits_for(claim("6"), POD_UID, DRIVER, set())  # reserved for nobody
    not_allocated = {"metadata": {"uid": "7", "namespace": "web"}, "status": {}}
    assert not waits_for(not_allocated, POD_UID, DRIVER, set())


def test_a_pod_runs_when_its_status_says_every_container_runs() -> None:
    running = {"state": {"running": {"startedAt": "2026-12-04T23:09:35Z"}}}
    creating = {"state": {"waiting": {"reason": "ContainerCreating"}}}
    assert runs({"status": {"phase": "Running", "containerStatuses": [running, running]}})
    assert not runs({"status": {"phase": "Running", "containerStatuses": [running, creating]}})
    assert not runs({"status": {"phase": "Pending", "containerStatuses": [creating]}})
    assert not runs({"status": {"phase": "Pending"}})
    assert not runs({})


def test_a_burst_is_one_line() -> None:
    pods = [WaitingPod("web", f"pod-{index}") for index in range(8)]
    assert describe(pods[:2]) == "web/pod-0, web/pod-1"
    assert describe(pods) == ("web/pod-0, web/pod-1, web/pod-2, web/pod-3, web/pod-4 and 3 more")
