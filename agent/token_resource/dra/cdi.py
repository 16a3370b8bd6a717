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
from collections.abc import Mapping, Sequence
from pathlib import Path

# Environment variables alone need nothing newer; runtimes refuse versions beyond their library.
CDI_VERSION = "0.3.0"
CDI_CLASS = "claim"


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
    spec = {
        "cdiVersion": CDI_VERSION,
        "kind": f"{driver}/{CDI_CLASS}",
        "devices": [
            {
                "name": device_name(claim_uid, index),
                "containerEdits": {"env": [f"{name}={value}" for name, value in env.items()]},
            }
            for index, env in enumerate(environments)
        ],
    }
    cdi_dir.mkdir(parents=True, exist_ok=True)
    path = spec_path(cdi_dir, driver, claim_uid)
    # A hidden name with another suffix: runtimes read only *.json and *.yaml.
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(json.dumps(spec, indent=2) + "\n")
    os.replace(temporary, path)
    return [device_id(driver, claim_uid, index) for index in range(len(environments))]


def remove_spec(cdi_dir: Path, driver: str, claim_uid: str) -> None:
    spec_path(cdi_dir, driver, claim_uid).unlink(missing_ok=True)
