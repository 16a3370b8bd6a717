"""Token IDs, ListAndWatch lists and the allocation rules, without any socket."""

from __future__ import annotations

import asyncio

import pytest

from token_resource.config.model import MAX_COUNT
from token_resource.config.names import token_id, token_index
from token_resource.health.state import ALL_HEALTHY, TokenHealth
from token_resource.kubelet.tokens import AllocationError, TokenPool, in_token_order
from token_resource.protocol.deviceplugin import HEALTHY, MAX_MESSAGE_BYTES, UNHEALTHY


def ids(pool: TokenPool) -> list[str]:
    return [device.ID for device in pool.listing().devices]


def test_token_ids_are_canonical() -> None:
    assert token_id(0) == "token-0"
    assert token_index("token-12") == 12
    for bad in (
        "token-01",
        "token--1",
        "token-",
        "Token-1",
        "token-1 ",
        "gpu-1",
        "",
        "token-" + "9" * 58,
    ):
        assert token_index(bad) is None


def test_allocated_ids_are_named_in_token_order() -> None:
    # As a real kubelet's Allocate may send them: in a Go set's order.
    assert in_token_order(["token-10", "token-2", "token-0"]) == ["token-0", "token-2", "token-10"]
    assert in_token_order(["odd", "token-1", "token-01"]) == ["token-1", "odd", "token-01"]


def test_resize_keeps_existing_ids() -> None:
    async def scenario() -> None:
        pool = TokenPool(2)
        assert ids(pool) == ["token-0", "token-1"]
        assert pool.resize(4)
        assert ids(pool) == ["token-0", "token-1", "token-2", "token-3"]
        assert pool.resize(1)
        assert ids(pool) == ["token-0"]
        assert not pool.resize(1)

    asyncio.run(scenario())


def test_watchers_get_the_full_list_first_then_every_change() -> None:
    async def scenario() -> None:
        pool = TokenPool(1)
        streams = [pool.watch(), pool.watch()]
        first = [len((await stream.__anext__()).devices) for stream in streams]
        assert first == [1, 1]
        nexts = [asyncio.ensure_future(stream.__anext__()) for stream in streams]
        await asyncio.sleep(0)
        assert not any(task.done() for task in nexts)
        pool.resize(3)
        assert [len((await task).devices) for task in nexts] == [3, 3]
        for stream in streams:
            await stream.aclose()

    asyncio.run(scenario())


def test_the_largest_count_fits_the_kubelets_message_limit() -> None:
    async def scenario() -> int:
        return TokenPool(MAX_COUNT).listing().ByteSize()

    assert asyncio.run(scenario()) < MAX_MESSAGE_BYTES


@pytest.mark.parametrize(
    ("available", "must_include", "size", "expected"),
    [
        (["token-3", "token-1", "token-10", "token-2"], [], 2, ["token-1", "token-2"]),
        (["token-3", "token-1", "token-10", "token-2"], ["token-10"], 2, ["token-10", "token-1"]),
        (["token-0", "token-1"], ["token-1", "token-1"], 1, ["token-1"]),
        (["token-0", "token-1"], [], 0, []),
        (["token-2", "token-9", "token-10"], [], 3, ["token-2", "token-9", "token-10"]),
    ],
)
def test_preferred_allocation(
    available: list[str], must_include: list[str], size: int, expected: list[str]
) -> None:
    async def scenario() -> list[str]:
        return TokenPool(11).preferred(available, must_include, size)

    assert asyncio.run(scenario()) == expected


@pytest.mark.parametrize(
    ("device_ids", "unknown", "message"),
    [
        ([], False, "names no device IDs"),
        (["token-0", "token-0"], False, "repeats device IDs"),
        (["token-2"], True, "unknown device IDs ['token-2'] (this resource has token-0..token-1)"),
    ],
)
def test_allocation_checks(device_ids: list[str], unknown: bool, message: str) -> None:
    async def scenario() -> None:
        TokenPool(2).check_allocation(device_ids)

    with pytest.raises(AllocationError) as raised:
        asyncio.run(scenario())
    assert message in str(raised.value)
    assert raised.value.unknown == unknown


def test_an_empty_pool_says_so() -> None:
    async def scenario() -> None:
        TokenPool(0).check_allocation(["token-0"])

    with pytest.raises(AllocationError, match="this resource has no tokens"):
        asyncio.run(scenario())


def test_health_changes_the_list_only_when_the_unhealthy_tokens_change() -> None:
    async def scenario() -> None:
        pool = TokenPool(3)
        assert pool.set_health(TokenHealth({1: "pulled"}))
        listing = pool.listing()
        assert [(d.ID, d.health) for d in listing.devices] == [
            ("token-0", HEALTHY),
            ("token-1", UNHEALTHY),
            ("token-2", HEALTHY),
        ]
        # The same token with another reason: no new list for the kubelet, the reason kept.
        assert not pool.set_health(TokenHealth({1: "still pulled"}))
        assert pool.listing() is listing
        assert dict(pool.health.unhealthy) == {1: "still pulled"}
        assert pool.set_health(ALL_HEALTHY)
        assert {d.health for d in pool.listing().devices} == {HEALTHY}

    asyncio.run(scenario())
