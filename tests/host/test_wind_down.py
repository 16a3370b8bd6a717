"""The agent's last step: no task left for asyncio.run to cancel, and no long wait for one.

A gRPC server's stop() can return while grpc.aio's own tasks for a call that arrived during
the stop are still pending: seen in CI (an agent stopped 2 ms after its last registration,
Python 3.9, grpcio 1.80.1) and in 1 to 3 of 200-300 rounds of three servers stopped as their
streams opened, under grpcio 1.80.1 and 1.85.3. asyncio.run cancels such tasks when the
agent's coroutine returns, and grpc.aio logs the cancellation as "Exception not handled by
_handle_exceptions" with a traceback. The agent's shutdown ends with ``wind_down``.
"""

from __future__ import annotations

import asyncio
import time

from token_resource.host.winddown import wind_down


def test_a_task_still_pending_at_the_end_is_let_finish() -> None:
    finished: list[str] = []

    async def a_few_loop_turns_more() -> None:
        for _ in range(5):
            await asyncio.sleep(0)
        finished.append("finished")

    async def agent() -> None:
        late = asyncio.ensure_future(a_few_loop_turns_more())
        await wind_down(5.0)
        assert late.done()

    asyncio.run(agent())
    # Without the wind-down, asyncio.run cancels the task before its second turn.
    assert finished == ["finished"]


def test_a_task_that_never_ends_holds_the_exit_back_only_for_the_time_out() -> None:
    async def agent() -> float:
        never = asyncio.ensure_future(asyncio.Event().wait())
        started = time.monotonic()
        await wind_down(0.3)
        assert not never.done()
        return time.monotonic() - started

    waited = asyncio.run(agent())
    assert 0.3 <= waited < 3.0
