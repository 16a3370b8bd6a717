"""The version shims: ``within`` and ``wait_set`` never lose a cancellation, which
asyncio.wait_for does before Python 3.12 when the caller is cancelled in the tick its
awaitable ends in (python/cpython#86296: the publisher that never stopped, seed 4028708922 of
tests/publisher/test_cluster_publisher_chaos.py on Python 3.9)."""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import Awaitable, Callable

import pytest

from token_resource._compat import wait_set, within
from token_resource.apiserver.connection.client import KubeError
from token_resource.apiserver.keeping.keeper import Keeper

Waiter = Callable[[asyncio.Event, float], Awaitable[object]]


async def with_wait_for(event: asyncio.Event, timeout: float) -> None:
    with contextlib.suppress(asyncio.TimeoutError):
        await asyncio.wait_for(event.wait(), timeout)


async def cancelled_as_set(wait: Waiter) -> bool:
    """Whether a task waiting on an event in a loop ends cancelled when it is cancelled in
    the tick the event is set (as an agent's keeper is, when the Lease changes hands as it
    stops)."""
    event = asyncio.Event()

    async def loop() -> None:
        for _ in range(3):
            await wait(event, 5.0)
            event.clear()
            await asyncio.sleep(0)

    task = asyncio.ensure_future(loop())
    await asyncio.sleep(0.01)
    event.set()
    task.cancel()
    await asyncio.wait({task}, timeout=5)
    return task.cancelled()


def test_wait_set_ends_cancelled_when_cancelled_as_its_event_is_set() -> None:
    assert all(asyncio.run(cancelled_as_set(wait_set)) for _ in range(20))


def test_wait_for_loses_that_cancellation_before_python_3_12() -> None:
    """The check above fails with asyncio.wait_for where the bug is (fixed in 3.12)."""
    assert asyncio.run(cancelled_as_set(with_wait_for)) == (sys.version_info >= (3, 12))


def test_within_returns_times_out_and_cancels_what_it_waits_for() -> None:
    async def run() -> None:
        assert await within(asyncio.sleep(0, "done"), 1.0) == "done"
        slow = asyncio.ensure_future(asyncio.sleep(60))
        with pytest.raises(asyncio.TimeoutError):
            await within(slow, 0.01)
        assert slow.cancelled()
        with pytest.raises(ValueError, match="bad"):
            await within(failing(), 1.0)
        inner = asyncio.ensure_future(asyncio.sleep(60))
        outer = asyncio.ensure_future(within(inner, 60))
        await asyncio.sleep(0.01)
        outer.cancel()
        await asyncio.wait({outer})
        assert outer.cancelled()
        assert inner.cancelled()

    asyncio.run(run())


async def failing() -> None:
    raise ValueError("bad")


class FailingKeeper(Keeper[int]):
    """Every sync fails: the keeper waits for its wake between tries."""

    def _sync(self, wanted: int) -> None:
        raise KubeError("unreachable")

    async def _quiet(self, wanted: int) -> None:
        await asyncio.sleep(60)


def test_a_keeper_closed_as_it_is_woken_stops() -> None:
    """The publisher's hang: SIGTERM as the Lease changed hands, which wakes its keeper."""

    async def run() -> None:
        keeper = FailingKeeper("test", 0, lambda: None)
        keeper.want(1)
        # A failed try sets no event to wait for: its reason is what shows it.
        while keeper.reason is None:  # noqa: ASYNC110
            await asyncio.sleep(0.01)
        keeper.want(2)  # wakes it: something else is wanted
        closing = asyncio.ensure_future(keeper.close())
        done, _ = await asyncio.wait({closing}, timeout=5)
        assert done, "close() still waits for the keeper's task, which went on"

    for _ in range(10):
        asyncio.run(run())
