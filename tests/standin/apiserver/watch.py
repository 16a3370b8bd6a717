"""Field selectors, the change history and watch streams of the stand-in's resource.k8s.io objects.

A watch (``GET <collection>?watch=true``) answers 200 at once and then sends one JSON line per
event, ``{"type": "ADDED"|"MODIFIED"|"DELETED", "object": {...}}``, over HTTP/1.1 chunked
encoding, until ``timeoutSeconds`` pass (1800 s if not given; the real server takes a random
time between 30 and 60 minutes) or the server stops. As the real watch cache does
(staging/src/k8s.io/apiserver/pkg/storage/cacher): without ``resourceVersion`` (or with "0") it
first sends every matching object as ADDED; with a resourceVersion it sends the changes after
it, and when that version is older than the history it keeps (``watch_history`` events, or
:meth:`compact`), a single ERROR event with a 410 ``Expired`` status ("too old resource
version: N (M)"), then ends, as the cacher's error watcher does. A field selector is applied
to each change as the cacher does: an object that stops matching is sent as DELETED, one that
starts matching as ADDED. With ``allowWatchBookmarks=true`` it sends BOOKMARK events, an
object with only ``metadata.resourceVersion`` (the current revision: every change up to it has
been sent), as the cacher's cacheWatcher.nextBookmarkTime schedules them: 2 s before the watch's
timeout and about every minute (``bookmarkFrequency``) until then.
"""

from __future__ import annotations

import copy
import json
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from tests.standin.apiserver.wire import fail, status_object

DEFAULT_WATCH_SECONDS = 1800.0
BOOKMARK_EVERY_SECONDS = 60.0
BOOKMARK_BEFORE_END_SECONDS = 2.0
# Selectable fields per collection (pkg/registry/resource/*/strategy.go, toSelectableFields;
# metadata.namespace only for namespaced ones).
FIELDS: Mapping[str, tuple[str, ...]] = {
    "resourceslices": ("metadata.name", "spec.nodeName", "spec.driver"),
    "resourceclaims": ("metadata.name", "metadata.namespace"),
    "deviceclasses": ("metadata.name",),
    # pkg/registry/core/node/strategy.go, NodeToSelectableFields.
    "nodes": ("metadata.name", "spec.unschedulable"),
    # pkg/registry/core/pod/strategy.go, ToSelectableFields (the ones a field_value reaches).
    "pods": (
        "metadata.name",
        "metadata.namespace",
        "spec.nodeName",
        "spec.restartPolicy",
        "spec.schedulerName",
        "spec.serviceAccountName",
        "status.phase",
        "status.podIP",
        "status.nominatedNodeName",
    ),
}

Requirement = tuple[str, str, str]  # field, "=" or "!=", value


def parse_field_selector(collection: str, text: str) -> tuple[Requirement, ...]:
    """``a=b,c==d,e!=f``; an unknown field is 400 as on the real server."""
    requirements = []
    for part in filter(None, text.split(",")):
        for operator in ("!=", "==", "="):
            if operator in part:
                field, _, value = part.partition(operator)
                break
        else:
            raise fail(400, "BadRequest", f'invalid selector: "{text}"; can\'t understand "{part}"')
        field = field.strip()
        if field not in FIELDS[collection]:
            raise fail(400, "BadRequest", f"field label not supported: {field}")
        requirements.append((field, "!=" if operator == "!=" else "=", value.strip()))
    return tuple(requirements)


def exact_name(requirements: tuple[Requirement, ...]) -> str:
    """The name a ``metadata.name=`` selector asks for, else "" (the request info's name for a
    list or watch, which authorizers see)."""
    exact = [value for field, operator, value in requirements if field == "metadata.name"]
    return exact[0] if len(exact) == 1 and ("metadata.name", "=", exact[0]) in requirements else ""


def field_value(obj: Mapping[str, Any], field: str) -> str:
    section, _, key = field.partition(".")
    value = (obj.get(section) or {}).get(key)
    return "" if value is None else str(value)


def matches(obj: Mapping[str, Any], requirements: tuple[Requirement, ...]) -> bool:
    return all(
        (field_value(obj, field) == value) == (operator == "=")
        for field, operator, value in requirements
    )


@dataclass(frozen=True)
class Change:
    """One write, as etcd's history keeps it."""

    revision: int
    collection: str
    type: str  # ADDED, MODIFIED, DELETED
    obj: Mapping[str, Any]
    old: Mapping[str, Any] | None


class History:
    """The last ``size`` changes of every collection; older revisions are gone (410)."""

    def __init__(self, size: int) -> None:
        self.changes: deque[Change] = deque(maxlen=size)
        self.oldest = 0  # revisions up to this one can no longer be watched from

    def add(self, change: Change) -> None:
        if len(self.changes) == self.changes.maxlen:
            self.oldest = self.changes[0].revision
        self.changes.append(change)

    def since(self, revision: int) -> tuple[Change, ...]:
        """The changes after ``revision`` that it still holds, oldest first."""
        newer = []
        for change in reversed(self.changes):
            if change.revision <= revision:
                break
            newer.append(change)
        return tuple(reversed(newer))

    def compact(self, revision: int) -> None:
        """Forget every change up to ``revision``, as an etcd compaction does."""
        while self.changes and self.changes[0].revision <= revision:
            self.changes.popleft()
        self.oldest = max(self.oldest, revision)


