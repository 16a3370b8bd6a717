"""Stand-ins of the license servers' status tools, FlexNet's ``lmutil`` and RLM's ``rlmutil``:
a small program that prints whatever the test last served it (the whole output and the exit
status, rewritten at once, so a check never reads half of one and half of another) and
records each command line it was run with. The outputs follow the documented formats
(``lmstat``'s ``Users of ...`` lines, ``rlmstat``'s pool lines); the recorded variants and
errors the parsers read are in tests/health/license_outputs/."""

from __future__ import annotations

import os
import shlex
from pathlib import Path

LMSTAT_DOWN = (
    "lmutil - Copyright (c) 1989-2023 Flexera. All Rights Reserved.\n"
    "Flexible License Manager status on Tue 3/4/2025 09:12\n\n"
    'Error getting status: Cannot connect to license server system. (-15,570:111 "Connection '
    'refused")\n'
)
RLMSTAT_DOWN = (
    "rlmutil v15.2\n"
    'Error connecting to "rlm" server on licsrv (port 5053)\n'
    " Communications error with license server (-17)\n"
)


class LicenseTool:
    """``directory/name`` (e.g. ``lmutil``), serving ``output`` with exit ``status``."""

    def __init__(self, directory: Path, name: str) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.path = directory / name
        self._reply = directory / f"{name}.reply"
        self._calls = directory / f"{name}.calls"
        self.serve("", 0)
        self.path.write_text(
            "#!/bin/sh\n"
            f"printf '%s\\n' \"$*\" >> {shlex.quote(str(self._calls))}\n"
            f'{{ read -r status; cat; exit "$status"; }} < {shlex.quote(str(self._reply))}\n'
        )
        self.path.chmod(0o755)

    def serve(self, output: str, status: int = 0) -> None:
        partial = self._reply.with_name(self._reply.name + ".new")
        partial.write_text(f"{status}\n{output}")
        os.replace(partial, self._reply)

    def calls(self) -> list[str]:
        """Each run's arguments, space-separated, oldest first."""
        return self._calls.read_text().splitlines() if self._calls.exists() else []


def lmstat(feature: str, issued: int, in_use: int) -> str:
    """``lmutil lmstat -c ... -f FEATURE``'s output for a counted floating feature."""

    def licenses(count: int) -> str:
        return f"{count} license" if count == 1 else f"{count} licenses"

    users = "".join(
        f"    user{i} node-{i} /dev/pts/0 (v45) (licsrv/27000 {100 + i}), start Tue 3/4 8:{i:02}\n"
        for i in range(in_use)
    )
    return (
        "lmutil - Copyright (c) 1989-2023 Flexera. All Rights Reserved.\n"
        "Flexible License Manager status on Tue 3/4/2025 09:12\n\n"
        "License server status: 27000@licsrv\n"
        "    licsrv: license server UP (MASTER) v11.19.4\n\n"
        "Feature usage info:\n\n"
        f"Users of {feature}:  (Total of {licenses(issued)} issued;  "
        f"Total of {licenses(in_use)} in use)\n\n"
        f'  "{feature}" v45, vendor: MLM, expiry: 31-dec-2026\n  floating license\n\n{users}'
    )


def rlmstat(product: str, count: int, in_use: int, reserved: int = 0) -> str:
    """``rlmutil rlmstat -c ... -a``'s output with one pool of ``product``."""
    return (
        "rlmutil v15.2\n\n"
        "\tsimvend license pool status on licsrv (port 49211)\n\n"
        f"\t{product} v2024.1\n"
        f"\t\tcount: {count}, # reservations: {reserved}, inuse: {in_use}, exp: permanent\n"
        "\t\tobsolete: 0, min_remove: 120, total checkouts: 17\n"
    )
