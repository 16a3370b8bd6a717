"""One check of what a resource's tokens stand for, on the event loop, bounded by its timeout.

- command: the argv runs in a process group of its own (with the agent's privileges, in the
  unit's sandbox); exit 0 is healthy. If the first line of its output is a whole number, that
  many tokens are healthy (token-0 first) and the rest not: a license server's free seats.
  A command still running at the timeout is killed with its whole group.
- tcp: a connection to host:port opens.
- http: a GET answers 2xx (http or https, certificates verified; no redirects followed, as the
  kubelet's own probes do not follow them to other hosts either).
- path: the file or device node exists; with ``{index}`` each token has its own path.
- flexlm, rlm: the vendor's tool (lmutil lmstat, rlmutil rlmstat) run as a command is, its
  output read for the feature's or product's free seats (``license``): that many tokens are
  healthy, token-0 first. A tool that cannot run, hangs, exits other than 0, or prints no
  count of the name (not listed, uncounted, an error in its place) fails the check for all.

A probe that cannot run (no such binary, permission denied, a name that does not resolve) is a
failed check with that reason, never an exception.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import ssl
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from token_resource._compat import within
from token_resource.config.diff import describe_check
from token_resource.config.model import (
    COMMAND,
    FLEXLM,
    HTTP,
    INDEX_PLACEHOLDER,
    PATH,
    RLM,
    TCP,
    ProbeSpec,
)
from token_resource.health import license

# What a command probe reads of its output (its first line is all it looks at) and what is kept
# of a reason: enough for a status line and a log. A license probe reads all of its tool's.
MAX_OUTPUT_CHARS = 4096
MAX_REASON_CHARS = 200
# How long a killed command's output may stay open (a process that left its group holds it).
REAP_SECONDS = 1.0


@dataclass(frozen=True)
class Outcome:
    """One check: for each token whether it passed, why each failed one failed, and what the
    probe said in a few words."""

    passed: tuple[bool, ...]
    message: str
    reasons: dict[int, str] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return all(self.passed)


async def check(probe: ProbeSpec, count: int) -> Outcome:
    started = time.monotonic()
    outcome = await _CHECKS[probe.kind](probe, count)
    return Outcome(outcome.passed, outcome.message, outcome.reasons, time.monotonic() - started)


def _all(count: int, ok: bool, message: str) -> Outcome:
    message = _short(message)
    return Outcome((ok,) * count, message, {} if ok else dict.fromkeys(range(count), message))


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= MAX_REASON_CHARS else text[: MAX_REASON_CHARS - 1] + "…"


@dataclass(frozen=True)
class Finished:
    """A command that ran to its end: its exit status and its whole output (stdout, then
    stderr interleaved as written)."""

    status: int
    output: str


async def run_command(argv: Sequence[str], timeout: float) -> Finished | str:
    """``argv`` run in a process group of its own, killed with the group at ``timeout`` (and on
    cancellation) and reaped; a str says why it did not finish."""
    try:
        process = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,  # a group of its own: a timeout kills what it started too
        )
    except OSError as error:
        return f"cannot run {argv[0]}: {error.strerror or error}"
    try:
        output, _ = await within(process.communicate(), timeout)
    except asyncio.TimeoutError:
        _kill_group(process.pid)
        await _reap(process)
        return f"{argv[0]} still running after {timeout:g} s: killed"
    except asyncio.CancelledError:
        _kill_group(process.pid)
        await asyncio.shield(_reap(process))
        raise
    assert process.returncode is not None
    return Finished(process.returncode, output.decode(errors="replace"))


async def _command(probe: ProbeSpec, count: int) -> Outcome:
    argv: Sequence[str] = probe.target if isinstance(probe.target, tuple) else (probe.target,)
    ran = await run_command(argv, probe.timeout)
    if isinstance(ran, str):
        return _all(count, False, ran)
    text = ran.output[:MAX_OUTPUT_CHARS]
    first = text.strip().split("\n", 1)[0].strip() if text.strip() else ""
    if ran.status != 0:
        said = f": {first}" if first else ""
        return _all(count, False, f"{argv[0]} exited with status {ran.status}{said}")
    if first.isdigit():
        return _first_healthy(count, int(first), f"{argv[0]} reports {first} healthy")
    return _all(count, True, f"{argv[0]} exited with status 0")


async def _license(probe: ProbeSpec, count: int) -> Outcome:
    """A license server's free seats: that many tokens healthy, token-0 first."""
    asked = describe_check(probe)
    argv = license.argv(probe)
    ran = await run_command(argv, probe.timeout)
    if isinstance(ran, str):
        return _all(count, False, f"{asked}: {ran}")
    if ran.status != 0:
        said = license.telling_line(ran.output.splitlines())
        # The tool by its name: a reason has room for the server's error, not for a long path.
        tool = os.path.basename(argv[0])
        return _all(
            count,
            False,
            f"{asked}: {tool} exited with status {ran.status}" + (f": {said}" if said else ""),
        )
    seats = license.free_seats(probe, ran.output)
    if isinstance(seats, license.Unreadable):
        return _all(count, False, f"{asked}: {seats.problem}")
    return _first_healthy(count, seats.free, f"{asked}: {seats.free} of {seats.issued} free")


