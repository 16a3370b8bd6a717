"""`token-resource reload` and `status`: questions to the running agent over its control socket."""

from __future__ import annotations

import argparse
import json

from token_resource.cli.common import EXIT_FAILED, EXIT_OK
from token_resource.host import logs
from token_resource.host.control import ControlError, default_control_socket, request
from token_resource.observe.report import render_prepared_claims, render_text

RELOAD_TIMEOUT = 90.0


def reload(args: argparse.Namespace) -> int:
    answer = _ask(args, "reload")
    if answer is None:
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


def _ask(args: argparse.Namespace, command: str) -> str | None:
    """The agent's answer to ``command``; None, with the reason on stderr, without one."""
    try:
        return request(args.control_socket or default_control_socket(), command, args.timeout)
    except ControlError as error:
        logs.print_error(f"token-resource {command}: {error}")
        return None
