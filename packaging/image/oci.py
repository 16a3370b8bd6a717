"""Write an OCI image archive from a root file-system tarball, with the image settings read from
the Containerfile, so that `make image` and `podman build -f Containerfile` agree.

    python3 packaging/image/oci.py ROOTFS.tar CONTAINERFILE VERSION OUTPUT.oci.tar NAME

The archive is an OCI image layout (oci-layout, index.json, blobs/sha256/...) in a tar, with one
gzip layer; `podman load`, `skopeo copy oci-archive:...` and containerd's `ctr image import`
read it. The image is NAME:VERSION (e.g. localhost/token-resource:0.1.0, what the manifests in
deploy/kubernetes/base run): index.json names it as containerd's own exports do, in the
annotation io.containerd.image.name, which `ctr images import` takes as the image's name as it
is, and with the tag alone in org.opencontainers.image.ref.name. (Without the first, ctr names
the image import-<date>:VERSION.) Standard library only: it runs on the build host's
/usr/bin/python3.
"""

from __future__ import annotations

import datetime
import gzip
import hashlib
import io
import json
import os
import re
import shlex
import sys
import tarfile
from pathlib import Path
from typing import Any

# The settings of the Containerfile that become the image's config; the rest (FROM, COPY, RUN)
# is what mmdebstrap does instead.
_SETTINGS = ("ENV", "LABEL", "STOPSIGNAL", "ENTRYPOINT", "CMD")
_PATH = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# containerd's annotation for an image's full name in an archive's index.json.
CONTAINERD_IMAGE_NAME = "io.containerd.image.name"


def containerfile_settings(text: str) -> dict[str, Any]:
    """The image config's Env, Labels, StopSignal, Entrypoint and Cmd, from a Containerfile."""
    logical = re.sub(r"\\\n", " ", text)
    config: dict[str, Any] = {"Env": [_PATH], "Labels": {}}
    for line in logical.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        instruction, _, rest = line.strip().partition(" ")
        instruction = instruction.upper()
        if instruction not in _SETTINGS:
            continue
        if instruction in ("ENTRYPOINT", "CMD"):
            # The exec form only: the shell form would need a shell the image may lack.
            config[instruction.capitalize()] = json.loads(rest)
        elif instruction == "STOPSIGNAL":
            config["StopSignal"] = rest.strip()
        else:
            pairs = dict(word.split("=", 1) for word in shlex.split(rest))
            if instruction == "ENV":
                config["Env"] += [f"{key}={value}" for key, value in pairs.items()]
            else:
                config["Labels"].update(pairs)
    return config


def _blob(layout: dict[str, bytes], data: bytes, media_type: str) -> dict[str, Any]:
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    layout[f"blobs/sha256/{digest[7:]}"] = data
    return {"mediaType": media_type, "digest": digest, "size": len(data)}


def _json(value: object) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def build(rootfs: Path, containerfile: Path, version: str, output: Path, name: str) -> None:
    epoch = int(os.environ.get("SOURCE_DATE_EPOCH", "0"))
    created = _rfc3339(epoch)
    layer_tar = rootfs.read_bytes()
    compressed = io.BytesIO()
    with gzip.GzipFile(fileobj=compressed, mode="wb", mtime=epoch, compresslevel=9) as stream:
        stream.write(layer_tar)
    settings = containerfile_settings(containerfile.read_text())
    settings["Labels"]["org.opencontainers.image.version"] = version
    layout: dict[str, bytes] = {}
    layer = _blob(layout, compressed.getvalue(), "application/vnd.oci.image.layer.v1.tar+gzip")
    config = _blob(
        layout,
        _json(
            {
                "architecture": _architecture(),
                "os": "linux",
                "created": created,
                "config": settings,
                "rootfs": {
                    "type": "layers",
                    "diff_ids": ["sha256:" + hashlib.sha256(layer_tar).hexdigest()],
                },
                "history": [{"created": created, "created_by": "make image (mmdebstrap)"}],
            }
        ),
        "application/vnd.oci.image.config.v1+json",
    )
    manifest = _blob(
        layout,
        _json(
            {
                "schemaVersion": 2,
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "config": config,
                "layers": [layer],
            }
        ),
        "application/vnd.oci.image.manifest.v1+json",
    )
    manifest["annotations"] = {
        CONTAINERD_IMAGE_NAME: f"{name}:{version}",
        "org.opencontainers.image.ref.name": version,
    }
    layout["index.json"] = _json({"schemaVersion": 2, "manifests": [manifest]})
    layout["oci-layout"] = _json({"imageLayoutVersion": "1.0.0"})
    temporary = output.with_name(output.name + ".tmp")
    with tarfile.open(temporary, "w", format=tarfile.PAX_FORMAT) as archive:
        for member in sorted(layout):
            info = tarfile.TarInfo(member)
            info.size, info.mtime, info.mode = len(layout[member]), epoch, 0o644
            archive.addfile(info, io.BytesIO(layout[member]))
    temporary.replace(output)


def _architecture() -> str:
    machine = os.uname().machine
    return {"x86_64": "amd64", "aarch64": "arm64"}.get(machine, machine)


def _rfc3339(epoch: int) -> str:
    moment = datetime.datetime.fromtimestamp(epoch, tz=datetime.timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


if __name__ == "__main__":
    if len(sys.argv) != 6:
        sys.exit(__doc__)
    build(Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], Path(sys.argv[4]), sys.argv[5])
