"""``make demo`` works as a newcomer would run it (its scripted tour, which ends by itself)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_demo_tour_shows_the_kubelet_following_edits_and_restarts() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "tests.demo", "--tour"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "example.com/license      allocatable 5/5  registered 1x" in out
    assert "example.com/token        allocatable 4/4  registered 1x" in out
    assert "acme.io/dongle           allocatable 1/1  registered 1x  [token-0]" in out
    assert "example.com/token        allocatable 4/4  registered 2x" in out
    assert "the agent exited with status 0" in out
    assert "Traceback" not in result.stderr
