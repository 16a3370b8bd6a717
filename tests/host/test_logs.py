"""Log lines with their syslog priority when stderr is the journal, plain lines elsewhere."""

from __future__ import annotations

import io
import logging
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

import pytest

from tests.harness import AGENT_COMMAND
from token_resource.host import logs

STAMP = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} ")


def journal_stream(path: Path) -> str:
    """What systemd would put into $JOURNAL_STREAM for a stream that is ``path``."""
    status = os.stat(path)
    return f"{status.st_dev}:{status.st_ino}"


@pytest.fixture
def stream(tmp_path: Path) -> Iterator[TextIO]:
    with open(tmp_path / "stderr", "w+") as file:
        yield file


def record(level: int, message: str, *, exc_info: bool = False) -> logging.LogRecord:
    return logging.LogRecord(
        "token_resource.agent",
        level,
        __file__,
        1,
        message,
        None,
        sys.exc_info() if exc_info else None,
    )


@pytest.mark.parametrize(
    ("level", "priority"),
    [
        (logging.CRITICAL, 2),
        (logging.ERROR, 3),
        (logging.WARNING, 4),
        (logging.INFO, 6),
        (logging.DEBUG, 7),
        (logging.ERROR + 5, 3),
        (logging.INFO - 5, 7),
    ],
)
def test_syslog_priority_of_each_level(level: int, priority: int) -> None:
    assert logs.syslog_priority(level) == priority


def test_a_stream_is_the_journal_only_when_journal_stream_names_it(
    stream: TextIO, tmp_path: Path
) -> None:
    own = journal_stream(Path(stream.name))
    assert logs.is_journal(stream, {"JOURNAL_STREAM": own})
    assert not logs.is_journal(stream, {})
    assert not logs.is_journal(stream, {"JOURNAL_STREAM": ""})
    # Set, but for another stream: a process whose stderr was redirected inherits the variable.
    other = tmp_path / "other"
    other.touch()
    assert not logs.is_journal(stream, {"JOURNAL_STREAM": journal_stream(other)})
    device, inode = own.split(":")
    assert not logs.is_journal(stream, {"JOURNAL_STREAM": f"{device}:{int(inode) + 1}"})
    for malformed in (device, f"{device}:", f":{inode}", f"{device}:{inode}x", "a:b"):
        assert not logs.is_journal(stream, {"JOURNAL_STREAM": malformed}), malformed
    # No descriptor at all (pytest's capture, a StringIO): not the journal.
    assert not logs.is_journal(io.StringIO(), {"JOURNAL_STREAM": own})


def test_journal_lines_carry_their_priority_on_every_line() -> None:
    formatter = logs.JournalFormatter("%(levelname)s %(name)s: %(message)s", journal=True)
    assert formatter.format(record(logging.ERROR, "reload rejected: x")) == (
        "<3>ERROR token_resource.agent: reload rejected: x"
    )
    assert formatter.format(record(logging.CRITICAL, "c")).startswith("<2>CRITICAL ")
    assert formatter.format(record(logging.WARNING, "w")).startswith("<4>WARNING ")
    assert formatter.format(record(logging.INFO, "ready")).startswith("<6>INFO ")
    assert formatter.format(record(logging.DEBUG, "d")).startswith("<7>DEBUG ")
    # journald reads a stream line by line: a traceback's lines keep the record's priority.
    try:
        raise ValueError("boom")
    except ValueError:
        text = formatter.format(record(logging.ERROR, "two\nlines", exc_info=True))
    lines = text.split("\n")
    assert len(lines) > 3
    assert all(line.startswith("<3>") for line in lines), text
    assert lines[-1] == "<3>ValueError: boom"


def test_plain_lines_have_no_priority() -> None:
    formatter = logs.JournalFormatter("%(levelname)s %(name)s: %(message)s", journal=False)
    assert formatter.format(record(logging.ERROR, "reload rejected: x")) == (
        "ERROR token_resource.agent: reload rejected: x"
    )


