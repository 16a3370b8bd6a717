"""A license server for the real node's probes: a TCP port on the node's address, which the
test opens and closes and which the host's agent and a pod's alike reach; and what a probe of it
does to the tokens when it goes down and comes back."""

from __future__ import annotations

import socketserver
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.node.demo import Demo
from tests.node.modes import CANNOT_ALLOCATE, LICENSE, TOKEN, Mode, wait_offered
from tests.node.network import NODE_IP
from tests.node.node import RealNode
from tests.node.steps import undisturbed
from tests.standin.license_tools import RLMSTAT_DOWN, rlmstat

# Checked every second, one failure enough: the test waits for seconds, not for defaults.
PROBE_TIMING = "interval = 1, failure_threshold = 1"


class LicenseServer:
    """A TCP port on the node's address that accepts (and closes) connections while up."""

    def __init__(self) -> None:
        self.port = 0
        self._server: socketserver.TCPServer | None = None
        self._thread: threading.Thread | None = None

    def up(self) -> None:
        socketserver.TCPServer.allow_reuse_address = True
        server = socketserver.TCPServer((NODE_IP, self.port), socketserver.BaseRequestHandler)
        self.port = server.server_address[1]
        self._thread = threading.Thread(target=server.serve_forever, daemon=True)
        self._thread.start()
        self._server = server

    def down(self) -> None:
        if self._server is not None and self._thread is not None:
            self._server.shutdown()
            self._server.server_close()
            self._thread.join()
            self._server = None

    @property
    def probe(self) -> str:
        return f'{{ tcp = "{NODE_IP}:{self.port}", {PROBE_TIMING} }}'


# Where the publisher's pod finds the stand-in rlmutil (a volume of the chart's values).
RLMUTIL_DIR = "/opt/rlm"
RLM_PRODUCT = "seat"


def rlm_probe(server: LicenseServer) -> str:
    """A probe of ``server`` through RLM's tool, as a cluster pool's publisher runs it."""
    return (
        f'{{ rlm = "{server.port}@{NODE_IP}", product = "{RLM_PRODUCT}", '
        f'rlmutil = "{RLMUTIL_DIR}/rlmutil", {PROBE_TIMING} }}'
    )


def rlmutil_standin(directory: Path, seats: int) -> Path:
    """``directory/rlmutil``: RLM's status tool as the publisher's container runs it (the
    image's python3), whose answer follows the server it is given (``-c PORT@HOST``): its pool
    of ``seats``, none in use, while the port accepts; RLM's connection error and exit status 1
    while it does not. ``directory`` itself is what the pod mounts (any user may read it)."""
    directory.mkdir(exist_ok=True)
    directory.chmod(0o755)  # whatever the umask
    tool = directory / "rlmutil"
    tool.write_text(
        "#!/usr/bin/python3\n"
        "import socket, sys\n"
        "port, _, host = sys.argv[sys.argv.index('-c') + 1].partition('@')\n"
        "try:\n"
        "    socket.create_connection((host, int(port)), timeout=2).close()\n"
        "except OSError:\n"
        f"    sys.stdout.write({RLMSTAT_DOWN!r})\n"
        "    sys.exit(1)\n"
        f"sys.stdout.write({rlmstat(RLM_PRODUCT, seats, 0)!r})\n"
    )
    tool.chmod(0o755)
    return directory


@contextmanager
def license_server() -> Iterator[LicenseServer]:
    server = LicenseServer()
    server.up()
    try:
        yield server
    finally:
        server.down()


def probes_take_the_tokens_away(
    node: RealNode, mode: Mode, server: LicenseServer, demo: Demo, license_demo: Demo
) -> None:
    """With 3 tokens (and 3 licenses) and 2 pods of each running: the server goes down, a
    third pod waits; it comes back, the third runs. The running pods are never disturbed."""
    workloads = [(demo, TOKEN), (license_demo, LICENSE)] if mode.dra else [(demo, TOKEN)]
    running = {}
    for workload, _ in workloads:
        workload.apply()
        workload.scale(2)
        running[workload] = workload.running(2)

    server.down()
    for workload, resource in workloads:
        wait_offered(node.control_plane, node.name, mode, 0, resource)
        workload.scale(3)
        message = workload.pods.scheduling_message(workload.one_waiting())
        expected = mode.over_the_count if workload is demo else CANNOT_ALLOCATE
        assert message.startswith(expected), message

    server.up()
    for workload, before in running.items():
        workload.running(3)
        undisturbed(workload, before)
