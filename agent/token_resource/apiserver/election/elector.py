"""Leader election over a coordination.k8s.io/v1 Lease, with client-go's algorithm
(tools/leaderelection/leaderelection.go: ``acquire``, ``renew``, ``tryAcquireOrRenew``,
``release``; resourcelock/leaselock.go), in one task of the agent's asyncio loop; each try runs
in a worker thread with the blocking ApiClient, as keeper.py's syncs do. The decisions are
record.py's.

- Every candidate tries every retry_period (jittered up to 2.2 x, as client-go's ``acquire``;
  the leader renews every retry_period): it reads the Lease (a leader first tries to renew
  straight from what it wrote last, as client-go's fast path) and writes itself in only if
  the Lease is free, its own, or has not changed for the record's leaseDurationSeconds by its
  own monotonic clock. The update carries the resourceVersion it read: of two candidates,
  the API server lets one through and answers the other 409.
- :attr:`LeaderElector.leading` is time based: the elector leads while its last successful
  renewal began less than renew_deadline ago. A partitioned leader's requests hang, so it
  does not wait for them to fail: a timer on the loop fires at the deadline, the elector stops
  leading and says so through ``on_change``. Another candidate can take the Lease only after
  lease_duration (> renew_deadline) without change on its own clock, counted from after the
  write the leader's deadline is counted from.
- Unlike client-go's ``Run`` (which returns for good once leadership is lost), the elector
  stays a candidate after losing the Lease, and leads again when it wins it again.
- :meth:`LeaderElector.close` with ``release`` stops leading first, then empties the Lease's
  holder (as ``ReleaseOnCancel``), so the next candidate takes it at its next try. It does so
  only if the Lease it reads names this elector; client-go checks its older observation.

Each try reads the credentials afresh (the kubelet rotates its certificate) and uses its own
connection: a try left hanging in its thread when the elector closes shares nothing with the
release. Requests time out after half the renew deadline, so that a read and a write fit in
one (client-go bounds a renewal's tries by the renew deadline).
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import random
import socket
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from token_resource._compat import wait_set
from token_resource.apiserver.connection.client import ApiClient, ApiError, KubeError
from token_resource.apiserver.connection.credentials import (
    SERVICE_ACCOUNT_DIR,
    kubeconfig_namespace,
)
from token_resource.apiserver.connection.kept import KeptClient
from token_resource.apiserver.election.record import (
    JITTER_FACTOR,
    LeaderRecord,
    Observation,
    claimed,
    first_record,
    may_take,
    observe,
    released,
    timing_problem,
)
from token_resource.config.model import DEFAULT_LEASE_NAMESPACE, KubernetesSettings

log = logging.getLogger(__name__)

NOT_FOUND, CONFLICT = 404, 409
_RELEASE_TRIES = 3


def default_identity() -> str:
    """The host name and a short random suffix, as client-go's users name a candidate: unique
    even for two processes on one host, or a restarted one whose old record still stands."""
    return f"{socket.gethostname()}_{uuid.uuid4().hex[:8]}"


def lease_namespace(
    settings: KubernetesSettings, namespace_file: Path = SERVICE_ACCOUNT_DIR / "namespace"
) -> str:
    """The configured lease_namespace; in a pod (in_cluster) the pod's own namespace; else the
    kubeconfig's current context's, as kubectl's; else DEFAULT_LEASE_NAMESPACE. KubeError if
    the pod's namespace file or the kubeconfig cannot be read: guessing another namespace would
    elect a second leader there."""
    if settings.lease_namespace:
        return settings.lease_namespace
    if not settings.in_cluster:
        return kubeconfig_namespace(settings.kubeconfig) or DEFAULT_LEASE_NAMESPACE
    try:
        namespace = namespace_file.read_text().strip()
    except OSError as error:
        raise KubeError(f"in_cluster: cannot read the pod's namespace: {error}") from None
    if not namespace:
        raise KubeError(f"in_cluster: {namespace_file} is empty")
    return namespace


@dataclass(frozen=True)
class LeaseState:
    """What status and metrics show of an elector."""

    name: str
    namespace: str
    identity: str
    holder: str | None  # as last read or written; None before the first answer
    leading: bool
    transitions: int
    error: str | None  # why the last try failed; None after a good one


class LeaderElector:
    """One candidate for one Lease. :meth:`start` in the event loop; ``on_change`` is called
    (in the loop) whenever :attr:`state` changes: leadership, the holder, the error."""

    def __init__(
        self,
        settings: KubernetesSettings,
        lease_name: str,
        namespace: str,
        identity: str,
        on_change: Callable[[], None],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        problem = timing_problem(
            settings.lease_duration, settings.renew_deadline, settings.retry_period
        )
        if problem:
            raise ValueError(f"leader election: {problem}")
        if not identity:
            raise ValueError("leader election: the identity is empty")
        self._settings = settings
        self._name = lease_name
        self._namespace = namespace
        self._identity = identity
        self._on_change = on_change
        self._clock = clock
        self._path = f"/apis/coordination.k8s.io/v1/namespaces/{quote(namespace, safe='')}/leases"
        self._observed: Observation | None = None
        self._lease: dict[str, object] | None = None  # the Lease last read or written
        self._renewed_at: float | None = None  # when the last successful renewal began
        self._error: str | None = None
        self._reported = self.state
        self._stop: asyncio.Event | None = None  # made in the loop (Python 3.9 binds it there)
        self._task: asyncio.Task[None] | None = None
        self._deadline: asyncio.TimerHandle | None = None
        self._connection = self._new_connection()

    def _new_connection(self) -> KeptClient:
        # Each request bounded well within the deadline: a try that hangs (a partition) ends
        # while there is still time for the next one.
        return KeptClient(timeout=self._settings.renew_deadline / 2)

    @property
    def leading(self) -> bool:
        """Whether this elector holds the Lease: it renewed it less than renew_deadline ago."""
        return (
            self._renewed_at is not None
            and self._clock() - self._renewed_at < self._settings.renew_deadline
        )

    def time_left(self) -> float:
        """Seconds this elector still leads (0 when it does not): until renew_deadline after
        its last successful renewal began, unless it renews again meanwhile."""
        if self._renewed_at is None:
            return 0.0
        return max(0.0, self._renewed_at + self._settings.renew_deadline - self._clock())

    @property
    def state(self) -> LeaseState:
        record = self._observed.record if self._observed else None
        return LeaseState(
            self._name,
            self._namespace,
            self._identity,
            record.holder if record else None,
            self.leading,
            record.transitions if record else 0,
            self._error,
        )

    def start(self) -> None:
        if self._task is None:
            self._stop = asyncio.Event()
            self._task = asyncio.ensure_future(self._run(self._stop))

    async def close(self, release: bool = True) -> None:
        """Stop trying (after the try under way, bounded by the request timeouts), stop
        leading, and with ``release`` hand the Lease back if it is still this elector's."""
        if self._stop is not None:
            self._stop.set()
        if self._task is not None:
            await self._task
            self._task = None
        was_leading = self._renewed_at is not None
        self._renewed_at = None
        if self._deadline is not None:
            self._deadline.cancel()
        self._report()
        if release and was_leading:
            try:
                await asyncio.to_thread(self._release)
            except KubeError as error:
                log.warning("lease %s not released: %s", self._describe(), error)
        # Its connection closed; a later start makes a new one.
        connection, self._connection = self._connection, self._new_connection()
        await asyncio.to_thread(connection.close)

    # --- the loop -----------------------------------------------------------------------------

    async def _run(self, stop: asyncio.Event) -> None:
        retry = self._settings.retry_period
        while not stop.is_set():
            began = self._clock()
            try:
                renewed = await asyncio.to_thread(self._try_acquire_or_renew, began)
            except KubeError as error:
                renewed, self._error = False, str(error)
            except Exception as error:  # a bug must not end the election for good
                log.exception("lease %s: unexpected error", self._describe())
                renewed, self._error = False, f"unexpected error: {error!r}"
            else:
                self._error = None
            if renewed:
                self._renewed(began)
            elif self._observed is not None and self._observed.record.holder != self._identity:
                self._renewed_at = None  # someone else holds it: no waiting for the deadline
            self._report()
            # The leader renews every retry_period; candidates spread out (client-go's jitter).
            wait = retry if self.leading else retry * (1 + random.random() * JITTER_FACTOR)
            await wait_set(stop, wait)

    def _renewed(self, began: float) -> None:
        self._renewed_at = began
        if self._deadline is not None:
            self._deadline.cancel()
        # Counted from when the try began: the write landed after that, so the others' clocks
        # started later still.
        delay = began + self._settings.renew_deadline - self._clock()
        self._deadline = asyncio.get_running_loop().call_later(max(delay, 0.0), self._report)

    def _report(self) -> None:
        """Log what changed (leadership, the holder) and tell ``on_change``."""
        state = self.state
        before, self._reported = self._reported, state
        if state == before:
            return
        if state.leading != before.leading:
            if state.leading:
                log.info("lease %s acquired: %s leads", self._describe(), self._identity)
            elif self._stop is not None and self._stop.is_set():
                log.info("lease %s: %s stopped leading (closing)", self._describe(), self._identity)
            else:
                log.warning(
                    "lease %s lost: %s stopped leading%s",
                    self._describe(),
                    self._identity,
                    f" ({state.error})" if state.error else "",
                )
        if state.holder != before.holder and state.holder not in (None, self._identity):
            log.info("lease %s: new holder %r", self._describe(), state.holder or "(none)")
        if state.error != before.error and state.error and not state.leading:
            log.warning("lease %s: %s", self._describe(), state.error)
        self._on_change()

    # --- one try (worker thread) ----------------------------------------------------------------

    def _try_acquire_or_renew(self, now: float) -> bool:
        """tryAcquireOrRenew: whether this elector holds the Lease after this try."""
        return self._connection.call(self._settings, lambda client: self._try(client, now))

    def _try(self, client: ApiClient, now: float) -> bool:
        wall = datetime.datetime.now(datetime.timezone.utc)
        observed = self._observed
        if (
            self._lease is not None
            and observed is not None
            and observed.record.holder == self._identity
            and observed.valid(now)
        ):
            # The fast path: renew from what was written last, without reading first.
            record = claimed(observed.record, self._identity, self._settings.lease_duration, wall)
            try:
                self._write(client, record)
                return True
            except KubeError as error:
                log.debug("lease %s: renewal failed, reading it: %s", self._describe(), error)
        try:
            lease = client.get(f"{self._path}/{quote(self._name, safe='')}")
        except ApiError as error:
            if error.status != NOT_FOUND:
                raise
            record = first_record(self._identity, self._settings.lease_duration, wall)
            body = {"metadata": {"name": self._name}, "spec": record.spec()}
            try:
                self._stored(client.create(self._path, body))
            except ApiError as error:
                if error.status == CONFLICT:  # another candidate created it first
                    return False
                raise
            return True
        self._lease = lease
        self._observed = observe(
            self._observed, LeaderRecord.from_spec(_spec(lease)), self._clock()
        )
        if not may_take(self._observed, self._identity, now):
            return False
        record = claimed(self._observed.record, self._identity, self._settings.lease_duration, wall)
        try:
            self._write(client, record)
        except ApiError as error:
            if error.status == CONFLICT:  # another candidate was quicker
                return False
            raise
        return True

    def _write(self, client: ApiClient, record: LeaderRecord) -> None:
        """Update the Lease last read or written (its resourceVersion the precondition)."""
        lease = dict(self._lease or {})
        lease["spec"] = record.spec()
        self._stored(client.replace(f"{self._path}/{quote(self._name, safe='')}", lease))

    def _stored(self, lease: dict[str, object]) -> None:
        """setObservedRecord: this elector's own write is the record it observes, from now."""
        self._lease = lease
        self._observed = Observation(LeaderRecord.from_spec(_spec(lease)), self._clock())

    def _release(self) -> None:
        """tryRelease, which tries again after a conflict (a bounded number of times here)."""
        self._connection.call(self._settings, self._release_with)

    def _release_with(self, client: ApiClient) -> None:
        for _ in range(_RELEASE_TRIES):
            lease = client.get(f"{self._path}/{quote(self._name, safe='')}")
            record = LeaderRecord.from_spec(_spec(lease))
            if record.holder != self._identity:
                return
            self._lease = lease
            wall = datetime.datetime.now(datetime.timezone.utc)
            try:
                self._write(client, released(record, wall))
            except ApiError as error:
                if error.status == CONFLICT:
                    continue
                raise
            log.info("lease %s released by %s", self._describe(), self._identity)
            return

    def _describe(self) -> str:
        return f"{self._namespace}/{self._name}"


def _spec(lease: dict[str, object]) -> dict[str, object] | None:
    spec = lease.get("spec")
    return spec if isinstance(spec, dict) else None