def test_print_error_marks_the_line_err_only_for_the_journal(
    stream: TextIO, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "stderr", stream)
    monkeypatch.setenv("JOURNAL_STREAM", journal_stream(Path(stream.name)))
    logs.print_error("token-resource: invalid configuration: x")
    other = tmp_path / "other"
    other.touch()
    monkeypatch.setenv("JOURNAL_STREAM", journal_stream(other))
    logs.print_error("token-resource: invalid configuration: y")
    monkeypatch.delenv("JOURNAL_STREAM")
    logs.print_error("token-resource: invalid configuration: z")
    stream.seek(0)
    assert stream.read().splitlines() == [
        "<3>token-resource: invalid configuration: x",
        "token-resource: invalid configuration: y",
        "token-resource: invalid configuration: z",
    ]


LOG_EVERY_LEVEL = """
import logging
from token_resource.host import logs
logs.configure(verbose=True)
log = logging.getLogger("token_resource.agent")
log.debug("debug line")
log.info("ready")
log.warning("warning line")
log.error("reload rejected: bad file")
log.critical("critical line")
"""


def run_with_stderr(
    argv: list[str], stderr: Path, variable: str | None
) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if k not in ("JOURNAL_STREAM", "NOTIFY_SOCKET")}
    if variable is not None:
        environ["JOURNAL_STREAM"] = variable
    with open(stderr, "w") as file:
        result = subprocess.run(
            argv,
            check=False,
            stderr=file,
            stdout=subprocess.PIPE,
            text=True,
            env=environ,
            timeout=60,
        )
    return result


def test_the_configured_log_under_systemd_and_elsewhere(tmp_path: Path) -> None:
    stderr = tmp_path / "stderr"
    stderr.touch()
    command = [sys.executable, "-c", LOG_EVERY_LEVEL]

    run_with_stderr(command, stderr, journal_stream(stderr))
    journal = stderr.read_text().splitlines()
    assert journal == [
        "<7>DEBUG token_resource.agent: debug line",
        "<6>INFO token_resource.agent: ready",
        "<4>WARNING token_resource.agent: warning line",
        "<3>ERROR token_resource.agent: reload rejected: bad file",
        "<2>CRITICAL token_resource.agent: critical line",
    ]

    other = tmp_path / "other"
    other.touch()
    for variable in (None, journal_stream(other)):
        run_with_stderr(command, stderr, variable)
        plain = stderr.read_text().splitlines()
        assert len(plain) == 5, plain
        for line, expected in zip(plain, journal):
            assert STAMP.match(line), line
            assert STAMP.sub("", line) == re.sub(r"^<\d>", "", expected)


def test_cli_errors_reach_the_journal_at_err(tmp_path: Path) -> None:
    config = tmp_path / "token-resource.toml"
    config.write_text('[resources]\n"example.com/token" = -1\n')
    stderr = tmp_path / "stderr"
    stderr.touch()
    check = [*AGENT_COMMAND, "check", "--config", str(config)]

    result = run_with_stderr(check, stderr, journal_stream(stderr))
    assert result.returncode == 1
    [line] = stderr.read_text().splitlines()
    assert line.startswith(f"<3>token-resource: invalid configuration: {config}"), line

    result = run_with_stderr(check, stderr, "1:1")
    assert result.returncode == 1
    [line] = stderr.read_text().splitlines()
    assert line.startswith(f"token-resource: invalid configuration: {config}"), line

    # argparse's usage errors too, every line of them.
    result = run_with_stderr([*AGENT_COMMAND, "run", "-v"], stderr, journal_stream(stderr))
    assert result.returncode == 2
    lines = stderr.read_text().splitlines()
    assert lines[0].startswith("<3>usage: token-resource"), lines
    assert lines[-1] == "<3>token-resource: error: unrecognized arguments: -v", lines
    assert all(line.startswith("<3>") for line in lines), lines
