"""The agent's part in a package upgrade's handover (host.handover): taking over from the agent
that started it, and handing over to one it starts."""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Callable

from token_resource.host.control import Answer
from token_resource.host.handover import HandoverError, Predecessor, Successor, start_successor
from token_resource.host.notify import SystemdNotifier
from token_resource.instances import INSTANCE_VARIABLE, Placement

log = logging.getLogger(__name__)

# A successor's start, up to the kubelet's registration of what it serves (0.5-1.5 s seen).
HANDOVER_SECONDS = 30.0
# How long a successor waits for the kubelet's registration before it takes over regardless.
REGISTRATION_SECONDS = 10.0


class Succession:
    """Who this agent takes over from (a predecessor, once) and hands over to (a successor)."""

    def __init__(
        self, predecessor: Predecessor | None, notifier: SystemdNotifier, place: Placement
    ) -> None:
        self._predecessor = predecessor
        self._notifier = notifier
        self._place = place
        self.successor: Successor | None = None

    @property
    def taking_over(self) -> bool:
        """A successor that has not yet taken over: what only one agent may open waits."""
        return self._predecessor is not None

    async def take_over(
        self, registered: Callable[[], bool], then: Callable[[], Awaitable[None]]
    ) -> None:
        """As a successor: once ``registered()`` (the kubelet has what this agent serves; at
        once if it may not serve beside its predecessor, or after REGISTRATION_SECONDS),
        become the service's main process, wait for the predecessor to leave, then run
        ``then`` (what only one agent may open) and take the lock."""
        predecessor, self._predecessor = self._predecessor, None
        if predecessor is None:
            return
        if not self._place.waits:
            deadline = asyncio.get_running_loop().time() + REGISTRATION_SECONDS
            while not registered():
                if asyncio.get_running_loop().time() > deadline:
                    log.warning("taking over before the kubelet registered all of this agent")
                    break
                await asyncio.sleep(0.02)
        await predecessor.take_over(self._notifier)
        await then()
        self._place.settle()

    async def hand_over(self, leave: Callable[[str], None]) -> Answer:
        """Start the installed code as this agent's successor; ``leave(why)`` once it is the
        service's main process. A failure leaves this agent serving."""
        if self.successor is not None:
            return False, "this agent is already handing over"
        environ = {**os.environ, INSTANCE_VARIABLE: f"handover-{os.getpid()}"}
        try:
            self.successor = await start_successor(environ, self._notifier, HANDOVER_SECONDS)
        except HandoverError as error:
            log.error("handover failed, this agent goes on serving: %s", error)
            return False, str(error)
        leave(f"handed over to pid {self.successor.pid}")
        return True, str(self.successor.pid)

    def left(self) -> None:
        """This agent serves no more: its lock and sockets are free for the successor."""
        self._place.release()
        if self.successor is not None:
            self.successor.leave()
