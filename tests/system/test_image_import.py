"""The image archive imports into a real containerd under the name the manifests run.

A node without a registry loads the archive with `ctr -n k8s.io images import FILE`, the command
docs/kubernetes.md gives, and the kubelet then finds deploy/kubernetes/base's image by name.
Debian's containerd runs here as a process of the test's, with its own root, state and socket in
a temporary directory; it is stopped, whatever it mounted is unmounted, and the directory is
removed afterwards.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

from tests.system import harness
from tests.system.conftest import base_image
from tests.system.node import wait_for

NAMESPACE = "k8s.io"  # the namespace of the kubelet's images (containerd's CRI plugin)
TIMEOUT = 300.0


def mounts_under(directory: Path) -> list[str]:
    """Mount points at or below ``directory`` in this mount namespace, deepest first."""
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        mount_point = line.split()[4].replace("\\040", " ")
        if Path(mount_point) == directory or directory in Path(mount_point).parents:
            found.append(mount_point)
    return sorted(found, key=len, reverse=True)


@contextlib.contextmanager
def containerd() -> Iterator[Path]:
    """A containerd of the test's own; yields the address of its socket."""
    directory = Path(tempfile.mkdtemp(prefix="tr-ctrd-"))
    address = directory / "containerd.sock"
    config = directory / "config.toml"
    # No CRI plugin (it would open a streaming port and look for CNI), and no "opt" plugin (it
    # creates /opt/containerd on the host): the image store and snapshotters are what ctr needs.
    config.write_text(
        "version = 2\n"
        f'root = "{directory / "root"}"\n'
        f'state = "{directory / "state"}"\n'
        'disabled_plugins = ["io.containerd.grpc.v1.cri", "io.containerd.internal.v1.opt"]\n'
        f'[grpc]\n  address = "{address}"\n'
    )
    log = directory / "containerd.log"
    left_mounted: list[str] = []
    try:
        with log.open("wb") as output:
            process = subprocess.Popen(
                ["containerd", "--config", str(config)],
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        try:
            wait_for(
                lambda: process.poll() is not None or ctr(address, "version", check=False),
                60,
                "containerd to answer",
            )
            assert process.poll() is None, f"containerd exited:\n{log.read_text()}"
            yield address
        finally:
            process.terminate()
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(30)
            left_mounted = mounts_under(directory)
            for mount_point in left_mounted:
                harness.run(["umount", "--lazy", mount_point], timeout=60)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    assert not left_mounted, f"containerd left mounts behind: {left_mounted}"


def ctr(address: Path, *argv: str, check: bool = True) -> str:
    """ctr against the test's containerd, in the kubelet's namespace; its output."""
    result = harness.run(
        ["ctr", "--address", str(address), "--namespace", NAMESPACE, *argv],
        timeout=TIMEOUT,
        check=check,
    )
    return result.stdout if result.returncode == 0 else ""


def test_ctr_import_names_the_image_as_the_manifests_run_it(image: Path) -> None:
    with containerd() as address:
        # What docs/kubernetes.md tells a node without a registry to run (here with the test's
        # containerd).
        output = ctr(address, "images", "import", str(image))
        print(output)
        names = ctr(address, "images", "ls", "--quiet").split()
        assert names == [base_image()], output
        # Complete, and unpacked for containerd's default snapshotter, as the kubelet needs it.
        (row,) = ctr(address, "images", "check", f"name=={base_image()}").splitlines()[1:]
        assert "complete" in row, row
        assert row.split()[-1] == "true", row
