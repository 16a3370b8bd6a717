"""What the real node changes on this machine, each change recorded with its undo.

The node is root on a machine that other tests share: every bridge, address, directory,
cgroup and kernel setting it makes or changes is recorded as it happens and undone in the
reverse order afterwards (``MachineChanges.undo``), whatever failed in between. Processes are
found and stopped by PID (processes.py), never by name.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

CGROUP_ROOT = Path("/sys/fs/cgroup")
# One real node on a machine at a time: /var/lib/kubelet is where the manifests' hostPath
# volumes point, so it is the kubelet's root directory.
LOCK_PATH = Path("/run/lock/token-resource-test-node.lock")


class MachineError(AssertionError):
    """The machine is not fit for a node (another node on it, a command that failed)."""


def run(command: list[str], timeout: float = 60.0) -> str:
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
    if done.returncode != 0:
        raise MachineError(f"{' '.join(command)}: exit {done.returncode}: {done.stderr.strip()}")
    return done.stdout


def mounts_under(directory: Path) -> list[Path]:
    """Mount points at or below ``directory``, deepest first (so they unmount in order)."""
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        mount_point = Path(line.split()[4].replace("\\040", " "))
        if mount_point == directory or directory in mount_point.parents:
            found.append(mount_point)
    return sorted(found, key=lambda path: len(path.parts), reverse=True)


def unmount_under(directory: Path) -> list[Path]:
    mounted = mounts_under(directory)
    for mount_point in mounted:
        # Lazy: a mount still held by a dying process goes once the process has gone.
        subprocess.run(["umount", "--lazy", str(mount_point)], capture_output=True, check=False)
    return mounted


def remove_cgroup_tree(name: str) -> None:
    """``name`` (a cgroup under the root of every v1 hierarchy and of v2), its children first.
    A cgroup directory is removed by rmdir of each, never by unlinking its files."""
    for hierarchy in cgroup_hierarchies():
        top = hierarchy / name
        if not top.is_dir():
            continue
        below = sorted(
            (path for path in top.rglob("*") if path.is_dir()),
            key=lambda path: len(path.parts),
            reverse=True,
        )
        for directory in [*below, top]:
            with contextlib.suppress(FileNotFoundError):
                directory.rmdir()


def cgroup_hierarchies() -> list[Path]:
    """The mounted cgroup hierarchies: each v1 controller's (a cgroup v1 or hybrid machine),
    else the one v2 root."""
    if (CGROUP_ROOT / "cgroup.controllers").exists():
        return [CGROUP_ROOT]
    hierarchies = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        separator = fields.index("-")
        if fields[separator + 1] in ("cgroup", "cgroup2"):
            path = Path(fields[4])
            if path.parent == CGROUP_ROOT and not path.is_symlink():
                hierarchies.append(path)
    return hierarchies


class MachineChanges:
    """The changes made so far, newest last, each with how to undo it."""

    def __init__(self) -> None:
        self._undo: list[tuple[str, Callable[[], None]]] = []
        self._lock: IO[bytes] | None = None

    def record(self, what: str, undo: Callable[[], None]) -> None:
        self._undo.append((what, undo))

    def take_machine(self, kubelet_root: Path) -> None:
        """This node's lock, and a machine with no kubelet directory: a node of another test
        run, or a real kubelet, would share it."""
        LOCK_PATH.parent.mkdir(parents=True, exist_ok=True)
        lock = LOCK_PATH.open("wb")
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.close()
            raise MachineError(
                f"another real node runs on this machine ({LOCK_PATH} is locked)"
            ) from None
        self._lock = lock
        self.record("the node's lock", self._release_lock)
        if kubelet_root.exists():
            raise MachineError(
                f"{kubelet_root} exists: a kubelet uses this machine (a real one, or a node "
                "test that was killed: remove it once no kubelet runs)"
            )

    def _release_lock(self) -> None:
        if self._lock is not None:
            LOCK_PATH.unlink(missing_ok=True)
            self._lock.close()
            self._lock = None

    def directory(self, path: Path) -> Path:
        """``path`` made if missing (and its missing parents); removed afterwards, with what
        was mounted under it, if it was made here."""
        first_missing = next((p for p in reversed([path, *path.parents]) if not p.exists()), None)
        path.mkdir(parents=True, exist_ok=True)
        if first_missing is not None:
            made = first_missing

            def remove() -> None:
                unmount_under(made)
                shutil.rmtree(made, ignore_errors=True)

            self.record(f"directory {made}", remove)
        return path

    def sysctls(self, names: list[str]) -> None:
        """Restore these kernel settings afterwards (the kubelet sets some: kernel.panic,
        kernel.panic_on_oops, vm.overcommit_memory)."""
        saved = {name: _sysctl_path(name).read_text() for name in names}

        def restore() -> None:
            for name, value in saved.items():
                path = _sysctl_path(name)
                if path.read_text() != value:
                    path.write_text(value)

        self.record("kernel settings " + ", ".join(names), restore)

    def bridge(self, name: str, addresses: list[str]) -> None:
        """A bridge with no ports, up, with these addresses (``a.b.c.d/len``)."""
        if Path(f"/sys/class/net/{name}").exists():
            raise MachineError(f"network interface {name} exists already")
        run(["ip", "link", "add", name, "type", "bridge"])
        self.record(f"bridge {name}", lambda: self.remove_link(name))
        for address in addresses:
            run(["ip", "address", "add", address, "dev", name])
        run(["ip", "link", "set", name, "up"])

    def removed_link_afterwards(self, name: str) -> None:
        """A link something else makes (the CNI bridge plugin), removed afterwards."""
        self.record(f"link {name}", lambda: self.remove_link(name))

    @staticmethod
    def remove_link(name: str) -> None:
        if Path(f"/sys/class/net/{name}").exists():
            subprocess.run(["ip", "link", "delete", name], capture_output=True, check=False)

    def cgroup(self, name: str) -> None:
        """A cgroup ``name`` under every hierarchy's root (the kubelet's cgroup root, which it
        wants to exist), removed with everything below it afterwards."""
        for hierarchy in cgroup_hierarchies():
            (hierarchy / name).mkdir(exist_ok=True)
            # A new v1 cpuset has no CPUs and no memory nodes: nothing could join it.
            for setting in ("cpuset.cpus", "cpuset.mems"):
                if (hierarchy / setting).exists():
                    (hierarchy / name / setting).write_text((hierarchy / setting).read_text())
        self.record(f"cgroup {name}", lambda: remove_cgroup_tree(name))

    def undo(self) -> None:
        """Every change undone, newest first; the failures are raised together at the end."""
        problems = []
        while self._undo:
            what, undo = self._undo.pop()
            try:
                undo()
            except Exception as error:
                problems.append(f"{what}: {error!r}")
        if problems:
            raise MachineError("the machine was not restored fully:\n" + "\n".join(problems))

    @contextlib.contextmanager
    def undone(self) -> Iterator[MachineChanges]:
        try:
            yield self
        finally:
            self.undo()


def _sysctl_path(name: str) -> Path:
    return Path("/proc/sys") / name.replace(".", "/")


def processes_in_cgroup(name: str) -> list[int]:
    """The PIDs in cgroup ``name`` or below, in any hierarchy."""
    pids: set[int] = set()
    for hierarchy in cgroup_hierarchies():
        top = hierarchy / name
        if not top.is_dir():
            continue
        for procs in top.rglob("cgroup.procs"):
            with contextlib.suppress(OSError):
                pids.update(int(line) for line in procs.read_text().split())
    pids.discard(os.getpid())
    return sorted(pids)
