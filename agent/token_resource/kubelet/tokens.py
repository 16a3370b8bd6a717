"""One resource's tokens: stable device IDs, their watchers, and the allocation rules."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Iterable, Sequence

from token_resource.config.names import token_id, token_index
from token_resource.health.state import ALL_HEALTHY, TokenHealth
from token_resource.protocol import deviceplugin_pb2 as pb
from token_resource.protocol.deviceplugin import HEALTHY, UNHEALTHY

# Error messages name at most this many IDs, each cut to this length.
_SHOWN_IDS = 5
_SHOWN_ID_CHARS = 64


def in_token_order(device_ids: Sequence[str]) -> list[str]:
    """Tokens by index (``token-2`` before ``token-10``), anything else after them: a real
    kubelet's Allocate names its devices in the random order of a Go set."""
    return sorted(
        device_ids,
        key=lambda device: (token_index(device) is None, token_index(device) or 0, device),
    )


class AllocationError(ValueError):
    """A request the kubelet should never send; answered with a gRPC error, never a crash."""

    def __init__(self, reason: str, *, unknown: bool = False) -> None:
        super().__init__(reason)
        self.unknown = unknown  # True when the request names IDs this resource does not have


class TokenPool:
    """The devices of one resource: ``token-0`` .. ``token-<count-1>``, each healthy unless its
    probe says otherwise.

    IDs are stable: growing keeps the existing IDs and adds at the end, shrinking removes from
    the end, so an ID allocated before a reload or restart is still advertised afterwards.
    Watchers receive the full list first and a new full list after every change. An unhealthy
    token stays listed, as Unhealthy: the kubelet counts it out of allocatable and keeps the
    pods that hold it.
    """

    def __init__(self, count: int, health: TokenHealth = ALL_HEALTHY) -> None:
        self._count = count
        self._health = health
        self._changed = asyncio.Event()
        self._listing: pb.ListAndWatchResponse | None = None

    @property
    def count(self) -> int:
        return self._count

    def resize(self, count: int) -> bool:
        """Set the number of tokens; wakes every watcher. Returns whether anything changed."""
        if count == self._count:
            return False
        self._count = count
        self._listing = None
        self.wake()
        return True

    @property
    def health(self) -> TokenHealth:
        return self._health

    def set_health(self, health: TokenHealth) -> bool:
        """Which tokens are unhealthy; wakes every watcher if that changed. A new reason for
        the same tokens is no change here: the kubelet's list carries no reasons."""
        listed_the_same = health.unhealthy.keys() == self._health.unhealthy.keys()
        self._health = health
        if listed_the_same:
            return False
        self._listing = None
        self.wake()
        return True

    def wake(self) -> None:
        """Wake every watcher; each yields the current list (and may then decide to stop)."""
        # A fresh event per wake-up: a watcher that saw the old one wakes exactly once.
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    def listing(self) -> pb.ListAndWatchResponse:
        """The current full device list, built once per version and shared by every stream."""
        if self._listing is None:
            health = self._health
            self._listing = pb.ListAndWatchResponse(
                devices=[
                    pb.Device(ID=token_id(i), health=HEALTHY if health.healthy(i) else UNHEALTHY)
                    for i in range(self._count)
                ]
            )
        return self._listing

    async def watch(self) -> AsyncGenerator[pb.ListAndWatchResponse, None]:
        """The current list, then the new list after each change, until the consumer stops."""
        while True:
            changed = self._changed
            yield self.listing()
            await changed.wait()

    def check_allocation(self, device_ids: Sequence[str]) -> None:
        """Refuse an Allocate container request that names no, repeated or unknown tokens."""
        if not device_ids:
            raise AllocationError("the container request names no device IDs")
        self._check_known(device_ids)
        if len(set(device_ids)) != len(device_ids):
            raise AllocationError(f"the container request repeats device IDs: {_some(device_ids)}")

    def preferred(
        self, available: Sequence[str], must_include: Sequence[str], size: int
    ) -> list[str]:
        """Exactly ``size`` IDs: the must-include ones first, then the lowest-numbered available,
        healthy ones before unhealthy ones (which the kubelet does not offer anyway).

        Compact, predictable allocations: the same request always gets the same answer.
        """
        self._check_known(available)
        self._check_known(must_include)
        chosen = list(dict.fromkeys(must_include))
        missing = [device_id for device_id in chosen if device_id not in set(available)]
        if missing:
            raise AllocationError(
                f"must-include IDs {_some(missing)} are not among the available IDs"
            )
        if not len(chosen) <= size <= len(set(available)):
            raise AllocationError(
                f"allocation_size {size} must be between the {len(chosen)} must-include IDs "
                f"and the {len(set(available))} available IDs"
            )
        rest = sorted(set(available) - set(chosen), key=self._preference)
        return chosen + rest[: size - len(chosen)]

    def _preference(self, device_id: str) -> tuple[bool, int]:
        index = _index_of_known(device_id)
        return not self._health.healthy(index), index

    def _check_known(self, device_ids: Iterable[str]) -> None:
        unknown = sorted(
            {device_id for device_id in device_ids if not self._is_known(device_id)}, key=str
        )
        if unknown:
            have = f"{token_id(0)}..{token_id(self._count - 1)}" if self._count else "no tokens"
            raise AllocationError(
                f"unknown device IDs {_some(unknown)} (this resource has {have})", unknown=True
            )

    def _is_known(self, device_id: str) -> bool:
        index = token_index(device_id)
        return index is not None and index < self._count


def _some(device_ids: Sequence[str]) -> str:
    """IDs for an error message, bounded: gRPC refuses status details beyond its header limit,
    which would turn a clear NOT_FOUND into an opaque failure."""
    shown = [device_id[:_SHOWN_ID_CHARS] for device_id in device_ids[:_SHOWN_IDS]]
    more = len(device_ids) - len(shown)
    return f"{shown}" + (f" and {more} more" if more > 0 else "")


def _index_of_known(device_id: str) -> int:
    index = token_index(device_id)
    assert index is not None, "only called on checked IDs"
    return index
