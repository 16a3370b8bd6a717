"""The ``token-resource`` command: run, check, reload, status, handover.

Only the standard library (and tomli before Python 3.11) is imported up front, so that
``--version``, ``--help``, ``check``, ``reload`` and ``status`` work whatever else is missing;
``run`` imports the runtime libraries when it starts, and names the package to install for
one that cannot be imported.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from token_resource import __version__
from token_resource.cli import check, device_classes, node_status, run, running
from token_resource.cli.common import EXIT_USAGE
from token_resource.config.model import DEFAULT_CONFIG_PATH, NODE_ROLE, ROLES
from token_resource.host import logs


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logs.configure(verbose=args.verbose)
    handlers = {
        "run": run.run,
        "check": check.check,
        "reload": running.reload,
        "status": running.status,
        "handover": running.handover,
        "node-status": node_status.node_status,
        "device-classes": device_classes.device_classes,
    }
    return handlers[args.command](args)


class _Parser(argparse.ArgumentParser):
    """argparse's parser, whose usage errors reach the journal at priority err."""

    def error(self, message: str) -> NoReturn:
        logs.print_error(f"{self.format_usage().rstrip()}\n{self.prog}: error: {message}")
        sys.exit(EXIT_USAGE)


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="token-resource",
        description="Serve Kubernetes extended resources (tokens) from one TOML file.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug messages")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    config_help = (
        f"configuration file (default {DEFAULT_CONFIG_PATH}; drop-ins in its .d directory)"
    )
    control_help = (
        "the agent's control socket "
        "(default $RUNTIME_DIRECTORY/control.sock, else /run/token-resource/control.sock)"
    )

    run = commands.add_parser("run", help="run the agent in the foreground")
    run.add_argument("--config", type=Path, default=DEFAULT_CONFIG_PATH, help=config_help)
    run.add_argument("--control-socket", type=Path, default=None, help=control_help)
    run.add_argument(
        "--role",
        choices=ROLES,
        default=NODE_ROLE,
        help="node (default): serve the kubelet of this node, and prepare the claims of the "
        'cluster pools; publisher: publish the cluster pools (scope = "cluster"), one '
        "writer elected among every publisher, with no kubelet",
    )

    check = commands.add_parser(
        "check", help="validate the configuration and show what would be served"
    )
    check.add_argument("--config", type=Path, default=DEFAULT_CONFIG_PATH, help=config_help)
    check.add_argument(
        "--probe",
        action="store_true",
        help="also run each resource's probe once and show what it would report",
    )

    for name, text in (
        ("reload", "make the running agent apply its files, and wait for the outcome"),
        ("status", "show what the running agent serves"),
        (
            "handover",
            "make the running agent start the installed code as its successor, which takes "
            "over without a gap (a package upgrade); wait until it serves",
        ),
    ):
        command = commands.add_parser(name, help=text)
        command.add_argument("--control-socket", type=Path, default=None, help=control_help)
        command.add_argument(
            "--timeout", type=float, default=running.RELOAD_TIMEOUT, help="seconds to wait"
        )
        if name == "reload":
            command.add_argument(
                "--else-handover",
                action="store_true",
                help="when the agent refuses the file for a setting it reads only at start, "
                "have it hand over to a new agent that reads it (no gap)",
            )
        if name == "handover":
            command.add_argument(
                "--else-restart",
                action="store_true",
                help=f"restart {running.UNIT} instead when the running agent is older than the "
                "handover (the package's scripts)",
            )
        if name == "status":
            shown = command.add_mutually_exclusive_group()
            shown.add_argument(
                "--json", action="store_true", help="the same as JSON, for scripts and Ansible"
            )
            shown.add_argument(
                "--prepared-claims",
                action="store_true",
                help="only the DRA claims prepared on this node, one a line with its pods "
                "(nothing when there are none)",
            )

    classes = commands.add_parser(
        "device-classes",
        help="print the DeviceClass of each DRA resource, for kubectl apply -f -",
    )
    classes.add_argument("--config", type=Path, default=DEFAULT_CONFIG_PATH, help=config_help)

    node = commands.add_parser(
        "node-status",
        help="show, set or remove a Node's extended resources on the API server, by hand",
        description="Uses the [kubernetes] settings of the configuration file (the kubelet's "
        "kubeconfig by default). Resources the running agent advertises by node status are put "
        "back by it at its next sync.",
    )
    node.add_argument("--config", type=Path, default=DEFAULT_CONFIG_PATH, help=config_help)
    node.add_argument("--kubeconfig", type=Path, help="use this kubeconfig instead")
    node.add_argument("--node", help="the Node (default: the configured one, else the host name)")
    actions = node.add_subparsers(dest="action", required=True, metavar="ACTION")
    actions.add_parser("show", help="the Node's extended resources: capacity and allocatable")
    set_ = actions.add_parser("set", help="add or change extended resources")
    set_.add_argument("assignments", nargs="+", metavar="NAME=COUNT", type=node_status.assignment)
    remove = actions.add_parser("remove", help="remove extended resources")
    remove.add_argument("names", nargs="+", metavar="NAME", type=node_status.resource_name)
    return parser
