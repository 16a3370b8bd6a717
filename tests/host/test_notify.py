"""sd_notify messages, read from a real datagram socket."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.harness import NotifySocket
from token_resource.host.notify import SystemdNotifier


def test_messages_reach_a_real_notify_socket(
    socket_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sink = NotifySocket(socket_dir / "notify.sock")
    monkeypatch.setenv("NOTIFY_SOCKET", str(sink.path))
    try:
        notifier = SystemdNotifier()
        notifier.ready("2 resource(s)")
        notifier.status("2 resource(s)")  # unchanged: not sent again
        notifier.reloading()
        notifier.status("3 resource(s)")
        notifier.watchdog()
        notifier.stopping()
        lines = sink.wait_for(lambda lines: "STOPPING=1" in lines)
        assert lines[:3] == ["READY=1", "STATUS=2 resource(s)", "RELOADING=1"]
        assert lines[3].startswith("MONOTONIC_USEC=")
        assert int(lines[3].split("=")[1]) > 0
        assert lines[4:] == ["STATUS=3 resource(s)", "WATCHDOG=1", "STOPPING=1", "STATUS=stopping"]
        notifier.close()
        notifier.ready("after close: not sent")
    finally:
        sink.close()
    assert "READY=1\nSTATUS=after close: not sent" not in sink.messages()


def test_without_notify_socket_nothing_is_sent_and_nothing_fails(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("NOTIFY_SOCKET", raising=False)
    monkeypatch.delenv("WATCHDOG_USEC", raising=False)
    notifier = SystemdNotifier()
    notifier.ready("x")
    notifier.watchdog()
    assert notifier.watchdog_interval is None


@pytest.mark.parametrize(
    ("usec", "pid", "interval"),
    [("30000000", None, 15.0), ("2000000", "mine", 1.0), ("2000000", "1", None), ("0", None, None)],
)
def test_watchdog_interval_is_half_of_systemds_and_only_for_us(
    monkeypatch: pytest.MonkeyPatch, usec: str, pid: str | None, interval: float | None
) -> None:
    monkeypatch.setenv("WATCHDOG_USEC", usec)
    if pid is None:
        monkeypatch.delenv("WATCHDOG_PID", raising=False)
    else:
        monkeypatch.setenv("WATCHDOG_PID", str(os.getpid()) if pid == "mine" else pid)
    assert SystemdNotifier().watchdog_interval == interval
