"""File-system events (inotify, through the watchdog library) delivered on the asyncio loop."""

from __future__ import annotations

import asyncio
import contextlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers import Observer


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


class DirectoryWatcher:
    """Watches directories (not recursively) and calls ``callback`` on the loop for each event.

    Directories rather than files: editors and configuration management save by writing a
    new file and renaming it over the old one, which a watch on the old file would miss.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, callback: Callable[[FileEvent], None]):
        self._forwarder = _Forwarder(loop, callback)
        self._observer = Observer()
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
