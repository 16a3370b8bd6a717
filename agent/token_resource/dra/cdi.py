"""CDI spec files: how a container of a prepared claim learns its tokens.

The kubelet passes the CDI device IDs the driver returns to the container runtime, which reads
the device's edits from a spec file in the CDI directory when it creates the container: here
one environment variable per resource, naming the token IDs, as the device plugin's Allocate
sets it. One spec file per claim, one CDI device per request of the claim (each container gets
the devices of the requests it uses), written atomically (the runtime may read the directory at
any moment) before the claim is reported prepared, removed when it is unprepared.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

CDI_CLASS = "claim"

# What each CDI spec version added, newest first, as the CDI library's MinimumRequiredVersion
# (specs-go/version.go) checks it: runtimes refuse a whole file whose cdiVersion is lower than
# what it uses ("the spec version must be at least v0.5.0"), and a version newer than their
# library knows, so every spec carries the lowest version that fits it. A device named after a
# claim UID begins with a digit 10 times in 16: 0.5.0, which containerd 1.7 and newer, CRI-O
# and podman 4 accept; the others stay at 0.3.0, which every CDI library accepts.
Spec = Mapping[str, Any]
_BASE_VERSION = "0.3.0"


def _edits(spec: Spec) -> Iterator[Mapping[str, Any]]:
    """The spec's container edits: its own, then each device's."""
    yield spec.get("containerEdits") or {}
    for device in spec.get("devices", ()):
        yield device.get("containerEdits") or {}


def _uses_net_devices_or_rdt_monitoring(spec: Spec) -> bool:
    return any(
        edits.get("netDevices")
        or any(key in (edits.get("intelRdt") or {}) for key in ("schemata", "enableMonitoring"))
        for edits in _edits(spec)
    )


def _uses_rdt_or_gids(spec: Spec) -> bool:
    return any(edits.get("intelRdt") or edits.get("additionalGids") for edits in _edits(spec))


def _uses_annotations_or_dotted_class(spec: Spec) -> bool:
    _, _, device_class = str(spec.get("kind", "")).partition("/")
    return (
        "." in device_class
        or bool(spec.get("annotations"))
        or any(device.get("annotations") for device in spec.get("devices", ()))
    )


def _uses_non_letter_names_or_host_paths(spec: Spec) -> bool:
    return any(
        name[:1] and not ("a" <= name[0].lower() <= "z")
        for name in (str(device.get("name", "")) for device in spec.get("devices", ()))
    ) or any(
        node.get("hostPath") for edits in _edits(spec) for node in edits.get("deviceNodes", ())
    )


def _uses_typed_mounts(spec: Spec) -> bool:
    return any(mount.get("type") for edits in _edits(spec) for mount in edits.get("mounts", ()))


_VERSION_RULES: tuple[tuple[str, Callable[[Spec], bool]], ...] = (
    ("1.1.0", _uses_net_devices_or_rdt_monitoring),
    ("0.7.0", _uses_rdt_or_gids),
    ("0.6.0", _uses_annotations_or_dotted_class),
    ("0.5.0", _uses_non_letter_names_or_host_paths),
    ("0.4.0", _uses_typed_mounts),
)


def minimum_version(spec: Spec) -> str:
    """The lowest ``cdiVersion`` whose rules ``spec`` meets."""
    for version, needs in _VERSION_RULES:
        if needs(spec):
            return version
    return _BASE_VERSION


def spec_path(cdi_dir: Path, driver: str, claim_uid: str) -> Path:
    return cdi_dir / f"{driver}-{claim_uid}.json"


def device_id(driver: str, claim_uid: str, index: int) -> str:
    """The fully qualified CDI name: ``<vendor>/<class>=<device>``."""
    return f"{driver}/{CDI_CLASS}={device_name(claim_uid, index)}"


def device_name(claim_uid: str, index: int) -> str:
    return f"{claim_uid}-{index}"


def write_spec(
    cdi_dir: Path,
    driver: str,
    claim_uid: str,
    environments: Sequence[Mapping[str, str]],
) -> list[str]:
    """Write the claim's spec: device ``index`` sets the variables of ``environments[index]``.
    Returns the CDI IDs, in the same order."""
    spec: dict[str, Any] = {
        "kind": f"{driver}/{CDI_CLASS}",
        "devices": [
            {
                "name": device_name(claim_uid, index),
                "containerEdits": {"env": [f"{name}={value}" for name, value in env.items()]},
            }
            for index, env in enumerate(environments)
        ],
    }
    spec = {"cdiVersion": minimum_version(spec), **spec}
    cdi_dir.mkdir(parents=True, exist_ok=True)
    path = spec_path(cdi_dir, driver, claim_uid)
    # A hidden name with another suffix: runtimes read only *.json and *.yaml.
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(json.dumps(spec, indent=2) + "\n")
    os.replace(temporary, path)
    return [device_id(driver, claim_uid, index) for index in range(len(environments))]


def remove_spec(cdi_dir: Path, driver: str, claim_uid: str) -> None:
    spec_path(cdi_dir, driver, claim_uid).unlink(missing_ok=True)
