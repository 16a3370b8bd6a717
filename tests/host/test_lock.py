"""One agent per device-plugin directory, also after kubelet restarts that wipe every file."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.harness import TWO_RESOURCES, AgentProcess
from tests.standin.kubelet import CHECKPOINT, KubeletStandin, KubeletView, clean_directory
from token_resource import __version__
from token_resource.host import lock
from token_resource.host.lock import DirectoryLock, LockError, lock_holder

COUNTS = {"example.com/token": 2, "example.com/license": 5}
SOCKETS = ("token-resource/example.com_license.sock", "token-resource/example.com_token.sock")
KUBELET_RESTARTS = 3
TIMEOUT = 20.0

# A child that flocks the directory named by argv[1] as the agent does, says so, and holds
# the lock until its stdin closes.
HOLDER = """
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECTORY)
fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
print("locked", flush=True)
sys.stdin.read()
"""


@pytest.fixture
def holder(tmp_path: Path) -> Iterator[subprocess.Popen[str]]:
    """Another process holding the lock on tmp_path."""
    process = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(tmp_path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    assert process.stdin is not None
    try:
        assert process.stdout.readline() == "locked\n"
        yield process
    finally:
        process.stdin.close()
        process.stdout.close()
        if process.wait(TIMEOUT) != 0:
            raise AssertionError("the lock holder failed")


def refusal(directory: Path) -> str:
    second = DirectoryLock(directory)
    with pytest.raises(LockError) as error:
        second.acquire()
    assert not second.held
    return str(error.value)


def test_the_lock_is_on_the_directory_and_creates_nothing(tmp_path: Path) -> None:
    lock = DirectoryLock(tmp_path)
    lock.acquire()
    try:
        assert lock.held
        assert list(tmp_path.iterdir()) == []
        # flock belongs to the open directory, so a second open is refused, even here.
        assert refusal(tmp_path) == (
            f"another token-resource agent (pid {os.getpid()}) is already serving {tmp_path}"
        )
    finally:
        lock.release()
    again = DirectoryLock(tmp_path)  # released
    again.acquire()
    again.release()


def test_a_refusal_names_the_holder_from_proc_locks(
    tmp_path: Path, holder: subprocess.Popen[str]
) -> None:
    assert lock_holder(tmp_path.stat()) == holder.pid
    assert refusal(tmp_path) == (
        f"another token-resource agent (pid {holder.pid}) is already serving {tmp_path}"
    )


def test_the_lock_outlives_a_kubelet_wiping_every_file(
    tmp_path: Path, holder: subprocess.Popen[str]
) -> None:
    (tmp_path / "token-resource.lock").write_text("a legacy lock file\n")
    (tmp_path / CHECKPOINT).write_text("{}")
    assert clean_directory(tmp_path) == ["token-resource.lock"]
    assert f"(pid {holder.pid})" in refusal(tmp_path)


def test_an_unknown_holder_is_called_unknown(
    tmp_path: Path, holder: subprocess.Popen[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """/proc/locks may not list it: another pid namespace, or no /proc at all."""
    monkeypatch.setattr(lock, "PROC_LOCKS", tmp_path / "missing")
    assert refusal(tmp_path) == (
        f"another token-resource agent (pid unknown) is already serving {tmp_path}"
    )


def test_proc_locks_lines_are_matched_by_device_and_inode(tmp_path: Path) -> None:
    stat = tmp_path.stat()
    device = f"{os.major(stat.st_dev):02x}:{os.minor(stat.st_dev):02x}"
    proc_locks = tmp_path / "locks"
    proc_locks.write_text(
        f"1: POSIX  ADVISORY  WRITE 11 {device}:{stat.st_ino} 0 EOF\n"  # not a flock
        f"2: FLOCK  ADVISORY  WRITE 12 {device}:{stat.st_ino + 1} 0 EOF\n"  # another inode
        f"3: FLOCK  ADVISORY  WRITE 13 ff:ff:{stat.st_ino} 0 EOF\n"  # another device
        f"4: FLOCK  ADVISORY  WRITE 14 {device}:{stat.st_ino} 0 EOF\n"
        f"4: -> FLOCK  ADVISORY  WRITE 15 {device}:{stat.st_ino} 0 EOF\n"  # a waiter
        "garbage\n"
    )
    assert lock_holder(stat, proc_locks) == 14
    proc_locks.write_text(f"1: FLOCK  ADVISORY  WRITE 0 {device}:{stat.st_ino} 0 EOF\n")
    assert lock_holder(stat, proc_locks) is None  # a holder this pid namespace cannot see
    assert lock_holder(stat, tmp_path / "missing") is None


def settled(registrations: int) -> Callable[[KubeletView], bool]:
    """A predicate: every resource registered this often and its new stream sent its list
    (allocatable alone is not enough: the kubelet keeps the old list until then)."""

    def holds(view: KubeletView) -> bool:
        return view.counts() == COUNTS and all(
            view.resources[name].registrations == registrations
            and view.resources[name].lists_received == 1
            for name in COUNTS
        )

    holds.__qualname__ = f"settled after registration {registrations}"
    return holds


def socket_inodes(directory: Path) -> dict[str, int]:
    return {name: (directory / name).stat().st_ino for name in SOCKETS}


def test_a_second_agent_is_refused_after_kubelet_restarts_and_touches_nothing(
    agent: AgentProcess, kubelet: KubeletStandin, tmp_path: Path
) -> None:
    """The lock must survive kubelet restarts, which delete every file but the checkpoint.
    A lock file in the directory did not: a second agent then started, called the first
    one's sockets stale, and the two replaced each other's sockets while the kubelet's
    device list flapped."""
    directory = agent.device_plugin_dir
    agent.write_config(TWO_RESOURCES)
    agent.start()
    kubelet.wait_for(settled(1))
    for restart in range(1, KUBELET_RESTARTS + 1):
        kubelet.restart()
        kubelet.wait_for(settled(restart + 1))
    assert sorted(path.name for path in directory.iterdir()) == sorted(
        ["kubelet.sock", CHECKPOINT, "token-resource"]
    )
    assert sorted(
        f"token-resource/{path.name}" for path in (directory / "token-resource").iterdir()
    ) == sorted(SOCKETS)
    inodes = socket_inodes(directory)
    before = kubelet.snapshot()
    assert agent.process is not None

    for attempt in range(2):
        second = AgentProcess(tmp_path / f"second-{attempt}", directory)
        try:
            second.write_config(TWO_RESOURCES)
            second.start(wait_ready=False)
            assert second.process is not None
            assert second.process.wait(TIMEOUT) == 1, second.log()
            # The version it would have run, then the refusal: nothing else.
            starting, refusal = second.log().splitlines()
            assert starting.endswith(f"token-resource {__version__} starting, role node")
            assert refusal == (
                f"token-resource: another token-resource agent (pid {agent.process.pid}) "
                f"is already serving {directory}"
            )
            assert not second.control_socket.exists()
            assert "READY=1" not in second.notify.assignments()
        finally:
            second.kill()
        # The first agent's sockets are the same files, the kubelet saw no registration and
        # no stream ended; the first agent still serves.
        assert socket_inodes(directory) == inodes
        view = kubelet.snapshot()
        assert view == before, view.pretty()
        assert all(resource.stream_open for resource in view.resources.values())
        assert agent.process.poll() is None
        assert kubelet.allocate("example.com/token", ["token-1"]).container_responses
        status = agent.cli("status")
        assert status.stdout.startswith("2 resource(s), 2/2 registered"), status
        # The next round comes after one more kubelet restart.
        if attempt == 0:
            kubelet.restart()
            kubelet.wait_for(settled(KUBELET_RESTARTS + 2))
            inodes = socket_inodes(directory)
            before = kubelet.snapshot()
    assert "stale socket" not in agent.log()
