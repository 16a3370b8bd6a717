"""Log lines for a terminal, or for the journal with their syslog priority.

A service's stderr is a stream socket to journald, which stores every line at the unit's
default priority (info) unless the line starts with a kernel-style ``<N>`` prefix: then it
strips the prefix and stores the line at priority N. So under systemd every line written here
gets its prefix, and ``journalctl -p err`` sees the agent's errors; in a terminal, a
container or a file the lines stay plain and carry a time instead.

Whether stderr is the journal follows systemd.exec(5): ``$JOURNAL_STREAM`` holds the device
and inode numbers of the stream systemd connected, as ``DEVICE:INODE`` in decimal, and only a
stream with the same numbers is that connection (a child whose stderr was redirected inherits
the variable all the same).
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Mapping
from typing import TextIO

# syslog(3) priorities
CRITICAL = 2
ERROR = 3
WARNING = 4
INFO = 6
DEBUG = 7


def syslog_priority(levelno: int) -> int:
    """The syslog priority of a logging level (levels between two go to the less severe)."""
    if levelno >= logging.CRITICAL:
        return CRITICAL
    if levelno >= logging.ERROR:
        return ERROR
    if levelno >= logging.WARNING:
        return WARNING
    if levelno >= logging.INFO:
        return INFO
    return DEBUG


def is_journal(stream: TextIO, environ: Mapping[str, str] = os.environ) -> bool:
    """Whether ``stream`` is the journal connection that ``$JOURNAL_STREAM`` names."""
    device, colon, inode = environ.get("JOURNAL_STREAM", "").partition(":")
    if not (colon and device.isdigit() and inode.isdigit()):
        return False
    try:
        status = os.fstat(stream.fileno())
    except (OSError, ValueError):  # no descriptor (io.StringIO, pytest's capture) or closed
        return False
    return (status.st_dev, status.st_ino) == (int(device), int(inode))


def with_priority(text: str, priority: int) -> str:
    """``text`` with ``<priority>`` before every line: journald reads each line on its own."""
    return "\n".join(f"<{priority}>{line}" for line in text.split("\n"))


class JournalFormatter(logging.Formatter):
    """A formatter whose lines carry the record's syslog priority when ``journal`` is true."""

    def __init__(self, fmt: str, *, journal: bool) -> None:
        super().__init__(fmt)
        self.journal = journal

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        return with_priority(text, syslog_priority(record.levelno)) if self.journal else text


def configure(*, verbose: bool, stream: TextIO | None = None) -> None:
    """Log to ``stream`` (stderr): journald stamps each line itself; elsewhere a time helps."""
    stream = sys.stderr if stream is None else stream
    journal = is_journal(stream)
    stamp = "" if journal else "%(asctime)s "
    handler = logging.StreamHandler(stream)
    handler.setFormatter(
        JournalFormatter(f"{stamp}%(levelname)s %(name)s: %(message)s", journal=journal)
    )
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO, handlers=[handler])


def print_error(message: str) -> None:
    """Write an error message to stderr as is, at priority err when stderr is the journal."""
    stream = sys.stderr
    print(with_priority(message, ERROR) if is_journal(stream) else message, file=stream)
