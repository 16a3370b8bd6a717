"""Version shims: the one place that knows which Python provides what."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable
from typing import TypeVar

if sys.version_info >= (3, 11):
    import tomllib
else:
    # tomli is only installed where it is needed (Python < 3.11), so a type checker running on
    # a newer interpreter cannot see it; it still checks this branch because the project's
    # mypy target is 3.9.
    import tomli as tomllib  # type: ignore[import-not-found, unused-ignore]

__all__ = ["tomllib", "wait_set", "within"]

_T = TypeVar("_T")


async def within(awaitable: Awaitable[_T], timeout: float | None) -> _T:
    """``awaitable``'s result, or asyncio.TimeoutError after ``timeout`` seconds (it is then
    cancelled): asyncio.wait_for, but a cancellation of the caller is never lost. Before
    Python 3.12, wait_for returns the result instead when the caller is cancelled in the tick
    that the awaitable ends in (python/cpython#86296): a task cancelled as its event was set
    went on as if it never was, and an agent cancelling it to stop never stopped."""
    if sys.version_info >= (3, 12):
        return await asyncio.wait_for(awaitable, timeout)
    task = asyncio.ensure_future(awaitable)
    try:
        done, _ = await asyncio.wait({task}, timeout=timeout)
    except asyncio.CancelledError:
        task.cancel()
        await asyncio.wait({task})
        raise
    if not done:
        task.cancel()
        await asyncio.wait({task})
        if task.cancelled():
            raise asyncio.TimeoutError
    return task.result()


async def wait_set(event: asyncio.Event, timeout: float | None) -> bool:
    """Whether ``event`` is set within ``timeout`` seconds; a cancellation is never lost."""
    try:
        await within(event.wait(), timeout)
    except asyncio.TimeoutError:
        return False
    return True
