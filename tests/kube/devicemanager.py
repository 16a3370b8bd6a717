"""The kubelet's real device manager (go/harness/devicemanager), run in a mount namespace of
its own where /var/lib/kubelet/device-plugins is a test's device-plugin directory."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.kube.lines import Program
from tests.kube.programs import program

# The manager's fixed directory: inside its namespace, a bind mount of the test's directory.
FIXED_DIRECTORY = "/var/lib/kubelet/device-plugins"

# A tmpfs over /var/lib first: the bind mount's target is then made in the namespace's own
# tmpfs, and the host's /var/lib is neither seen nor touched. Private propagation keeps every
# mount out of the host's namespace; they go with the namespace when the program exits.
_NAMESPACE_SCRIPT = (
    "set -e; mount -t tmpfs tmpfs /var/lib; "
    f"mkdir -p {FIXED_DIRECTORY}; "
    f'mount --bind "$1" {FIXED_DIRECTORY}; '
    'exec "$2"'
)


def host_mounts(directory: Path) -> list[str]:
    """The mount points of the tests' own mount namespace that the program's namespace makes
    in its own: /var/lib, the fixed directory, and at or under ``directory``. Only these: other
    tests (a real node's pods, booted containers) mount and unmount elsewhere meanwhile."""
    lines = Path("/proc/self/mountinfo").read_text().splitlines()
    points = (Path(line.split()[4]) for line in lines)
    return sorted(
        str(point)
        for point in points
        if point in (Path("/var/lib"), Path(FIXED_DIRECTORY))
        or point == directory
        or directory in point.parents
    )


Counts = dict[str, int]


class DeviceManager:
    """The program for ``release``, serving kubelet.sock in ``directory`` once started."""

    def __init__(self, release: str, directory: Path, log_path: Path) -> None:
        self.release = release
        self.directory = directory
        command = [
            "unshare",
            "--mount",
            "--propagation",
            "private",
            "--",
            "sh",
            "-c",
            _NAMESPACE_SCRIPT,
            "sh",
            str(directory),
            str(program(release, "devicemanager")),
        ]
        self.program = Program(command, log_path)

    def start(self) -> None:
        self.program.call("start")

    def stop(self) -> None:
        self.program.call("stop")

    def restart(self) -> None:
        """A kubelet restart: the manager stopped, a new one made and started in the same
        directory (its wipe of the sockets there, its checkpoint read back)."""
        self.stop()
        self.start()

    def capacity(self) -> dict[str, Any]:
        result: dict[str, Any] = self.program.call("capacity")
        return result

    def wait_for(
        self, predicate: Callable[[dict[str, Any]], bool], what: str, timeout: float = 30.0
    ) -> dict[str, Any]:
        """GetCapacity, asked again (as the kubelet's node status does, more often) until
        ``predicate`` holds for it."""
        deadline = time.monotonic() + timeout
        while not predicate(seen := self.capacity()):
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"device manager {self.release}: {what} not seen in {timeout:g} s; "
                    f"last GetCapacity: {seen}; log:\n{self.program.log_tail()}"
                )
            time.sleep(0.05)
        return seen

    def wait_for_allocatable(self, counts: Mapping[str, int], timeout: float = 30.0) -> Counts:
        wanted = dict(counts)
        seen = self.wait_for(lambda c: c["allocatable"] == wanted, f"allocatable {wanted}", timeout)
        capacity: Counts = seen["capacity"]
        return capacity

    def allocatable_seen(self) -> list[Counts]:
        """Every allocatable the program saw, in order (asked every 2 ms)."""
        return list(self.program.events("allocatable"))

    def admit(self, pod: str, containers: Mapping[str, Mapping[str, int]]) -> dict[str, Any]:
        result: dict[str, Any] = self.program.call("admit", pod=pod, containers=containers)
        return result

    def options(self, pod: str, containers: Mapping[str, Mapping[str, int]]) -> dict[str, Any]:
        result: dict[str, Any] = self.program.call("options", pod=pod, containers=containers)
        return result

    def status(self, pod: str) -> dict[str, Any]:
        result: dict[str, Any] = self.program.call("status", pod=pod)
        return result

    def log(self) -> str:
        return self.program.log_path.read_text(errors="replace")

    def close(self) -> int:
        return self.program.stop()


@contextmanager
def running(release: str, directory: Path, log_path: Path) -> Iterator[DeviceManager]:
    """The release's device manager started in ``directory``; at the end it must exit 0 and
    its namespace's mounts be gone with it (the host's table as it was)."""
    mounts = host_mounts(directory)
    manager = DeviceManager(release, directory, log_path)
    try:
        manager.start()
        yield manager
    finally:
        code = manager.close()
        assert code == 0, f"device manager exited with {code}:\n{manager.program.log_tail()}"
        assert host_mounts(directory) == mounts
