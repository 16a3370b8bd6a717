"""Which file events concern the configuration, and how soon to reload for them.

The main file, the drop-in directory and each drop-in may be symlinks, through any number of
links, and replacing any link on the way changes the configuration as much as writing the file
does. A ConfigMap volume is exactly that::

    token-resource.toml -> ..data/token-resource.toml
    ..data              -> ..2026_11_30_10_50_00.123456789

and the kubelet updates it by writing a new timestamped directory, pointing a new ``..data_tmp``
link at it and renaming that over ``..data``. So the names watched are every path met while
resolving each file, and the directories watched are theirs.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from pathlib import Path

from token_resource.config.errors import ConfigError
from token_resource.config.load import config_files, dropin_dir
from token_resource.host.fswatch import FileEvent

# A reload follows a complete write (closed after writing, renamed or linked into place) after
# this settle delay, which lets a burst of such events end in one reload.
RELOAD_SETTLE_SECONDS = 0.02
# A file that disappears is often being saved (vim renames the old file away before writing the
# new one): wait longer, so that the new file's close or rename comes first.
DISAPPEARED_SETTLE_SECONDS = 0.5
# As the kernel's limit on links followed in one lookup.
_MAX_LINKS = 40


def resolution(path: Path) -> list[Path]:
    """``path``, every symlink met while resolving it, and where it ends, as absolute paths.

    A change of any of them can change what ``path`` reads. Resolution stops at the first
    missing component (which may appear later) and after too many links.
    """
    path = Path(os.path.abspath(path))  # absolute, links not followed: events name it so
    met = [path]
    resolved = Path(path.anchor)
    pending = list(path.parts[1:])
    links = 0
    while pending:
        part = pending.pop(0)
        if part in ("", "."):
            continue
        if part == "..":
            resolved = resolved.parent
            continue
        candidate = resolved / part
        try:
            info = candidate.lstat()
        except OSError:
            met.append(candidate)
            return _unique(met)
        if not stat.S_ISLNK(info.st_mode):
            resolved = candidate
            continue
        links += 1
        met.append(candidate)
        if links > _MAX_LINKS:
            return _unique(met)
        target = Path(os.readlink(candidate))
        if target.is_absolute():
            resolved = Path(target.anchor)
            pending[:0] = target.parts[1:]
        else:
            pending[:0] = target.parts
    met.append(resolved)
    return _unique(met)


def _unique(paths: list[Path]) -> list[Path]:
    return list(dict.fromkeys(paths))


class ConfigPaths:
    """The names and directories to watch for one main file and its drop-ins."""

    def __init__(self, main: Path) -> None:
        self.main = main
        self.dropin_dir = dropin_dir(main)
        self._names: set[Path] = set()
        self._dropin_dirs: set[Path] = set()

    def refresh(self) -> set[Path]:
        """Resolve every file afresh (links may have changed); return the directories to watch."""
        try:
            files: Iterable[Path] = config_files(self.main)
        except ConfigError:
            files = [self.main]  # an unreadable drop-in directory: the reload will say so
        names = {name for path in (self.dropin_dir, *files) for name in resolution(path)}
        dropin_chain = resolution(self.dropin_dir)
        self._names = names | {self.main}
        # Drop-ins may appear in the directory as it is named and as it resolves.
        self._dropin_dirs = {self.dropin_dir, dropin_chain[-1]}
        directories = {name.parent for name in self._names}
        directories |= {path for path in self._dropin_dirs if path.is_dir()}
        return {path for path in directories if path.is_dir()}

    def concerns(self, event: FileEvent) -> bool:
        return any(path is not None and self._concerns(path) for path in (event.path, event.dest))

    def _concerns(self, path: Path) -> bool:
        return path in self._names or (path.parent in self._dropin_dirs and path.suffix == ".toml")

    def settle_delay(self, event: FileEvent) -> float | None:
        """How long to wait before reloading for an event that concerns us; None: not yet.

        Only complete writes count: a file being written (opened, truncated, written in chunks)
        is read once its writer closes it, never half-way, so a resource that stays in the final
        file is never removed for a moment.
        """
        if event.kind == "closed":
            return RELOAD_SETTLE_SECONDS
        if event.kind == "moved":
            # Renamed into place (a file, a drop-in, the ..data link): complete. Renamed away:
            # perhaps the first step of a save.
            arrived = event.dest is not None and self._concerns(event.dest)
            return RELOAD_SETTLE_SECONDS if arrived else DISAPPEARED_SETTLE_SECONDS
        if event.kind == "deleted":
            return DISAPPEARED_SETTLE_SECONDS
        if event.kind == "created":
            # A new directory, symlink or hard link is complete when it appears; a new regular
            # file is not until its writer closes it.
            complete = event.is_directory or _complete_on_creation(event.path)
            return RELOAD_SETTLE_SECONDS if complete else None
        return None  # "modified": a write in progress


def _complete_on_creation(path: Path) -> bool:
    try:
        info = path.lstat()
    except OSError:
        return True  # gone again: the reload will say what is there now
    return stat.S_ISLNK(info.st_mode) or info.st_nlink > 1
