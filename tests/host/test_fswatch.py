"""The directory watcher (watchdog underneath) when a watched directory is deleted and made
again at once, which the agent does with its socket directory and a ConfigMap does with the
configuration's directory at every update.

watchdog stops the watch of a deleted directory by itself; before 5.0.3 it did not guard that
against a second stop, so an unschedule at the same moment closed the watch's inotify
descriptor twice, and the second close hit whatever the process had opened in between under
that number: a new watch, or a gRPC server's listening socket (the listener gone, its socket
file left: a kubelet that dials it times out). Found with Debian 12's watchdog 2.2.1 in
tests/kubelet/test_plugin_sockets.py, 1 run in 15.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.paths import short_temporary_directory
from token_resource.host.fswatch import DirectoryWatcher, FileEvent

ROUNDS = 150
FILES = [f"file-{number}" for number in range(20)]
EVENT_TIMEOUT = 10.0


@pytest.fixture
def thread_failures() -> Iterator[list[BaseException]]:
    """Exceptions that end any thread (watchdog's readers) while the test runs."""
    failures: list[BaseException] = []
    previous = threading.excepthook

    def record(args: threading.ExceptHookArgs) -> None:
        failures.append(args.exc_value or RuntimeError(str(args.exc_type)))
        previous(args)

    threading.excepthook = record
    yield failures
    threading.excepthook = previous


async def _recreate_and_rewatch(parent: Path, listeners: list[socket.socket]) -> None:
    """Delete the watched directory ``ROUNDS`` times; at the first event of each deletion
    (one of its files gone: watchdog is about to stop that watch itself) make it again, watch
    it afresh and open a listening socket in it, as the agent does (into ``listeners``, which
    the caller closes)."""
    loop = asyncio.get_running_loop()
    events: asyncio.Queue[FileEvent] = asyncio.Queue()
    watcher = DirectoryWatcher(loop, events.put_nowait)
    watched = parent / "watched"
    watched.mkdir()
    watcher.start()
    try:
        watcher.watch(parent)
        watcher.watch(watched)
        for round_ in range(ROUNDS):
            for name in FILES:
                (watched / name).write_bytes(b"")
            removal = loop.run_in_executor(None, shutil.rmtree, watched)
            while True:
                event = await asyncio.wait_for(events.get(), EVENT_TIMEOUT)
                if event.kind == "deleted" and event.path.parent == watched:
                    break
            await removal
            watched.mkdir()
            watcher.watch(watched)
            listener = socket.socket(socket.AF_UNIX)
            listeners.append(listener)
            listener.bind(str(watched / f"round-{round_}.sock"))
            listener.listen()
        # The last watch still reports.
        (watched / "last").write_bytes(b"")
        while True:
            event = await asyncio.wait_for(events.get(), EVENT_TIMEOUT)
            if event.path == watched / "last":
                return
    finally:
        watcher.stop()


def _teardown_of_a_watch() -> tuple[type, str]:
    """The class and method that release one watch's inotify resources, in this watchdog."""
    try:
        from watchdog.observers.inotify_c import Inotify  # noqa: PLC0415
    except ImportError:  # watchdog 7: one shared descriptor, a group of watches per emitter
        from watchdog.observers import inotify  # noqa: PLC0415

        group: type = getattr(inotify, "InotifyWatchGroup")  # noqa: B009 (not in older stubs)
        return group, "deactivate"
    # The descriptor's own close. Since watchdog 5, close() may run twice for one watch (the
    # emitter's stop, on two threads; CI: watchdog 6.0.0, 4 runs in 40), and closes the
    # descriptor only the first time, in _close_resources; before 5, close() itself closed it.
    return Inotify, "_close_resources" if hasattr(Inotify, "_close_resources") else "close"


@pytest.fixture
def watch_teardowns(monkeypatch: pytest.MonkeyPatch) -> dict[int, int]:
    """How many times each watch's inotify resources were released (by object id)."""
    counts: dict[int, int] = {}
    kept: list[object] = []
    lock = threading.Lock()
    owner, name = _teardown_of_a_watch()
    teardown = getattr(owner, name)

    def counted(self: object) -> None:
        with lock:
            counts[id(self)] = counts.get(id(self), 0) + 1
            kept.append(self)  # alive, so that no later one gets its id
        teardown(self)

    monkeypatch.setattr(owner, name, counted)
    return counts


def test_a_directory_deleted_and_watched_again_closes_nothing_of_ours(
    thread_failures: list[BaseException], watch_teardowns: dict[int, int]
) -> None:
    listeners: list[socket.socket] = []
    # The listeners' socket paths must fit in 107 bytes, whatever $TMPDIR is (tests/paths.py).
    try:
        with short_temporary_directory("tr-fswatch-") as parent:
            asyncio.run(_recreate_and_rewatch(parent, listeners))
            # Every listener opened meanwhile still has its descriptor and still listens.
            for listener in listeners:
                assert listener.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN) == 1
                os.fstat(listener.fileno())
        assert thread_failures == []
        # Each watch stopped by itself and was unscheduled, and released its descriptor once.
        assert watch_teardowns
        assert set(watch_teardowns.values()) == {1}
    finally:
        for listener in listeners:
            listener.close()
