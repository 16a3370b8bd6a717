"""bench/audit.py counts each request of a window once: a watch when it was opened."""

from __future__ import annotations

from typing import Any

from bench.audit import COMPLETE, STARTED, requests_of

START = "2026-12-06T10:00:10.000000Z"
BEFORE = "2026-12-06T10:00:09.000000Z"
IN = "2026-12-06T10:00:11.000000Z"


def event(audit_id: str, stage: str, verb: str, received: str) -> dict[str, Any]:
    return {"auditID": audit_id, "stage": stage, "verb": verb, "requestReceivedTimestamp": received}


def test_a_watch_counts_when_opened_and_once_an_ordinary_request_when_complete() -> None:
    events = [
        event("opened", STARTED, "watch", IN),
        event("opened", COMPLETE, "watch", IN),  # opened and ended in the window: once
        event("earlier", COMPLETE, "watch", BEFORE),  # opened before the window: not at all
        event("refused", COMPLETE, "watch", IN),  # ended before its response started
        event("list", COMPLETE, "list", BEFORE),  # received before, completed in the window
    ]
    counted = requests_of(events, START)
    assert sorted(e["auditID"] for e in counted) == ["list", "opened", "refused"]
    assert [e["stage"] for e in counted if e["auditID"] == "opened"] == [STARTED]
