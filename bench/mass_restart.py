"""What a mass reboot asks of the API server: the fleet of bench/scale.py (the real control
plane, kwok, the real agents each beside its kubelet stand-in, the publisher) grown to
``TOKEN_RESOURCE_BENCH_MASS_RESTART_NODES`` Nodes (default 1,000; 100 with --quick), then
every real agent restarted at once, its first minute counted from the audit log (watches when
opened) by verb and resource, with the bytes it received and its CPU, and when each driver
registered with its kubelet again. The fleet section runs the same at its largest size; this
one alone takes a few minutes.
"""

from __future__ import annotations

import os
import signal
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

from bench.audit import AUDIT_POLICY
from bench.kwok import kwok
from bench.scale import Fleet, Sizes
from bench.scenarios import Scale, Section
from tests.kube.controlplane import ControlPlane

SETTLE = 30.0  # seconds the grown fleet is left alone before the restart


def mass_restart_section(scale: Scale) -> Section:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("bench: terminated"))
    default = "100" if scale.quick else "1000"
    nodes = int(os.environ.get("TOKEN_RESOURCE_BENCH_MASS_RESTART_NODES", default))
    agents = Sizes.of(scale).agents
    section = Section("A mass reboot: every real agent restarted at once")
    with tempfile.TemporaryDirectory(prefix="trb-restart-") as scratch, ExitStack() as stack:
        directory = Path(scratch)
        (directory / "cp").mkdir()
        cp = stack.enter_context(ControlPlane(directory / "cp", audit_policy=AUDIT_POLICY))
        stack.enter_context(kwok(cp, directory))
        fleet = stack.enter_context(Fleet.started(cp, directory, agents))
        fleet.grow(nodes)
        time.sleep(SETTLE)
        fleet.mass_restart().report(section, nodes)
    section.notes.append(
        f"{agents} real agents (host form: node credentials, one DRA and one node-status "
        "resource each, a pod holding one of its tokens on each node), each with a kubelet "
        "stand-in whose plugin watcher registers its driver. Requests from the API server's "
        "audit log, each counted once, a watch when it was opened; bytes: what the agents' "
        "sockets received (`ss` bytes_received, sampled each second); CPU: the processes' own "
        "rusage."
    )
    return section
