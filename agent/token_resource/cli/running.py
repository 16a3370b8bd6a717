"""`token-resource reload`, `status` and `handover`: questions to the running agent over its
control socket."""

from __future__ import annotations

import argparse
import json
import subprocess
import time

from token_resource.cli.common import EXIT_FAILED, EXIT_OK, EXIT_UNSUPPORTED
from token_resource.config.load import NEEDS_A_NEW_AGENT
from token_resource.host import logs
from token_resource.host.control import ControlError, default_control_socket, request
from token_resource.observe.report import render_prepared_claims, render_text

RELOAD_TIMEOUT = 90.0
# What --else-restart restarts: the host package's unit.
UNIT = "token-resource.service"


def reload(args: argparse.Namespace) -> int:
    try:
        answer = request(args.control_socket or default_control_socket(), "reload", args.timeout)
    except ControlError as error:
        if args.else_handover and NEEDS_A_NEW_AGENT in str(error):
            print(f"token-resource reload: {error}: handing over", flush=True)
            return handover(args)
        logs.print_error(f"token-resource reload: {error}")
        return EXIT_FAILED
    print(answer)
    return EXIT_OK


def status(args: argparse.Namespace) -> int:
    answer = _ask(args, "status")
    if answer is None:
        return EXIT_FAILED
    try:
        report = json.loads(answer)
    except ValueError:
        # An agent from before status reports (a package upgrade not yet restarted it), which
        # had no DRA driver and so no prepared claims.
        if not args.prepared_claims:
            print(answer)
        return EXIT_OK
    if args.prepared_claims:
        claims = render_prepared_claims(report)
        if claims:
            print(claims)
    else:
        print(json.dumps(report, indent=2) if args.json else render_text(report))
    return EXIT_OK


def handover(args: argparse.Namespace) -> int:
    """Ask for a handover; return once the successor answers on the control socket."""
    path = args.control_socket or default_control_socket()
    try:
        pid = int(request(path, "handover", args.timeout))
    except ControlError as error:
        if "unknown command" in str(error):
            if getattr(args, "else_restart", False):
                return subprocess.run(["systemctl", "restart", UNIT], check=False).returncode
            logs.print_error(
                "token-resource handover: the running agent is older than the handover: "
                f"restart it (systemctl restart {UNIT})"
            )
            return EXIT_UNSUPPORTED
        logs.print_error(f"token-resource handover: {error}, the running agent goes on serving")
        return EXIT_FAILED
    deadline = time.monotonic() + args.timeout
    while True:
        try:
            agent = json.loads(request(path, "status", args.timeout))["agent"]
            if agent.get("pid") == pid:
                print(f"handed over to pid {pid}: token-resource {agent['version']} serves")
                return EXIT_OK
        except (ControlError, ValueError, KeyError, TypeError):
            pass  # the successor opens the control socket once its predecessor has left
        if time.monotonic() > deadline:
            logs.print_error(
                f"token-resource handover: pid {pid} took over but does not answer on {path} "
                f"within {args.timeout:g} s"
            )
            return EXIT_FAILED
        time.sleep(0.05)


def _ask(args: argparse.Namespace, command: str) -> str | None:
    """The agent's answer to ``command``; None, with the reason on stderr, without one."""
    try:
        return request(args.control_socket or default_control_socket(), command, args.timeout)
    except ControlError as error:
        logs.print_error(f"token-resource {command}: {error}")
        return None
