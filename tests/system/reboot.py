"""A booted node that reboots for real, and what its journal says about the boot.

harness.Node boots with ``--volatile=overlay``, whose writes vanish at power-off. A node that
keeps its packages, its configuration and the kubelet's checkpoint across reboots boots instead
from an overlay mount of its own (the shared rootfs read-only below, its writes in a directory of
the test's), and reboots the way systemd-nspawn@.service does it: ``systemctl reboot`` inside
is an orderly shutdown (units stopped in reverse order), then systemd-nspawn, run with
``--keep-unit``, exits with status 133 instead of booting again in place, and the node starts it
again on the same root. Each boot is a fresh one: new /run and /tmp, new processes, new boot ID.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tests.system.harness import HarnessError, run
from tests.system.node import AgentNode

# systemd-nspawn's exit status when the container rebooted and --keep-unit is given: its
# service is to start it again (systemd-nspawn@.service has RestartForceExitStatus=133).
NSPAWN_REBOOTED = 133
# systemd's catalog message IDs for a unit's job: starting, started (for Type=notify: READY=1
# came), stopping, stopped.
STARTING = "7d4958e842da4a758f6c1cdc7b36dcc5"
STARTED = "39f53479d3a045ac8e11786248231fbf"
STOPPING = "de5b426a63be47a7b6ac3eaac82e2f6f"
STOPPED = "9d1aaa27d60140bd96365438aad20286"


@contextlib.contextmanager
def persistent_root(lower: Path, into: Path) -> Iterator[Path]:
    """An overlay of ``lower`` mounted in ``into``; unmounted and removed afterwards."""
    upper, work, merged = into / "upper", into / "work", into / "root"
    for directory in (upper, work, merged):
        directory.mkdir(parents=True)
    options = f"lowerdir={lower},upperdir={upper},workdir={work}"
    try:
        run(["mount", "-t", "overlay", "overlay", "-o", options, str(merged)], timeout=30)
        yield merged
    finally:
        if merged.is_mount():
            run(["umount", str(merged)], timeout=60)
        shutil.rmtree(into, ignore_errors=True)


@dataclass(frozen=True)
class Entry:
    """A journal entry of systemd about a unit."""

    unit: str
    message_id: str
    message: str
    monotonic: float  # seconds, CLOCK_MONOTONIC (the same clock inside the container)


class RebootableNode(AgentNode):
    """A node on a root of its own (``volatile=False``) that can reboot."""

    def boot_id(self) -> str:
        # nspawn gives every boot of the container its own.
        return self.read("/proc/sys/kernel/random/boot_id").strip()

    def reboot(self, workdir: Path, timeout: float = 180) -> None:
        """``systemctl reboot`` inside; returns once the new boot is running."""
        assert self.process is not None, "the node is not running"
        before = self.boot_id()
        # systemctl may not return before the container is gone.
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.exec(["systemctl", "reboot"], check=False, timeout=60)
        status = self.process.wait(timeout)
        if status != NSPAWN_REBOOTED:
            raise HarnessError(
                f"systemd-nspawn exited {status}, not {NSPAWN_REBOOTED} (rebooted):\n"
                + self.nspawn_log()
            )
        self.stop()  # its processes are gone: removes its cgroups
        self.start(workdir)
        if self.boot_id() == before:
            raise HarnessError("the container came back with the same boot ID")

    def make_journal_persistent(self) -> None:
        """Keep the journal across reboots (for the previous boot's shutdown)."""
        self.exec(["mkdir", "-p", "/var/log/journal"])
        self.exec(["systemd-tmpfiles", "--create", "--prefix", "/var/log/journal"])
        self.exec(["journalctl", "--flush"])

    def unit_entries(self, boot: int = 0) -> list[Entry]:
        """systemd's job messages (starting, started, stopping, stopped) of one boot (0: this
        one, -1: the one before), oldest first."""
        result = self.exec(
            ["journalctl", "-b", str(boot), "-o", "json", "--no-pager", "_PID=1"], timeout=60
        )
        entries = []
        for line in result.stdout.splitlines():
            fields = json.loads(line)
            message_id = fields.get("MESSAGE_ID")
            unit = fields.get("UNIT")
            if unit and message_id in (STARTING, STARTED, STOPPING, STOPPED):
                message = fields.get("MESSAGE")
                entries.append(
                    Entry(
                        unit,
                        message_id,
                        message if isinstance(message, str) else "",
                        int(fields["__MONOTONIC_TIMESTAMP"]) / 1e6,
                    )
                )
        return entries

    def seconds(self, prop: str, unit: str) -> float:
        """A unit's *TimestampMonotonic property, in seconds (0 when not set)."""
        return int(self.show(prop, unit)) / 1e6


def first(entries: list[Entry], unit: str, *message_ids: str) -> Entry:
    """The first entry of ``unit`` with one of ``message_ids``."""
    found = [e for e in entries if e.unit == unit and e.message_id in message_ids]
    assert found, f"no {message_ids} entry for {unit} in {entries}"
    return found[0]


def last(entries: list[Entry], unit: str, *message_ids: str) -> Entry:
    """The last entry of ``unit`` with one of ``message_ids`` (at a shutdown: the one of the
    shutdown, not of an earlier restart)."""
    found = [e for e in entries if e.unit == unit and e.message_id in message_ids]
    assert found, f"no {message_ids} entry for {unit} in {entries}"
    return found[-1]


def job_began(entries: list[Entry], unit: str) -> Entry:
    """Where the unit's first start job began: its "Starting" line, which systemd does not
    write for a Type=simple service, whose "Started" line comes at once instead."""
    return first(entries, unit, STARTING, STARTED)
