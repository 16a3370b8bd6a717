"""Leader election's decisions, free of I/O: what a candidate makes of the Lease it read, and
what it writes (client-go tools/leaderelection/leaderelection.go, ``tryAcquireOrRenew``,
``isLeaseValid``, ``setObservedRecord``, ``tryRelease``; resourcelock/leaselock.go for the
Lease's fields).

Expiry is judged on the candidate's own monotonic clock, never by comparing ``renewTime``
with it: nodes' clocks differ. A record is valid for its ``leaseDurationSeconds`` from when
this candidate last saw it change; a record nobody renews stops changing, and expires then.
"""

from __future__ import annotations

import datetime
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# client-go's JitterFactor: candidates wait between retry_period and 2.2 x retry_period, and
# renew_deadline must exceed 1.2 x retry_period.
JITTER_FACTOR = 1.2


@dataclass(frozen=True)
class LeaderRecord:
    """A Lease's spec as leader election reads it (LeaseSpecToLeaderElectionRecord)."""

    holder: str = ""
    lease_duration_seconds: int = 0
    acquire_time: str | None = None  # MicroTimes, as the API server wrote them
    renew_time: str | None = None
    transitions: int = 0

    @classmethod
    def from_spec(cls, spec: Mapping[str, Any] | None) -> LeaderRecord:
        spec = spec or {}
        return cls(
            str(spec.get("holderIdentity") or ""),
            int(spec.get("leaseDurationSeconds") or 0),
            spec.get("acquireTime"),
            spec.get("renewTime"),
            int(spec.get("leaseTransitions") or 0),
        )

    def spec(self) -> dict[str, Any]:
        """LeaderElectionRecordToLeaseSpec."""
        return {
            "holderIdentity": self.holder,
            "leaseDurationSeconds": self.lease_duration_seconds,
            "acquireTime": self.acquire_time,
            "renewTime": self.renew_time,
            "leaseTransitions": self.transitions,
        }


@dataclass(frozen=True)
class Observation:
    """The record last seen, and when (this process's monotonic clock) it last changed."""

    record: LeaderRecord
    since: float

    def valid(self, now: float) -> bool:
        """isLeaseValid: the holder may still renew it, as far as this candidate can tell."""
        return self.since + self.record.lease_duration_seconds > now


def observe(previous: Observation | None, record: LeaderRecord, now: float) -> Observation:
    """What a candidate knows after reading ``record`` at ``now``: the clock restarts only when
    the record changed (client-go compares the raw record)."""
    if previous is not None and previous.record == record:
        return previous
    return Observation(record, now)


def may_take(observation: Observation, identity: str, now: float) -> bool:
    """Whether ``identity`` may write itself into the record it read: the Lease is free
    (no holder), already its own, or has not changed for its duration."""
    record = observation.record
    return not record.holder or record.holder == identity or not observation.valid(now)


def micro_time(moment: datetime.datetime) -> str:
    """A metav1.MicroTime as the API server wants it (RFC 3339, six digits of fraction)."""
    return moment.astimezone(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def duration_seconds(lease_duration: float) -> int:
    """leaseDurationSeconds for a lease_duration: whole seconds, at least 1. Rounded up where
    client-go truncates (``int(LeaseDuration / time.Second)``), so that a fractional duration
    never tells the others less than this holder counts on, nor 0 (refused by validation)."""
    return max(1, math.ceil(lease_duration))


def claimed(
    read: LeaderRecord, identity: str, lease_duration: float, wall: datetime.datetime
) -> LeaderRecord:
    """The record ``identity`` writes over ``read`` to hold the Lease: a renewal keeps the
    acquire time and the transitions, a take-over counts one more transition."""
    now = micro_time(wall)
    if read.holder == identity:
        acquired, transitions = read.acquire_time, read.transitions
    else:
        acquired, transitions = now, read.transitions + 1
    return LeaderRecord(identity, duration_seconds(lease_duration), acquired, now, transitions)


def first_record(identity: str, lease_duration: float, wall: datetime.datetime) -> LeaderRecord:
    """The record of a Lease that does not exist yet (its creator holds it, no transition)."""
    now = micro_time(wall)
    return LeaderRecord(identity, duration_seconds(lease_duration), now, now, 0)


def released(read: LeaderRecord, wall: datetime.datetime) -> LeaderRecord:
    """tryRelease: no holder, a 1 s duration, the transitions kept; the next candidate takes
    it at its next try."""
    now = micro_time(wall)
    return LeaderRecord("", 1, now, now, read.transitions)


def timing_problem(lease_duration: float, renew_deadline: float, retry_period: float) -> str | None:
    """NewLeaderElector's checks, in its words; None when the durations make sense."""
    if lease_duration <= renew_deadline:
        return "leaseDuration must be greater than renewDeadline"
    if renew_deadline <= JITTER_FACTOR * retry_period:
        return "renewDeadline must be greater than retryPeriod*JitterFactor"
    if retry_period <= 0:
        return "retryPeriod must be greater than zero"
    return None
