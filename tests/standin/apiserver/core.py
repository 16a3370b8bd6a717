"""What every part of the API-server stand-in (nodes.py, resources.py, pods.py, scheduler.py)
uses of the whole: its lock, the history of changes watches read, and the revision counter, the
serving state and the change notice that :class:`~tests.standin.apiserver.server.ApiServerStandin`
defines."""

from __future__ import annotations

import threading

from tests.standin.apiserver.watch import History


class StandinCore:
    _cond: threading.Condition
    _history: History

    def _next_revision(self) -> str:
        raise NotImplementedError

    def _current_revision(self) -> int:
        raise NotImplementedError

    def _serving(self) -> bool:
        raise NotImplementedError

    def _changed(self, event: str) -> None:
        raise NotImplementedError
