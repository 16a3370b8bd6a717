"""The last step of a stop: the other tasks of the event loop given time to end."""

from __future__ import annotations

import asyncio


async def wind_down(timeout: float) -> None:
    """Wait up to ``timeout`` seconds for every other task of the loop to end.

    A gRPC server's stop() can return while the tasks in which grpc.aio ends its last calls
    are still pending (a stream opened just as the agent stopped). asyncio.run() cancels what
    is left when the agent's coroutine returns, and grpc.aio logs such a cancellation as
    "Exception not handled by _handle_exceptions", with a traceback on stderr.
    """
    others = asyncio.all_tasks() - {asyncio.current_task()}
    if others:
        await asyncio.wait(others, timeout=timeout)
