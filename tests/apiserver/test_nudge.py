"""Which pods the agent asks the kubelet to prepare again once its DRA driver registered
(apiserver/nudge.py): from the claims alone, only its own node's, only the unprepared."""

from __future__ import annotations

from typing import Any

from token_resource.apiserver.nudge import WaitingPod, describe, waiting_pods

DRIVER = "tokens.example.com"
OWN_POOL, OTHER_POOL = "node-a/example.com/token", "node-b/example.com/token"


def claim(uid: str, pool: str, *pods: str, driver: str = DRIVER) -> dict[str, Any]:
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
            "reservedFor": [{"resource": "pods", "name": pod, "uid": f"u-{pod}"} for pod in pods],
        },
    }


def test_the_pods_of_unprepared_claims_from_the_nodes_pools_each_once() -> None:
    claims = [
        claim("1", OWN_POOL, "b", "a"),
        claim("2", OWN_POOL, "a"),  # a second claim of the same pod
        claim("3", OTHER_POOL, "c"),  # another node's pool
        claim("4", OWN_POOL, "d", driver="other.example.com"),
        claim("5", OWN_POOL, "e"),  # prepared already
        claim("6", OWN_POOL),  # reserved for nobody
        {"metadata": {"uid": "7", "namespace": "web"}, "status": {}},  # not allocated
    ]
    assert waiting_pods(claims, DRIVER, {OWN_POOL}, {"5"}) == [
        WaitingPod("web", "a"),
        WaitingPod("web", "b"),
    ]
    assert waiting_pods(claims, DRIVER, set(), set()) == []


def test_a_burst_is_one_line() -> None:
    pods = [WaitingPod("web", f"pod-{index}") for index in range(8)]
    assert describe(pods[:2]) == "web/pod-0, web/pod-1"
    assert describe(pods) == ("web/pod-0, web/pod-1, web/pod-2, web/pod-3, web/pod-4 and 3 more")
