"""The real node's images, built here: nothing can be pulled.

    python -m tests.node.images OUTPUT_DIRECTORY

- the sandbox ("pause") image, from the Kubernetes module's own ``build/pause/linux/pause.c``
  (in the Go module cache of tests/kube/go/v1.37), compiled static;
- busybox, the static binary of Debian's ``busybox-static`` package (downloaded, unpacked
  beside it: it conflicts with the ``busybox`` package the host has), under the name the
  token-demo example runs, ``busybox:1.36``, so the example runs unchanged.

Each is an OCI archive written by packaging/image/oci.py, as `make image` writes the agent's,
and named by its ``io.containerd.image.name`` annotation, which ``ctr images import`` takes.
An archive already there is kept: `make node-programs` runs this every time.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

from tests.scripts import oci_module

REPO = Path(__file__).resolve().parents[2]
RELEASE_MODULE = REPO / "tests" / "kube" / "go" / "v1.37"


@dataclass(frozen=True)
class Image:
    name: str  # as containerd names it
    tag: str
    archive: str  # the file's name in the output directory
    containerfile: str  # what oci.py reads for the image's config

    @property
    def reference(self) -> str:
        return f"{self.name}:{self.tag}"


PAUSE = Image(
    "localhost/token-resource-test/pause",
    "3.10",
    "pause.oci.tar",
    'LABEL org.opencontainers.image.title="pause"\nENTRYPOINT ["/pause"]\n',
)
BUSYBOX = Image(
    "docker.io/library/busybox",
    "1.36",
    "busybox.oci.tar",
    'LABEL org.opencontainers.image.title="busybox-static from Debian"\nCMD ["sh"]\n',
)
IMAGES = (PAUSE, BUSYBOX)


def run(command: list[str], cwd: Path | None = None) -> str:
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"images: {' '.join(command)} failed:\n{done.stderr.strip()}")
    return done.stdout.strip()


def pause_root(scratch: Path) -> dict[str, Path]:
    # Downloaded here if need be: on a cold module cache this runs before kube-programs has
    # fetched the module (go list -m would name a directory that is not there yet).
    found = json.loads(run(["go", "mod", "download", "-json", "k8s.io/kubernetes"], RELEASE_MODULE))
    module, version = Path(found["Dir"]), found["Version"]
    binary = scratch / "pause"
    run(
        [
            "gcc",
            "-Os",
            "-static",
            "-Wall",
            "-Werror",
            f"-DVERSION={version}",
            "-o",
            str(binary),
            str(module / "build" / "pause" / "linux" / "pause.c"),
        ]
    )
    return {"pause": binary}


def busybox_root(scratch: Path) -> dict[str, Path]:
    run(["apt-get", "download", "busybox-static"], scratch)
    (package,) = scratch.glob("busybox-static_*.deb")
    unpacked = scratch / "unpacked"
    run(["dpkg-deb", "-x", str(package), str(unpacked)])
    return {"bin/busybox": unpacked / "bin" / "busybox"}


def busybox_tar(files: dict[str, Path], output: Path) -> None:
    """busybox's root: the binary and a link per applet, /tmp, and the directories the
    runtime mounts over (/proc, /sys, /dev, /etc)."""
    applets = run([str(files["bin/busybox"]), "--list"]).split()
    with tarfile.open(output, "w") as archive:
        for directory in ("bin", "tmp", "proc", "sys", "dev", "etc"):
            info = tarfile.TarInfo(directory)
            info.type, info.mode = tarfile.DIRTYPE, 0o1777 if directory == "tmp" else 0o755
            archive.addfile(info)
        archive.add(files["bin/busybox"], "bin/busybox")
        for applet in applets:
            if applet != "busybox":
                link = tarfile.TarInfo(f"bin/{applet}")
                link.type, link.linkname = tarfile.SYMTYPE, "busybox"
                archive.addfile(link)


def plain_tar(files: dict[str, Path], output: Path) -> None:
    with tarfile.open(output, "w") as archive:
        for name, path in files.items():
            archive.add(path, name)


def build(image: Image, output_directory: Path) -> Path:
    archive = output_directory / image.archive
    if archive.exists():
        return archive
    with tempfile.TemporaryDirectory(prefix="tr-node-image-") as scratch_name:
        scratch = Path(scratch_name)
        rootfs = scratch / "rootfs.tar"
        if image is PAUSE:
            plain_tar(pause_root(scratch), rootfs)
        else:
            busybox_tar(busybox_root(scratch), rootfs)
        containerfile = scratch / "Containerfile"
        containerfile.write_text(image.containerfile)
        oci_module().build(rootfs, containerfile, image.tag, archive, image.name)
    return archive


def main() -> None:
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    output = Path(sys.argv[1])
    output.mkdir(parents=True, exist_ok=True)
    for image in IMAGES:
        print(f"images: {image.reference} in {build(image, output)}")


if __name__ == "__main__":
    main()
