"""A program that embeds a real Kubernetes component, driven over its standard input and output
one JSON object a line (go/harness/lines): requests and their answers, and events it reports."""

from __future__ import annotations

import json
import queue
import subprocess
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any


class ProgramError(AssertionError):
    """The program answered an operation with an error, or did not answer."""


class Program:
    """``command`` started at once; its log (standard error) goes to ``log_path``."""

    def __init__(self, command: Sequence[str], log_path: Path) -> None:
        self.log_path = log_path
        self._log = log_path.open("ab")
        self.process = subprocess.Popen(
            list(command),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
        )
        self._answers: queue.Queue[dict[str, Any]] = queue.Queue()
        self._events: list[dict[str, Any]] = []
        self._events_changed = threading.Condition()
        self._next_id = 0
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for raw in self.process.stdout:
            message = json.loads(raw)
            if "event" in message:
                with self._events_changed:
                    self._events.append(message)
                    self._events_changed.notify_all()
            else:
                self._answers.put(message)
        with self._events_changed:
            self._events_changed.notify_all()

    def call(self, op: str, timeout: float = 60.0, **args: Any) -> Any:
        """The result of ``op``; its error, or no answer within ``timeout``, fails the test."""
        self._next_id += 1
        assert self.process.stdin is not None
        line = json.dumps({"id": self._next_id, "op": op, "args": args}) + "\n"
        self.process.stdin.write(line.encode())
        self.process.stdin.flush()
        try:
            message = self._answers.get(timeout=timeout)
        except queue.Empty:
            raise ProgramError(f"{op}: no answer in {timeout} s; log: {self.log_tail()}") from None
        if message.get("id") != self._next_id:
            raise ProgramError(f"{op}: answer out of order: {message}")
        if "error" in message:
            raise ProgramError(f"{op}: {message['error']}")
        return message.get("result")

    def events(self, name: str) -> list[Any]:
        with self._events_changed:
            return [event.get("data") for event in self._events if event["event"] == name]

    def wait_for_event(self, name: str, count: int = 1, timeout: float = 30.0) -> list[Any]:
        """The data of the first ``count`` events called ``name``, waiting for them."""
        deadline = time.monotonic() + timeout
        with self._events_changed:
            while len(seen := self.events(name)) < count:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or self.process.poll() is not None:
                    raise ProgramError(
                        f"event {name}: {len(seen)} of {count} in {timeout} s; "
                        f"log: {self.log_tail()}"
                    )
                self._events_changed.wait(min(remaining, 0.5))
            return seen[:count]

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def stop(self, timeout: float = 20.0) -> int:
        """Close its input (a program's cue to stop), then wait; kill it past ``timeout``."""
        if self.process.stdin is not None and not self.process.stdin.closed:
            self.process.stdin.close()
        try:
            code = self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            code = self.process.wait()
        self._reader.join(5)
        if self.process.stdout is not None:
            self.process.stdout.close()
        self._log.close()
        return code

    def __enter__(self) -> Program:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