def event_for(change: Change, requirements: tuple[Requirement, ...]) -> dict[str, Any] | None:
    """The event a filtered watch sends for ``change``, if any."""
    now = matches(change.obj, requirements)
    before = change.old is not None and matches(change.old, requirements)
    if change.type == "MODIFIED":
        kind = {(True, True): "MODIFIED", (False, True): "ADDED", (True, False): "DELETED"}
        event_type = kind.get((before, now))
        if event_type is None:
            return None
    elif not now:
        return None
    else:
        event_type = change.type
    return {"type": event_type, "object": copy.deepcopy(dict(change.obj))}


def watch_from_params(
    params: Mapping[str, str],
    cond: threading.Condition,
    history: History,
    collection: str,
    current: Callable[[], list[dict[str, Any]]],
    revision: Callable[[], int],
    alive: Callable[[], bool],
    requirements: tuple[Requirement, ...],
) -> Iterator[bytes]:
    """A watch as its query asks for it (``resourceVersion``, ``timeoutSeconds``,
    ``allowWatchBookmarks``); 400 for a resourceVersion that is not one."""
    since = params.get("resourceVersion", "")
    if since and not since.isdigit():
        # A 400 as for any unparsable option; the real server's exact words not checked.
        raise fail(400, "BadRequest", f'invalid resource version "{since}"')
    return watch_stream(
        cond,
        history,
        collection,
        current,
        revision,
        alive,
        requirements,
        since,
        float(params.get("timeoutSeconds") or DEFAULT_WATCH_SECONDS),
        bookmarks=params.get("allowWatchBookmarks") in ("true", "1"),
    )


def watch_stream(
    cond: threading.Condition,
    history: History,
    collection: str,
    current: Callable[[], list[dict[str, Any]]],
    revision: Callable[[], int],
    alive: Callable[[], bool],
    requirements: tuple[Requirement, ...],
    since: str,
    timeout: float,
    bookmarks: bool = False,
) -> Iterator[bytes]:
    """The events of one watch, each a JSON line; runs in the request's thread and takes
    ``cond``'s lock only to look (the caller must not hold it while iterating)."""
    started = time.monotonic()
    deadline = started + timeout
    bookmark_at = _next_bookmark(started, deadline) if bookmarks else None
    with cond:
        initial, seen = _initial_events(history, current, revision, since)
    for event in initial:
        yield json.dumps(event).encode() + b"\n"
    if seen < 0:
        return
    while True:
        bookmark: dict[str, Any] | None = None
        with cond:
            pending: list[Change] = []
            while True:
                if seen < history.oldest:  # fell behind the history: the client must list again
                    return
                pending = [c for c in history.changes if c.revision > seen]
                now = time.monotonic()
                if pending or now >= deadline or not alive():
                    break
                if bookmark_at is not None and now >= bookmark_at:
                    seen = revision()  # nothing after ``seen`` is pending: all of it was sent
                    bookmark = {"type": "BOOKMARK", "object": _bookmark_object(seen)}
                    bookmark_at = _next_bookmark(now, deadline)
                    break
                wait_until = deadline if bookmark_at is None else min(deadline, bookmark_at)
                cond.wait(wait_until - now)
        if bookmark is not None:
            yield json.dumps(bookmark).encode() + b"\n"
            continue
        if not pending:
            return
        seen = pending[-1].revision
        for change in pending:
            sent = event_for(change, requirements) if change.collection == collection else None
            if sent is not None:
                yield json.dumps(sent).encode() + b"\n"


def _initial_events(
    history: History,
    current: Callable[[], list[dict[str, Any]]],
    revision: Callable[[], int],
    since: str,
) -> tuple[list[dict[str, Any]], int]:
    """What a watch sends first, and the revision it has sent up to (-1: it ends there)."""
    if since in ("", "0"):
        return [{"type": "ADDED", "object": obj} for obj in current()], revision()
    seen = int(since)
    if seen < history.oldest:
        message = f"too old resource version: {seen} ({history.oldest})"
        return [{"type": "ERROR", "object": status_object(410, "Expired", message)}], -1
    return [], seen


def _next_bookmark(now: float, deadline: float) -> float | None:
    """When the next bookmark is due: a minute on, or 2 s before the end if that is sooner;
    None once the end is that close."""
    before_end = deadline - BOOKMARK_BEFORE_END_SECONDS
    if now >= before_end:
        return None
    return min(now + BOOKMARK_EVERY_SECONDS, before_end)


def _bookmark_object(revision: int) -> dict[str, Any]:
    return {"metadata": {"resourceVersion": str(revision)}}
