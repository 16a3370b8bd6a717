"""The kubelet stand-in as a process of its own, as the system tests' containers run it::

    python3 -m tests.standin.kubelet_script --dir DIR [--state-file FILE] [--register-first]
        [--device-manager {1.32,1.36,1.37}]
        [--socket-after S] [--admit-after S] [--pods FILE] [--runtime-file FILE]
        [--leave-socket]
        [--plugins-registry-dir DIR [--node NODE] [--apiserver URL --ca F --cert F --key F]]

Only ``tests/standin``, the installed ``token_resource`` package, grpcio and protobuf need to be
there (and watchdog for the DRA options). It prints one line per event. SIGHUP restarts the
kubelet (wiping the files in DIR that its device manager wipes), SIGTERM and SIGINT stop it.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from tests.standin.admission import PodStore, RuntimeState
from tests.standin.kubelet import LOG, KubeletStandin
from tests.standin.kubelet_endpoints import DEVICE_MANAGERS

_SIGNALS = {signal.SIGHUP, signal.SIGINT, signal.SIGTERM}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description="A kubelet stand-in for device plugins.")
    parser.add_argument("--dir", type=Path, required=True, help="the device-plugin directory")
    parser.add_argument("--state-file", type=Path, help="keep a JSON snapshot here")
    parser.add_argument(
        "--register-first",
        action="store_true",
        help="answer Register before dialling the plugin, like a 1.24-era kubelet",
    )
    parser.add_argument(
        "--device-manager",
        choices=DEVICE_MANAGERS,
        default="1.32",
        help="the device manager's release: its wipe at start and the endpoints it keeps per "
        "resource (tests/standin/kubelet_endpoints.py; default 1.32)",
    )
    parser.add_argument(
        "--socket-after",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="create kubelet.sock this long after the process started (a real 1.36 kubelet: "
        "0.33-0.42 s)",
    )
    parser.add_argument(
        "--admit-after",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="admit the pods this long after kubelet.sock appeared: a real kubelet waits for "
        "its Node to sync, polling every second (1.36: 0.85-0.99 s after the socket)",
    )
    parser.add_argument(
        "--pods",
        type=Path,
        help="the pods bound to the node (JSON, see tests/standin/admission.py), admitted "
        "at every start; their statuses are written back",
    )
    parser.add_argument(
        "--runtime-file",
        type=Path,
        help="which pods' containers run (put it on a tmpfs: a reboot clears it); "
        "default: this process's memory",
    )
    parser.add_argument(
        "--leave-socket",
        action="store_true",
        help="on SIGTERM or SIGINT exit at once, leaving kubelet.sock behind with nobody "
        "listening, as a node going down left it on a real node",
    )
    dra = parser.add_argument_group("DRA (kubelet_plugins.py and kubelet_dra.py)")
    dra.add_argument("--plugins-registry-dir", type=Path, help="run the plugin watcher here")
    dra.add_argument("--node", default="node-a", help="the node's name (default node-a)")
    dra.add_argument("--apiserver", help="the API server's URL, for the slice wipes")
    dra.add_argument("--ca", type=Path, help="the API server's CA (PEM)")
    dra.add_argument("--cert", type=Path, help="the node's client certificate (PEM)")
    dra.add_argument("--key", type=Path, help="the node's client key (PEM)")
    dra.add_argument("--grace", type=float, default=30.0, help="seconds before a wipe")
    return parser


def process_start() -> float:
    """When this process started, on time.monotonic()'s clock: /proc/self/stat's start time
    counts clock ticks since boot (CLOCK_BOOTTIME)."""
    after_name = Path("/proc/self/stat").read_text().rpartition(")")[2].split()
    ticks = int(after_name[19])  # field 22, starttime; the fields after the name start at 3
    since_start = time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK")
    return time.monotonic() - since_start


def main(argv: Sequence[str] | None = None) -> int:
    """Run until SIGTERM or SIGINT; SIGHUP restarts the kubelet."""
    started = process_start()
    args = _parser().parse_args(argv)
    # The signals are blocked in every thread (threads inherit the mask, so before any
    # starts) and taken with sigwaitinfo: no handler can interrupt a thread holding a lock.
    previous_mask = signal.pthread_sigmask(signal.SIG_BLOCK, _SIGNALS)
    try:
        logging.basicConfig(stream=sys.stdout, level=logging.INFO, format="%(message)s")
        access = None
        if args.apiserver:
            from tests.standin.kubelet_dra import ApiAccess  # noqa: PLC0415 (DRA only)

            access = ApiAccess(
                args.apiserver, args.ca.read_bytes(), args.cert.read_bytes(), args.key.read_bytes()
            )
        standin = KubeletStandin(
            args.dir,
            register_first=args.register_first,
            device_manager=args.device_manager,
            state_file=args.state_file,
            pods=None if args.pods is None else PodStore(args.pods),
            runtime=RuntimeState(args.runtime_file),
            socket_after=args.socket_after,
            admit_after=args.admit_after,
            started_at=started,
            plugins_registry_dir=args.plugins_registry_dir,
            node=args.node,
            apiserver=access,
            deregistration_grace=args.grace,
        )
        with standin:
            while signal.sigwaitinfo(_SIGNALS).si_signo == signal.SIGHUP:
                standin.restart()
            if args.leave_socket:
                # A stop would close the listener, and gRPC would remove the socket file.
                LOG.info("kubelet exiting, leaving %s behind", standin.socket_path)
                sys.stdout.flush()
                os._exit(0)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous_mask)
    return 0


if __name__ == "__main__":
    sys.exit(main())
