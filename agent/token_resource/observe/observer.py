"""What the agent's parts report as it happens, for whoever counts it (the metrics).

The parts call an :class:`Observer` handed to them; without metrics it is :class:`NullObserver`,
so that nothing imports the metrics library unless metrics are configured.
"""

from __future__ import annotations

from typing import Protocol

# How applying the files ended.
APPLIED = "applied"
REJECTED = "rejected"  # invalid files, or a restart-only change: the previous config stays
FAILED = "failed"  # valid, but a resource could not be served
RESULTS = (APPLIED, REJECTED, FAILED)


class Observer(Protocol):
    def config_applied(self, result: str, *, initial: bool) -> None:
        """The files were applied at start (``initial``) or on a reload, with ``result``."""

    def kubelet_appeared(self) -> None:
        """A new kubelet.sock: the kubelet started or restarted."""

    def registered(self, resource: str) -> None: ...

    def registration_failed(self, resource: str) -> None: ...

    def allocate_answered(self, resource: str, seconds: float, *, ok: bool) -> None:
        """An Allocate call took ``seconds``; ``ok`` is false when it was refused."""

    def claim_prepared(self, *, ok: bool) -> None:
        """The kubelet's NodePrepareResources for one claim was answered (``ok``: prepared)."""

    def claim_unprepared(self, *, ok: bool) -> None:
        """The kubelet's NodeUnprepareResources for one claim was answered."""

    def probe_ran(self, resource: str, seconds: float, *, ok: bool) -> None:
        """A check of the resource's probe took ``seconds``; ``ok``: every token passed."""

    def prepares_retried(self, pods: int) -> None:
        """The kubelet was asked to prepare ``pods`` pods again (apiserver.keeping.nudge)."""


class NullObserver:
    """Counts nothing: the agent without metrics."""

    def config_applied(self, result: str, *, initial: bool) -> None:
        pass

    def kubelet_appeared(self) -> None:
        pass

    def registered(self, resource: str) -> None:
        pass

    def registration_failed(self, resource: str) -> None:
        pass

    def allocate_answered(self, resource: str, seconds: float, *, ok: bool) -> None:
        pass

    def claim_prepared(self, *, ok: bool) -> None:
        pass

    def claim_unprepared(self, *, ok: bool) -> None:
        pass

    def probe_ran(self, resource: str, seconds: float, *, ok: bool) -> None:
        pass

    def prepares_retried(self, pods: int) -> None:
        pass
