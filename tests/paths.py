"""Short directories of the tests' own for unix sockets.

A unix socket's path holds at most 107 bytes. pytest's ``tmp_path`` lies under ``$TMPDIR``,
which may itself be long (a CI runner's private directory), and then leaves no room for a
socket name; so every socket a test binds lives in a directory made here, directly under
``/tmp``, whatever ``$TMPDIR`` says.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

SOCKET_ROOT = Path("/tmp")


def short_directory(prefix: str) -> Path:
    """A new, empty directory under ``/tmp``; the caller removes it."""
    return Path(tempfile.mkdtemp(prefix=prefix, dir=SOCKET_ROOT))


@contextlib.contextmanager
def short_temporary_directory(prefix: str) -> Iterator[Path]:
    directory = short_directory(prefix)
    try:
        yield directory
    finally:
        shutil.rmtree(directory, ignore_errors=True)
