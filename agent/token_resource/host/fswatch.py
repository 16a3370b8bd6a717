"""File-system events (inotify, through the watchdog library) delivered on the asyncio loop."""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from watchdog import version
from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers import Observer
from watchdog.observers.api import DEFAULT_OBSERVER_TIMEOUT, BaseObserver
from watchdog.observers.inotify import InotifyEmitter


@dataclass(frozen=True)
class FileEvent:
    kind: str  # "created", "deleted", "modified", "moved", "closed", ...
    path: Path
    is_directory: bool
    dest: Path | None = None  # the new name, for "moved"

    def touches(self, path: Path) -> bool:
        return path in (self.path, self.dest)


class _Forwarder(FileSystemEventHandler):
    """Runs on watchdog's thread: hands each event to the loop and does nothing else."""

    def __init__(self, loop: asyncio.AbstractEventLoop, callback: Callable[[FileEvent], None]):
        self._loop = loop
        self._callback = callback

    def on_any_event(self, event: FileSystemEvent) -> None:
        dest = getattr(event, "dest_path", None)
        file_event = FileEvent(
            kind=event.event_type,
            path=Path(os.fsdecode(event.src_path)),
            is_directory=event.is_directory,
            dest=Path(os.fsdecode(dest)) if dest else None,
        )
        self._loop.call_soon_threadsafe(self._callback, file_event)


class _SerializedStopEmitter(InotifyEmitter):
    """watchdog's inotify watch, stopped by one thread at a time.

    watchdog stops the watch of a deleted directory by itself, on its own thread. Before 5.0.3
    (gorakhargosh/watchdog#1070) an unschedule at that moment, which is what watching the
    directory again after it is made anew does, ran the same stop on the agent's thread, and
    both closed the watch's inotify descriptor: the second close hit whatever the agent had
    opened meanwhile under that number, a gRPC server's listening socket (gone, its file
    left: the kubelet's dial timed out) or the next watch's descriptor.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._stopping = threading.Lock()

    def on_thread_stop(self) -> None:
        with self._stopping:
            super().on_thread_stop()


def _observer() -> BaseObserver:
    if (version.VERSION_MAJOR, version.VERSION_MINOR, version.VERSION_BUILD) < (5, 0, 3):
        return BaseObserver(_SerializedStopEmitter, timeout=DEFAULT_OBSERVER_TIMEOUT)
    return Observer()


class DirectoryWatcher:
    """Watches directories (not recursively) and calls ``callback`` on the loop for each event.

    Directories rather than files: editors and configuration management save by writing a
    new file and renaming it over the old one, which a watch on the old file would miss.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, callback: Callable[[FileEvent], None]):
        self._forwarder = _Forwarder(loop, callback)
        self._observer = _observer()
        self._observer.daemon = True
        self._watches: dict[Path, Any] = {}

    def start(self) -> None:
        self._observer.start()

    def watch(self, directory: Path) -> None:
        """Watch ``directory``, afresh if it was watched before (it may have been re-created)."""
        self.unwatch(directory)
        self._watches[directory] = self._observer.schedule(
            self._forwarder, str(directory), recursive=False
        )

    def unwatch(self, directory: Path) -> None:
        watch = self._watches.pop(directory, None)
        if watch is not None:
            # watchdog may already have dropped the watch of a deleted directory.
            with contextlib.suppress(KeyError):
                self._observer.unschedule(watch)

    def stop(self) -> None:
        if self._observer.is_alive():
            self._observer.stop()
            self._observer.join(timeout=5)
