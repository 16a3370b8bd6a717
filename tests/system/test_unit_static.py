"""The unit file on the host: systemd-analyze security's overall exposure within target, and its
ordering against the kubelet."""

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


def unit_settings() -> list[tuple[str, str, str]]:
    """(section, key, value) of every setting in the unit file, in order."""
    settings, section = [], ""
    for line in UNIT_FILE.read_text().splitlines():
        if line.startswith("["):
            section = line.strip("[]")
        elif line and not line.startswith("#") and "=" in line:
            key, _, value = line.partition("=")
            settings.append((section, key, value))
    return settings


def test_ready_before_the_kubelet_and_never_depending_on_it() -> None:
    settings = unit_settings()
    assert ("Unit", "Before", "kubelet.service") in settings
    for section, key, value in settings:
        if key in ("After", "Requires", "Requisite", "Wants", "BindsTo", "PartOf", "Conflicts"):
            assert "kubelet" not in value, (section, key, value)
    # READY=1 is what systemd waits for before it starts the kubelet.
    assert ("Service", "Type", "notify") in settings
    timeouts = [value for _, key, value in settings if key == "TimeoutStartSec"]
    assert timeouts == ["15s"], timeouts
