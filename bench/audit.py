"""Counting the fleet's requests from the API server's audit log (bench/scale.py,
bench/claim_churn.py, bench/mass_restart.py).

The policy logs the real agents and the publisher (everything of theirs) and kwok's Lease
renewals (the kubelets' own traffic, for comparison), nothing else: at 5,000 nodes the rest
would be most of the disk and CPU. It keeps two stages: ``ResponseComplete``, which every
request logs when it ends, and ``ResponseStarted``, which only a long-running request (a
watch) logs, when it is opened. A request is counted once (by its ``auditID``), in the window
its first logged stage fell in: a watch when it was opened (it ends minutes later, so counted
by its end it would fall in a later window, or none), anything else when it completed. A watch
refused before its response started (403, 410) logs only its end, and counts there if it was
received in the window.
"""

from __future__ import annotations

import datetime
import json
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

AUDIT_POLICY = """\
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
  userGroups: ["system:nodes", "system:serviceaccounts"]
- level: Metadata
  users: ["kwok"]
  resources: [{group: coordination.k8s.io, resources: [leases]}]
- level: None
"""
KWOK = "kwok"
STARTED = "ResponseStarted"
COMPLETE = "ResponseComplete"

# The API server's audit events are stamped in RFC 3339 with microseconds, which sort as text.
_STAGE_AT = re.compile(rb'"stageTimestamp":"([^"]+)"')


def audit_time() -> str:
    """Now, as the audit log stamps its events."""
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def audit_events(directory: Path, start: str, end: str) -> list[dict[str, Any]]:
    """Every audit event whose stage fell from ``start`` to ``end``, from the log and the
    copies it was rotated into (the API server rotates it at 100 MB: at 5,000 Nodes kwok's
    Lease renewals fill that in minutes, and a window read from an offset in the file found
    nothing)."""
    events = []
    for path in sorted(directory.glob("audit*.log")):
        with path.open("rb") as log:
            for line in log:
                stamp = _STAGE_AT.search(line)
                if stamp and start <= stamp[1].decode() < end:
                    events.append(json.loads(line))
    return events


def requests_of(events: Iterable[dict[str, Any]], start: str) -> list[dict[str, Any]]:
    """The requests the window's ``events`` (audit_events from ``start``) count, one event
    each: a request's ResponseStarted if it has one in the window (a watch opened in it),
    else its ResponseComplete, but for a watch opened before the window."""
    events = list(events)
    started = {e["auditID"]: e for e in events if e.get("stage") == STARTED}
    counted = dict(started)
    for event in events:
        if event.get("stage") != COMPLETE or event["auditID"] in started:
            continue
        opened_before = event.get("verb") == "watch" and event["requestReceivedTimestamp"] < start
        if not opened_before:
            counted.setdefault(event["auditID"], event)
    return list(counted.values())


@dataclass
class Requests:
    """The window's requests per user, as ``verb resource``; kwok's Lease renewals apart."""

    per_user: dict[str, Counter[str]] = field(default_factory=dict)
    leases: int = 0

    @classmethod
    def read(cls, directory: Path, start: str, end: str) -> Requests:
        requests = cls()
        for event in requests_of(audit_events(directory, start, end), start):
            user = event["user"]["username"]
            if user == KWOK:
                requests.leases += 1
                continue
            ref = event.get("objectRef") or {}
            what = f"{event['verb']} {ref.get('resource', '?')}"
            requests.per_user.setdefault(user, Counter())[what] += 1
        return requests

    def of(self, user: str) -> Counter[str]:
        return self.per_user.get(user, Counter())
