"""Keeping something on the API server as the configuration wants it, in a task of its own.

A sync runs at once when the wanted state changes, again after every quiet spell (a resync, or
a watch that saw something change) and, when it fails (unreachable, refused), again after a
backoff: device-plugin resources never wait for the API server. The state (pending, accepted,
failing with the reason) is what STATUS= and ``status`` show.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Generic, TypeVar

from token_resource._compat import wait_set
from token_resource.apiserver.connection.client import KubeError

log = logging.getLogger(__name__)

FIRST_RETRY_DELAY = 1.0
MAX_RETRY_DELAY = 60.0

PENDING, ACCEPTED, FAILING = "pending", "accepted", "failing"

Wanted = TypeVar("Wanted")


class Keeper(abc.ABC, Generic[Wanted]):
    """Subclasses say how to sync once (:meth:`_sync`, blocking, run in a worker thread, on
    what was wanted when it began) and how to wait after a success (:meth:`_quiet`)."""

    def __init__(self, what: str, wanted: Wanted, on_change: Callable[[], None]) -> None:
        self._what = what  # for the log: "node status", "resource slices"
        self.wanted = wanted
        self._on_change = on_change
        self.state = PENDING
        self.reason: str | None = None
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def want(self, wanted: Wanted) -> None:
        """Make the API server hold ``wanted``: a sync now, unless it is wanted already (the
        first call always syncs)."""
        if self._task is not None and wanted == self.wanted:
            return
        self.wanted = wanted
        self.state, self.reason = PENDING, None
        if self._task is None:
            self._task = asyncio.ensure_future(self._keep_true())
        self._wake.set()

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    @abc.abstractmethod
    def _sync(self, wanted: Wanted) -> None:
        """Make the API server hold ``wanted``; KubeError if it cannot."""

    @abc.abstractmethod
    async def _quiet(self, wanted: Wanted) -> None:
        """After a successful sync of ``wanted``: return when the next one is due, at the
        latest when :meth:`want` changes what is wanted (``self._wake`` is then set).
        KubeError if it cannot wait for news (the credentials unreadable right then): the
        next sync comes after a short wait, or at once when something else is wanted."""

    async def _wait_for_wake(self, timeout: float | None) -> None:
        await wait_set(self._wake, timeout)

    async def _keep_true(self) -> None:
        delay = FIRST_RETRY_DELAY
        # Apart from the syncs': a wait for news that keeps failing after good syncs (a watch
        # refused) must not make a busy loop of list and watch either.
        quiet_delay = FIRST_RETRY_DELAY
        while True:
            self._wake.clear()
            # A snapshot: want() may change it meanwhile, which wakes the next round.
            wanted = self.wanted
            try:
                await asyncio.to_thread(self._sync, wanted)
            except KubeError as error:
                self._failed(str(error), delay)
                await self._wait_for_wake(delay)
                delay = min(delay * 2, MAX_RETRY_DELAY)
                continue
            except Exception as error:  # a bug must not end the keeping for good
                log.exception("%s: unexpected error, retrying in %g s", self._what, delay)
                self._failed(f"unexpected error: {error!r}", delay)
                await self._wait_for_wake(delay)
                delay = min(delay * 2, MAX_RETRY_DELAY)
                continue
            self._succeeded()
            delay = FIRST_RETRY_DELAY
            try:
                await self._quiet(wanted)
            except KubeError as error:
                # What is wanted is there; only the wait for news failed. Without this the
                # task would end, and nothing wanted later would ever reach the API server.
                log.info(
                    "%s: cannot wait for changes, looking again in %g s: %s",
                    self._what,
                    quiet_delay,
                    error,
                )
                await self._wait_for_wake(quiet_delay)
                quiet_delay = min(quiet_delay * 2, MAX_RETRY_DELAY)
            else:
                quiet_delay = FIRST_RETRY_DELAY

    def _failed(self, reason: str, retry_in: float) -> None:
        if (self.state, self.reason) != (FAILING, reason):
            log.warning(
                "%s not applied, retrying in %g s and later: %s", self._what, retry_in, reason
            )
        self.state, self.reason = FAILING, reason
        self._on_change()

    def _succeeded(self) -> None:
        if self.state != ACCEPTED:
            self.state, self.reason = ACCEPTED, None
            self._on_change()
