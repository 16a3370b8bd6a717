"""Following the files as they change: the directories they resolve through watched, and a
reload asked for after each complete write, once a burst of events has settled."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path

from token_resource.config.watch import DISAPPEARED_SETTLE_SECONDS, ConfigPaths
from token_resource.host.fswatch import DirectoryWatcher, FileEvent

log = logging.getLogger(__name__)


class ConfigFollower:
    """``reload()`` is called on the loop when the files changed; ``kept()`` names directories
    that others watch through the same ``watcher`` (left alone here)."""

    def __init__(
        self,
        main: Path,
        watcher: DirectoryWatcher,
        reload: Callable[[], None],
        kept: Callable[[], set[Path]],
    ) -> None:
        self._paths = ConfigPaths(main)
        self._watcher = watcher
        self._reload = reload
        self._kept = kept
        self._directories: set[Path] = set()
        self._pending: asyncio.TimerHandle | None = None

    def refresh(self, renewed: Path | None = None) -> None:
        """Watch the directories of every path the configuration resolves through now, and
        ``renewed`` afresh (a directory re-created under the same name needs a new watch)."""
        wanted = self._paths.refresh()
        kept = self._kept()
        for directory in self._directories - wanted - kept:
            self._watcher.unwatch(directory)
        for directory in sorted(wanted - kept):
            if directory in self._directories and directory != renewed:
                continue
            try:
                self._watcher.watch(directory)
            except OSError as error:
                # Gone again, or not watchable: the reload says what is wrong with the files.
                log.warning("cannot watch %s: %s", directory, error)
                wanted.discard(directory)
        self._directories = wanted

    def on_file_event(self, event: FileEvent) -> None:
        if not self._paths.concerns(event):
            return
        # A directory created or renamed into place under a watched name is a new one.
        renewed = event.dest or event.path
        appeared = event.is_directory and event.kind in ("created", "moved")
        self.refresh(renewed if appeared else None)
        settle = self._paths.settle_delay(event)
        if settle is not None:
            self._reload_soon(settle)

    def cancel(self) -> None:
        if self._pending is not None:
            self._pending.cancel()
            self._pending = None

    def _reload_soon(self, settle: float) -> None:
        """Reload after ``settle`` seconds; a later event within them starts the wait again,
        except that a disappearance never postpones a reload already due: the old link or
        file going away after a new one was renamed into place (a ConfigMap update) is no
        reason to wait."""
        if self._pending is not None:
            if settle == DISAPPEARED_SETTLE_SECONDS:
                return
            self._pending.cancel()
        self._pending = asyncio.get_running_loop().call_later(settle, self._reload_now)

    def _reload_now(self) -> None:
        self._pending = None
        self._reload()