def _first_healthy(count: int, healthy: int, message: str) -> Outcome:
    """The first ``healthy`` tokens healthy (token-0 first), the others not, for ``message``."""
    healthy = min(healthy, count)
    message = _short(message)
    return Outcome(
        tuple(index < healthy for index in range(count)),
        message,
        dict.fromkeys(range(healthy, count), message),
    )


async def _reap(process: asyncio.subprocess.Process) -> None:
    """After the kill: the process's end, then the end of its output, which the group's other
    processes held open a moment longer (read, the pipe closes; left, it stayed open, seen
    under load); at most REAP_SECONDS for a process that left the group."""
    await process.wait()
    if process.stdout is not None:
        with contextlib.suppress(asyncio.TimeoutError):
            await within(process.stdout.read(), REAP_SECONDS)


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


async def _tcp(probe: ProbeSpec, count: int) -> Outcome:
    host, _, port = str(probe.target).rpartition(":")
    host = host[1:-1] if host.startswith("[") else host
    try:
        _, writer = await within(asyncio.open_connection(host, int(port)), probe.timeout)
    except asyncio.TimeoutError:
        return _all(count, False, f"no connection to {probe.target} within {probe.timeout:g} s")
    except OSError as error:
        return _all(count, False, f"cannot connect to {probe.target}: {error.strerror or error}")
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return _all(count, True, f"connected to {probe.target}")


async def _http(probe: ProbeSpec, count: int) -> Outcome:
    url = str(probe.target)
    try:
        status = await within(_get_status(url), probe.timeout)
    except asyncio.TimeoutError:
        return _all(count, False, f"GET {url}: no answer within {probe.timeout:g} s")
    except (OSError, ValueError) as error:
        return _all(count, False, f"GET {url}: {getattr(error, 'strerror', None) or error}")
    return _all(count, 200 <= status < 300, f"GET {url}: HTTP {status}")


async def _get_status(url: str) -> int:
    """The status code of a GET of ``url``: the status line is all a probe reads."""
    parts = urlsplit(url)
    secure = parts.scheme == "https"
    host = parts.hostname or ""
    port = parts.port or (443 if secure else 80)
    context = ssl.create_default_context() if secure else None
    reader, writer = await asyncio.open_connection(host, port, ssl=context)
    try:
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        authority = parts.netloc.rpartition("@")[2]
        writer.write(
            f"GET {target} HTTP/1.1\r\nHost: {authority}\r\nUser-Agent: token-resource-probe\r\n"
            "Accept: */*\r\nConnection: close\r\n\r\n".encode()
        )
        await writer.drain()
        line = (await reader.readline()).decode("latin-1").split()
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
    if len(line) < 2 or not line[0].startswith("HTTP/") or not line[1].isdigit():
        raise ValueError(f"not an HTTP answer: {' '.join(line)[:60]!r}")
    return int(line[1])


async def _path(probe: ProbeSpec, count: int) -> Outcome:
    template = str(probe.target)
    per_token = probe.per_token
    paths = (
        [template.replace(INDEX_PLACEHOLDER, str(index)) for index in range(count)]
        if per_token
        else [template]
    )
    try:
        # In a thread: a stat on a hung network mount must not stop the loop.
        found = await within(asyncio.to_thread(_existing, paths), probe.timeout)
    except asyncio.TimeoutError:
        return _all(count, False, f"{template}: no answer within {probe.timeout:g} s")
    if not per_token:
        exists = found[0]
        return _all(count, exists, f"{template} {'exists' if exists else 'does not exist'}")
    reasons = {i: f"{path} does not exist" for i, path in enumerate(paths) if not found[i]}
    return Outcome(found, f"{sum(found)} of {count} paths exist", reasons)


def _existing(paths: Sequence[str]) -> tuple[bool, ...]:
    """Whether each path leads to something (a dangling symlink does not)."""
    return tuple(os.path.exists(path) for path in paths)


_CHECKS = {
    COMMAND: _command,
    TCP: _tcp,
    HTTP: _http,
    PATH: _path,
    FLEXLM: _license,
    RLM: _license,
}
