"""Runs each resource's probe at its interval and turns checks into token health.

A token turns unhealthy after ``failure_threshold`` failed checks in a row and healthy again
after ``success_threshold`` passed ones, as a Kubernetes probe does; before its first checks
every token is healthy (as without a probe). The first check runs as soon as a probe is
configured. Each change of health is logged once, as a transition, never once per check, and
reported through ``on_change`` so that the agent can hand it to whatever advertises the
resource. A reload that changes a resource's probe starts it afresh, keeping what its tokens'
health was.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from token_resource.config.diff import describe_probe
from token_resource.config.model import ResourceSpec
from token_resource.config.names import token_id
from token_resource.health.probes import Outcome, check
from token_resource.health.state import ALL_HEALTHY, TokenHealth
from token_resource.observe.observer import Observer

log = logging.getLogger(__name__)

# Tokens a transition's log line names before it says "and N more".
_LOGGED_TOKENS = 5


@dataclass(frozen=True)
class ProbeReport:
    """What ``status`` shows of a resource's probe."""

    probe: str  # e.g. "tcp 127.0.0.1:27000 every 10 s"
    health: TokenHealth
    last_result: str | None = None  # "passed" / "failed", None before the first check
    last_message: str | None = None
    last_time: float | None = None  # unix time of the last check's end
    last_seconds: float | None = None


@dataclass
class _Token:
    healthy: bool = True
    failures: int = 0  # in a row
    successes: int = 0  # in a row
    reason: str = ""


@dataclass(eq=False)
class _Prober:
    spec: ResourceSpec
    tokens: list[_Token] = field(default_factory=list)
    task: asyncio.Task[None] | None = None
    last: Outcome | None = None
    last_time: float | None = None

    def health(self) -> TokenHealth:
        return TokenHealth({i: t.reason for i, t in enumerate(self.tokens) if not t.healthy})


class HealthMonitor:
    def __init__(self, on_change: Callable[[str], None], observer: Observer) -> None:
        """``on_change(resource)``: that resource's health changed."""
        self._on_change = on_change
        self._observer = observer
        self._probers: dict[str, _Prober] = {}

    def apply(self, resources: Mapping[str, ResourceSpec]) -> None:
        """Probe exactly the resources of ``resources`` that have a probe."""
        wanted = {name: spec for name, spec in resources.items() if spec.probe is not None}
        for name in list(self._probers):
            if name not in wanted:
                self._stop(self._probers.pop(name))
        for name, spec in wanted.items():
            prober = self._probers.get(name)
            if prober is None:
                prober = self._probers[name] = _Prober(spec)
            elif prober.spec.probe == spec.probe and prober.spec.count == spec.count:
                prober.spec = spec
                continue
            else:
                self._stop(prober)
                prober.spec = spec
            self._resize(prober)
            prober.task = asyncio.ensure_future(self._run(prober))

    def health(self, name: str) -> TokenHealth:
        prober = self._probers.get(name)
        return ALL_HEALTHY if prober is None else prober.health()

    def reports(self) -> dict[str, ProbeReport]:
        reports = {}
        for name, prober in sorted(self._probers.items()):
            last = prober.last
            reports[name] = ProbeReport(
                describe_probe(prober.spec.probe),
                prober.health(),
                None if last is None else ("passed" if last.ok else "failed"),
                None if last is None else last.message,
                prober.last_time,
                None if last is None else last.seconds,
            )
        return reports

    async def close(self) -> None:
        probers, self._probers = list(self._probers.values()), {}
        tasks = [prober.task for prober in probers if prober.task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    @staticmethod
    def _stop(prober: _Prober) -> None:
        if prober.task is not None:
            prober.task.cancel()
            prober.task = None

    @staticmethod
    def _resize(prober: _Prober) -> None:
        count = prober.spec.count
        del prober.tokens[count:]
        prober.tokens += [_Token() for _ in range(count - len(prober.tokens))]
        for token in prober.tokens:
            token.failures = token.successes = 0

    async def _run(self, prober: _Prober) -> None:
        probe = prober.spec.probe
        assert probe is not None
        name = prober.spec.name
        while True:
            outcome = await check(probe, prober.spec.count)
            prober.last, prober.last_time = outcome, time.time()
            self._observer.probe_ran(name, outcome.seconds, ok=outcome.ok)
            before = prober.health()
            self._count(prober, outcome)
            after = prober.health()
            if after != before:
                self._log_transition(name, prober.spec.count, before, after)
                self._on_change(name)
            await asyncio.sleep(probe.interval)

    @staticmethod
    def _count(prober: _Prober, outcome: Outcome) -> None:
        probe = prober.spec.probe
        assert probe is not None
        for index, token in enumerate(prober.tokens):
            passed = index < len(outcome.passed) and outcome.passed[index]
            if passed:
                token.successes, token.failures = token.successes + 1, 0
                if not token.healthy and token.successes >= probe.success_threshold:
                    token.healthy, token.reason = True, ""
            else:
                token.failures, token.successes = token.failures + 1, 0
                token.reason = outcome.reasons.get(index, outcome.message)
                if token.healthy and token.failures >= probe.failure_threshold:
                    token.healthy = False

    @staticmethod
    def _log_transition(name: str, count: int, before: TokenHealth, after: TokenHealth) -> None:
        gone = sorted(set(after.unhealthy) - set(before.unhealthy))
        back = sorted(set(before.unhealthy) - set(after.unhealthy))
        healthy = after.healthy_count(count)
        if gone:
            reasons = sorted({after.unhealthy[index] for index in gone})
            log.warning(
                "%s: %s unhealthy (%d of %d healthy): %s",
                name,
                _tokens(gone),
                healthy,
                count,
                "; ".join(reasons),
            )
        if back:
            log.info("%s: %s healthy again (%d of %d healthy)", name, _tokens(back), healthy, count)


def _tokens(indices: list[int]) -> str:
    shown = ", ".join(token_id(index) for index in indices[:_LOGGED_TOKENS])
    more = len(indices) - _LOGGED_TOKENS
    return shown + (f" and {more} more" if more > 0 else "")
