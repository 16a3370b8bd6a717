"""Network partitions between one client and the API server stand-in (a mixin of
:class:`~tests.standin.apiserver.server.ApiServerStandin`).

A test cuts a client off by the user its requests authenticate as (``cut_off(user=...)``, e.g.
``system:node:node-a``) or by its bearer token (``cut_off(token=...)``: the replicas of one
Deployment share a service account, hence a user, but each pod has a token of its own). Until
:meth:`~PartitionMixin.reconnect`, each of its requests hangs as if its packets were lost: the
stand-in neither answers it nor acts on it, so the client sees its own timeout, never a
refusal. When the cut is lifted, a request whose client still waits goes through (TCP
retransmits it once the path is back); one whose client gave up meanwhile is dropped
unanswered and unserved. A client has given up when its connection becomes readable: it closed
it, or sent something more, which an HTTP/1.1 client waiting for an answer never does. The
events of a watch the client holds open are held the same way, and arrive after the cut unless
the client gave up. The server stopping ends every held request unanswered.

Requests held right now and the ones dropped are in the view (``ApiServerView.held``,
``.dropped``; a held watch event shows as its watch request), so a test can wait until a cut
client is stuck. The stand-in always runs in the test's own process (threads serve it), so
these methods are the control; nothing crosses a process boundary.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from tests.standin.apiserver.core import StandinCore
from tests.standin.apiserver.wire import Identity

_POLL = 0.05  # how often a held request looks whether its client gave up


@dataclass(frozen=True, eq=False)  # each held request is itself, however alike two look
class HeldRequest:
    """A request of a cut-off client, held unanswered."""

    method: str
    path: str
    query: str
    identity: str  # the user it authenticated as

    def __str__(self) -> str:
        query = f"?{self.query}" if self.query else ""
        return f"{self.method} {self.path}{query} [{self.identity}]"


class Cuts:
    """Who is cut off, and the requests that cut holds or dropped."""

    def __init__(self) -> None:
        self.users: set[str] = set()
        self.tokens: set[str] = set()
        self.held: list[HeldRequest] = []
        self.dropped: list[HeldRequest] = []

    def cuts(self, identity: Identity) -> bool:
        return identity.user in self.users or (
            identity.token is not None and identity.token in self.tokens
        )


class PartitionMixin(StandinCore):
    _cuts: Cuts

    def cut_off(self, *, user: str | None = None, token: str | None = None) -> None:
        """Cut off the client that authenticates as ``user``, or with bearer ``token``: its
        requests hang from now on, including those on connections already open."""
        if user is None and token is None:
            raise ValueError("cut off whom? name a user or a token")
        with self._cond:
            if user is not None:
                self._cuts.users.add(user)
            if token is not None:
                self._cuts.tokens.add(token)
            self._changed(f"cut off: user {user}, token {'given' if token else None}")

    def reconnect(self, *, user: str | None = None, token: str | None = None) -> None:
        """Lift the cut of that ``user`` or ``token``, or (neither named) every cut: held
        requests whose clients still wait are served now."""
        with self._cond:
            if user is None and token is None:
                self._cuts.users.clear()
                self._cuts.tokens.clear()
            self._cuts.users.discard(user or "")
            self._cuts.tokens.discard(token or "")
            self._changed(f"reconnected: user {user}, token {'given' if token else None}")

    def _hold(self, identity: Identity, request: HeldRequest, gone: Callable[[], bool]) -> bool:
        """While ``identity`` is cut off, wait (the lock released); then True to serve the
        request, False to drop it: its client gave up, or the server stopped. The caller holds
        the lock."""
        if not self._cuts.cuts(identity):
            return True
        self._cuts.held.append(request)
        self._changed(f"held, its client cut off: {request}")
        try:
            while self._cuts.cuts(identity) and self._serving() and not gone():
                self._cond.wait(_POLL)
            if self._serving() and not gone():
                return True
            self._cuts.dropped.append(request)
            self._changed(f"dropped unanswered: {request}")
            return False
        finally:
            self._cuts.held.remove(request)

    def _held_stream(
        self,
        stream: Iterator[bytes],
        identity: Identity,
        request: HeldRequest,
        gone: Callable[[], bool],
    ) -> Iterator[bytes]:
        """A watch's events, each held while its client is cut off (it runs in the request's
        thread, outside the lock)."""
        try:
            for event in stream:
                with self._cond:
                    if not self._hold(identity, request, gone):
                        return
                yield event
        finally:
            close = getattr(stream, "close", None)
            if close is not None:
                close()
