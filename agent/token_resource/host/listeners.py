"""Whether anyone still listens on a unix socket file: a socket file outlives the process that
served it when that process is killed, and only a connect() tells a dead one from a live one."""

from __future__ import annotations

import socket
from pathlib import Path


def nobody_listens(path: Path) -> bool:
    """A socket file whose connect() is refused: its server is gone. False for anything else
    (not a socket, someone listening, or an answer that proves nothing)."""
    if not path.is_socket():
        return False  # connect() is refused for other files too
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(1.0)
        try:
            probe.connect(str(path))
        except ConnectionRefusedError:
            return True
        except OSError:
            return False  # not ours to judge
    return False
