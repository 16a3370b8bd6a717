"""`token-resource run`: the agent in the foreground, once its libraries are known to import."""

from __future__ import annotations

import argparse
import asyncio
import importlib
import logging

from token_resource import __version__
from token_resource.cli.common import EXIT_FAILED, EXIT_OK, complain, load_servable
from token_resource.config.errors import ConfigError
from token_resource.config.load import load_config
from token_resource.config.model import PUBLISHER_ROLE
from token_resource.host import logs
from token_resource.host.control import ControlError, default_control_socket
from token_resource.host.memory import limit_malloc_arenas

log = logging.getLogger(__name__)

# The libraries `run` needs beyond the standard library: the module, the distribution package
# that provides it (the same name on Debian and on Fedora/RHEL) and its name on PyPI.
RUNTIME_LIBRARIES = {
    "grpc": ("python3-grpcio", "grpcio"),
    "google.protobuf": ("python3-protobuf", "protobuf"),
    "watchdog": ("python3-watchdog", "watchdog"),
    "sdnotify": ("python3-sdnotify", "sdnotify"),
}
# Needed only with [metrics] configured; its package names differ between the distributions.
METRICS_LIBRARY = "prometheus_client"
METRICS_PACKAGES = (
    "python3-prometheus-client (Debian), python3-prometheus_client (Fedora/RHEL; "
    "pip: prometheus-client)"
)


def missing_libraries() -> str | None:
    """None when every runtime library imports; else one line saying what to install."""
    failed: dict[str, ImportError] = {}
    for module in RUNTIME_LIBRARIES:
        try:
            importlib.import_module(module)
        except ImportError as error:
            failed[module] = error
    if not failed:
        try:  # an installed but incompatible version fails here, naming its module
            importlib.import_module("token_resource.agent")
        except ImportError as error:
            name = error.name or ""
            culprit = next((m for m in RUNTIME_LIBRARIES if f"{name}.".startswith(f"{m}.")), None)
            if culprit is None:
                raise
            failed[culprit] = error
    if not failed:
        return None
    modules = ", ".join(f"{m}{_import_reason(m, error)}" for m, error in failed.items())
    packages = " ".join(RUNTIME_LIBRARIES[module][0] for module in failed)
    pypi = " ".join(RUNTIME_LIBRARIES[module][1] for module in failed)
    plural = "s" if len(failed) > 1 else ""
    return (
        f"token-resource: cannot run without the Python module{plural} {modules}: "
        f"install {packages} (Debian, Fedora/RHEL; pip: {pypi})"
    )


def _import_reason(module: str, error: ImportError) -> str:
    """Why an installed module fails to import; nothing for one that is not installed."""
    if isinstance(error, ModuleNotFoundError) and f"{module}.".startswith(f"{error.name}."):
        return ""
    lines = str(error).strip().splitlines()
    return f" ({lines[0]})" if lines else ""


def run(args: argparse.Namespace) -> int:
    # Before gRPC starts its threads, each of which would take an arena of its own.
    limit_malloc_arenas()
    problem = missing_libraries()
    if problem is not None:
        logs.print_error(problem)
        return EXIT_FAILED
    from token_resource.agent import Agent, StartError  # noqa: PLC0415 (needs the libraries)
    from token_resource.host.handover import HandoverError, Predecessor  # noqa: PLC0415
    from token_resource.host.lock import LockError  # noqa: PLC0415
    from token_resource.host.notify import SystemdNotifier  # noqa: PLC0415
    from token_resource.publisher import PublisherAgent  # noqa: PLC0415

    try:
        # A publisher serves no device plugin: its sockets' paths are no concern of its.
        config = (
            load_config(args.config) if args.role == PUBLISHER_ROLE else load_servable(args.config)
        )
    except ConfigError as error:
        return complain(error)
    if config.metrics.enabled:
        try:
            importlib.import_module(METRICS_LIBRARY)
        except ImportError:
            logs.print_error(
                f"token-resource: [metrics] needs the Python module {METRICS_LIBRARY}: "
                f"install {METRICS_PACKAGES}"
            )
            return EXIT_FAILED
    control_socket = args.control_socket or default_control_socket()

    # Started by a running agent to take its place (a package upgrade's handover).
    predecessor = Predecessor.from_environment()
    notifier = SystemdNotifier(muted=predecessor is not None)
    # Which version runs, in the journal of every start: an upgrade's restart says so.
    log.info("token-resource %s starting, role %s", __version__, args.role)

    async def serve() -> None:
        if args.role == PUBLISHER_ROLE:
            await PublisherAgent(config, args.config, control_socket, notifier).run()
        else:
            await Agent(config, args.config, control_socket, notifier, predecessor).run()

    try:
        asyncio.run(serve())
    except (LockError, ControlError, StartError, HandoverError) as error:
        logs.print_error(f"token-resource: {error}")
        return EXIT_FAILED
    finally:
        notifier.close()
    return EXIT_OK
