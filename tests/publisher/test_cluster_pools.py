"""The pure parts of the cluster pools: which seats are offered beside the allocated tokens,
which tokens the claims hold, where a pool's slices say its devices are, and how status shows
a publisher."""

from __future__ import annotations

from typing import Any

import pytest

from token_resource.apiserver.keeping.allocations import held_by
from token_resource.apiserver.keeping.cluster_slices import unoffered
from token_resource.apiserver.objects.slices import cluster_placement, cluster_pool_name, pool_name
from token_resource.config.model import (
    DOES_NOT_EXIST,
    IN,
    NodeSelection,
    SelectorRequirement,
)
from token_resource.observe.report import render_text

DRIVER = "tokens.example.com"
POOL = cluster_pool_name("example.com/license")


@pytest.mark.parametrize(
    ("count", "free", "allocated", "tainted"),
    [
        (5, 5, set(), set()),
        (5, 9, {1}, set()),  # more free than tokens: every one offered
        (5, 2, set(), {2, 3, 4}),
        (5, 2, {3}, {2, 4}),  # token-3 stays: its pod runs
        (5, 1, {0, 1}, {3, 4}),
        (5, 0, {3}, {0, 1, 2, 3, 4}),  # none free (or the probe failed): all of them
        (3, -1, set(), {0, 1, 2}),
    ],
)
def test_free_seats_are_offered_beside_the_allocated_tokens(
    count: int, free: int, allocated: set[int], tainted: set[int]
) -> None:
    assert unoffered(count, free, frozenset(allocated)) == tainted


def claim(*results: tuple[str, str, str]) -> dict[str, Any]:
    devices = [{"driver": d, "pool": p, "device": name, "request": "r"} for d, p, name in results]
    return {"status": {"allocation": {"devices": {"results": devices}}}}


def test_a_claim_holds_the_drivers_canonical_tokens_only() -> None:
    other_pool = pool_name("node-a", "example.com/license")
    assert held_by(claim((DRIVER, POOL, "token-3"), (DRIVER, POOL, "token-0")), DRIVER) == {
        (POOL, 3),
        (POOL, 0),
    }
    assert held_by(claim((DRIVER, other_pool, "token-1")), DRIVER) == {(other_pool, 1)}
    assert held_by(claim(("other.example.com", POOL, "token-2")), DRIVER) == frozenset()
    not_token_ids = claim((DRIVER, POOL, "token-07"), (DRIVER, POOL, "gpu-1"))
    assert held_by(not_token_ids, DRIVER) == frozenset()
    assert held_by({"status": {}}, DRIVER) == frozenset()  # not allocated
    assert held_by({}, DRIVER) == frozenset()


def test_a_pool_for_every_node_or_for_the_selected_ones() -> None:
    assert cluster_placement(None) == {"allNodes": True}
    selection = NodeSelection(
        "site in (a,b),!spot",
        (SelectorRequirement("site", IN, ("a", "b")), SelectorRequirement("spot", DOES_NOT_EXIST)),
    )
    assert cluster_placement(selection) == {
        "nodeSelector": {
            "nodeSelectorTerms": [
                {
                    "matchExpressions": [
                        {"key": "site", "operator": "In", "values": ["a", "b"]},
                        {"key": "spot", "operator": "DoesNotExist"},
                    ]
                }
            ]
        }
    }


def test_a_cluster_pool_is_named_apart_from_every_node_pool() -> None:
    assert POOL == "example.com/license"
    assert POOL.count("/") == 1
    assert pool_name("example.com", "example.com/license").count("/") == 2


def publisher_report(leading: bool, holder: str | None) -> dict[str, Any]:
    pool = {
        "resource": "example.com/license",
        "pool": POOL,
        "count": 20,
        "nodes": None,
        "generation": 4,
        "healthy": 12,
        "allocated": 7,
    }
    return {
        "summary": "cluster pools of driver tokens.example.com: ...",
        "cluster_pools": {
            "driver": DRIVER,
            "lease": "token-resource/tokens.example.com-cluster-pools",
            "identity": "host-a_1234",
            "holder": holder,
            "leading": leading,
            "transitions": 1,
            "lease_error": None,
            "state": "accepted",
            "reason": None,
            "pools": [pool],
        },
        "pod_resources": {"socket": "", "error": None},
        "resources": [],
    }


def test_status_says_whether_the_publisher_writes_and_what_each_pool_holds() -> None:
    text = render_text(publisher_report(True, "host-a_1234"))
    assert "(lease token-resource/tokens.example.com-cluster-pools): publishing" in text
    assert (
        "example.com/license: 20 for all nodes, 12 offered, 7 allocated "
        "(pool example.com/license, generation 4)"
    ) in text
    standby = render_text(publisher_report(False, "host-b_5678"))
    assert "standing by: the lease is held by host-b_5678" in standby
    assert "standing by: the lease is held by nobody" in render_text(publisher_report(False, None))
