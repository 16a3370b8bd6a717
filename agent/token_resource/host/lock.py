"""One agent per device-plugin directory: two would fight over the same sockets.

The lock is an exclusive flock on the directory itself, not on a file in it: a starting
kubelet (1.24 to 1.32) deletes every file there except its checkpoint, a lock file included,
after which a second agent could lock a new file of the same name. The directory stays, and
a flock on it holds across mount namespaces (a bind-mounted directory is the same inode).
"""

from __future__ import annotations

import asyncio
import fcntl
import os
from collections.abc import Callable
from pathlib import Path

PROC_LOCKS = Path("/proc/locks")


class LockError(Exception):
    """Another agent holds the directory."""


class DirectoryLock:
    """An exclusive flock on ``directory`` itself; the kernel releases it however the process
    ends. Nothing is created in the directory."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> None:
        """Take the lock now, or raise LockError naming the agent that holds it."""
        if self._fd is not None:
            return
        fd = os.open(self.directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = lock_holder(os.fstat(fd))
            os.close(fd)
            raise LockError(
                f"another token-resource agent (pid {holder or 'unknown'}) "
                f"is already serving {self.directory}"
            ) from None
        self._fd = fd

    async def wait(self, on_wait: Callable[[str], None], poll: float = 0.2) -> None:
        """Take the lock once its holder is gone, telling ``on_wait`` once who is awaited.
        Polled (a blocked flock would hold a thread that a stop cannot end)."""
        told = False
        while True:
            try:
                self.acquire()
                return
            except LockError as error:
                if not told:
                    on_wait(str(error))
                    told = True
            await asyncio.sleep(poll)

    def release(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)


def lock_holder(stat: os.stat_result, proc_locks: Path | None = None) -> int | None:
    """The pid holding a flock on the file of ``stat``, from ``/proc/locks``; None if unknown
    (not listed, or the holder is in a pid namespace this process cannot see)."""
    wanted = f"{os.major(stat.st_dev):02x}:{os.minor(stat.st_dev):02x}:{stat.st_ino}"
    try:
        text = (proc_locks or PROC_LOCKS).read_text()
    except OSError:
        return None
    # e.g. "1: FLOCK  ADVISORY  WRITE 1234 fd:01:5678 0 EOF"; waiters have "->" after "1:".
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 6 or fields[1] != "FLOCK" or fields[5] != wanted:
            continue
        try:
            pid = int(fields[4])
        except ValueError:
            continue
        if pid > 0:
            return pid
    return None
