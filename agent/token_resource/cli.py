"""The ``token-resource`` command: run, check, reload, status."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from token_resource import __version__
from token_resource.agent import Agent
from token_resource.config import DEFAULT_CONFIG_PATH, Config, ConfigError, load_config
from token_resource.control import ControlError, default_control_socket, request
from token_resource.lock import LockError
from token_resource.notify import SystemdNotifier
from token_resource.sockets import SocketPathError, socket_name

EXIT_OK = 0
EXIT_FAILED = 1  # invalid configuration, rejected reload, agent unreachable, directory taken
RELOAD_TIMEOUT = 90.0


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    _configure_logging(args.verbose)
    handlers = {"run": _run, "check": _check, "reload": _reload, "status": _status}
    return handlers[args.command](args)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
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

    check = commands.add_parser(
        "check", help="validate the configuration and show what would be served"
    )
    check.add_argument("--config", type=Path, default=DEFAULT_CONFIG_PATH, help=config_help)

    for name, text in (
        ("reload", "make the running agent apply its files, and wait for the outcome"),
        ("status", "show what the running agent serves"),
    ):
        command = commands.add_parser(name, help=text)
        command.add_argument("--control-socket", type=Path, default=None, help=control_help)
        command.add_argument(
            "--timeout", type=float, default=RELOAD_TIMEOUT, help="seconds to wait"
        )
    return parser


def _configure_logging(verbose: bool) -> None:
    # journald stamps each line itself; elsewhere a time helps.
    stamp = "" if os.environ.get("JOURNAL_STREAM") else "%(asctime)s "
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format=f"{stamp}%(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )


def _load(path: Path) -> Config:
    """The validated configuration, including that every socket path fits; or ConfigError."""
    config = load_config(path)
    for name in config.resources:
        try:
            socket_name(name, config.agent.device_plugin_dir)
        except SocketPathError as error:
            raise ConfigError(str(error), file=path, key="agent.device_plugin_dir") from None
    return config


def _complain(error: ConfigError) -> int:
    print(f"token-resource: invalid configuration: {error}", file=sys.stderr)
    return EXIT_FAILED


def _run(args: argparse.Namespace) -> int:
    try:
        config = _load(args.config)
    except ConfigError as error:
        return _complain(error)
    control_socket = args.control_socket or default_control_socket()

    notifier = SystemdNotifier()

    async def serve() -> None:
        await Agent(config, args.config, control_socket, notifier).run()

    try:
        asyncio.run(serve())
    except (LockError, ControlError) as error:
        print(f"token-resource: {error}", file=sys.stderr)
        return EXIT_FAILED
    finally:
        notifier.close()
    return EXIT_OK


def _check(args: argparse.Namespace) -> int:
    try:
        config = _load(args.config)
    except ConfigError as error:
        # As systemd's ExecStartPre, leave the reason where `systemctl status` shows it.
        notifier = SystemdNotifier()
        notifier.status(f"invalid configuration: {error}")
        notifier.close()
        return _complain(error)
    files = ", ".join(str(path) for path in config.files)
    print(f"{args.config}: valid ({files})")
    print(f"device-plugin directory: {config.agent.device_plugin_dir}")
    if not config.resources:
        print("no resources configured")
    for spec in config.resources.values():
        endpoint = socket_name(spec.name, config.agent.device_plugin_dir)
        print(f"  {spec.name}: {spec.count} token(s) in ${spec.env}, socket {endpoint}")
    return EXIT_OK


def _reload(args: argparse.Namespace) -> int:
    return _ask(args, "reload")


def _status(args: argparse.Namespace) -> int:
    return _ask(args, "status")


def _ask(args: argparse.Namespace, command: str) -> int:
    try:
        answer = request(args.control_socket or default_control_socket(), command, args.timeout)
    except ControlError as error:
        print(f"token-resource {command}: {error}", file=sys.stderr)
        return EXIT_FAILED
    print(answer)
    return EXIT_OK
