"""The unit file on the host: systemd-analyze security's overall exposure within target."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

UNIT_FILE = Path(__file__).resolve().parents[2] / "systemd/token-resource.service"
MAX_EXPOSURE = 1.5


def test_security_exposure_is_within_target() -> None:
    result = subprocess.run(
        ["systemd-analyze", "security", "--offline=yes", "--no-pager", str(UNIT_FILE)],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    match = re.search(
        r"Overall exposure level for token-resource\.service: (\d+\.\d+)", result.stdout
    )
    assert match, result.stdout + result.stderr
    exposure = float(match.group(1))
    print(f"systemd-analyze security --offline=yes: overall exposure {exposure}")
    assert exposure <= MAX_EXPOSURE, result.stdout
