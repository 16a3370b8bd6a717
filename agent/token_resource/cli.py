"""The ``token-resource`` command: run, check, reload, status.

Only the standard library (and tomli before Python 3.11) is imported up front, so that
``--version``, ``--help``, ``check``, ``reload`` and ``status`` work whatever else is missing;
``run`` imports the runtime libraries when it starts, and names the package to install for
one that cannot be imported.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import NoReturn

from token_resource import __version__, logs
from token_resource.config import (
    DEFAULT_CONFIG_PATH,
    DEFAULT_POD_RESOURCES_SOCKET,
    DEVICE_PLUGIN,
    MAX_COUNT,
    Config,
    ConfigError,
    KubernetesSettings,
    ResourceSpec,
    format_listen,
    load_config,
    resource_name_problem,
    validate_config,
)
from token_resource.control import ControlError, default_control_socket, request
from token_resource.kube import (
    OWNED_ANNOTATION,
    SERVICE_ACCOUNT_DIR,
    KubeError,
    NodeClient,
    Ownership,
    capacity_path,
    load_credentials,
    node_name,
)
from token_resource.report import render_text
from token_resource.sockets import SocketPathError, socket_name

EXIT_OK = 0
EXIT_FAILED = 1  # invalid configuration, rejected reload, agent unreachable, directory taken
EXIT_USAGE = 2
RELOAD_TIMEOUT = 90.0

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


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logs.configure(verbose=args.verbose)
    handlers = {
        "run": _run,
        "check": _check,
        "reload": _reload,
        "status": _status,
        "node-status": _node_status,
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
        if name == "status":
            command.add_argument(
                "--json", action="store_true", help="the same as JSON, for scripts and Ansible"
            )

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
    set_.add_argument("assignments", nargs="+", metavar="NAME=COUNT", type=_assignment)
    remove = actions.add_parser("remove", help="remove extended resources")
    remove.add_argument("names", nargs="+", metavar="NAME", type=_resource_name)
    return parser


def _resource_name(text: str) -> str:
    problem = resource_name_problem(text)
    if problem is not None:
        raise argparse.ArgumentTypeError(f"{text}: {problem}")
    return text


def _assignment(text: str) -> tuple[str, int]:
    name, equals, count = text.rpartition("=")
    if not equals or not count.isdigit() or int(count) > MAX_COUNT:
        raise argparse.ArgumentTypeError(f"{text}: expected NAME=COUNT, COUNT 0 to {MAX_COUNT}")
    return _resource_name(name), int(count)


def _load(path: Path) -> Config:
    """The validated configuration, including that every socket path fits; or ConfigError."""
    config = load_config(path)
    errors = _socket_errors(config, path)
    if errors:
        raise errors[0]
    return config


def _socket_errors(config: Config, path: Path) -> list[ConfigError]:
    """A device-plugin resource whose socket path would be too long, each."""
    errors = []
    for name in config.advertised_by(DEVICE_PLUGIN).resources:
        try:
            socket_name(name, config.agent.device_plugin_dir)
        except SocketPathError as error:
            errors.append(ConfigError(str(error), file=path, key="agent.device_plugin_dir"))
    return errors


def _complain(error: ConfigError) -> int:
    logs.print_error(f"token-resource: invalid configuration: {error}")
    return EXIT_FAILED


def _missing_libraries() -> str | None:
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


def _run(args: argparse.Namespace) -> int:
    problem = _missing_libraries()
    if problem is not None:
        logs.print_error(problem)
        return EXIT_FAILED
    from token_resource.agent import Agent, StartError  # noqa: PLC0415 (needs the libraries)
    from token_resource.lock import LockError  # noqa: PLC0415
    from token_resource.notify import SystemdNotifier  # noqa: PLC0415

    try:
        config = _load(args.config)
    except ConfigError as error:
        return _complain(error)
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

    notifier = SystemdNotifier()

    async def serve() -> None:
        await Agent(config, args.config, control_socket, notifier).run()

    try:
        asyncio.run(serve())
    except (LockError, ControlError, StartError) as error:
        logs.print_error(f"token-resource: {error}")
        return EXIT_FAILED
    finally:
        notifier.close()
    return EXIT_OK


def _check(args: argparse.Namespace) -> int:
    validation = validate_config(args.config)
    config = validation.config
    errors = list(validation.errors) if config is None else _socket_errors(config, args.config)
    if config is None or errors:
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        # As systemd's ExecStartPre, leave the reason where `systemctl status` shows it.
        _notify_status(f"invalid configuration: {errors[0]}{more}")
        for error in errors:
            logs.print_error(f"token-resource: invalid configuration: {error}")
        return EXIT_FAILED
    files = ", ".join(str(path) for path in config.files)
    print(f"{args.config}: valid ({files})")
    print(f"device-plugin directory: {config.agent.device_plugin_dir}")
    if config.uses_api_server:
        print(f"node status: {_api_access(config.kubernetes)}")
    if config.agent.pod_resources_socket != DEFAULT_POD_RESOURCES_SOCKET:
        print(f"PodResources socket (who holds the tokens): {config.agent.pod_resources_socket}")
    metrics = config.metrics
    if metrics.enabled:
        outputs = [
            *([f"textfile {metrics.textfile}"] if metrics.textfile is not None else []),
            *([f"http://{format_listen(metrics.listen)}/metrics"] if metrics.listen else []),
        ]
        print(f"metrics: {', '.join(outputs)}")
    if not config.resources:
        print("no resources configured")
    for spec in config.resources.values():
        print(f"  {spec.name}: {_becomes(spec, config)}")
        keys = (
            ("count", "env", "advertise")
            if spec.advertise == DEVICE_PLUGIN
            else ("count", "advertise")
        )
        for key in keys:
            origin = spec.origin(key)
            shown = json.dumps(getattr(spec, key))  # TOML spelling, for an int or a string
            print(f"    {key} = {shown}  ({origin if origin is not None else 'default'})")
    for name, path in config.removed.items():
        print(f"  {name}: removed by {path}")
    return EXIT_OK


def _becomes(spec: ResourceSpec, config: Config) -> str:
    """What the resource really is, for the node: a device plugin or a Node status entry."""
    if spec.advertise == DEVICE_PLUGIN:
        endpoint = socket_name(spec.name, config.agent.device_plugin_dir)
        return f"device plugin: {spec.count} token(s) on socket {endpoint}, IDs in ${spec.env}"
    node = node_name(config.kubernetes)
    return f"node status: capacity {spec.count} on Node {node} (no socket, no environment variable)"


def _api_access(settings: KubernetesSettings) -> str:
    """Which Node the agent writes, with which credentials, and whether it can read them."""
    node = node_name(settings)
    named = "from node_name" if settings.node_name else "the host name"
    if settings.in_cluster:
        credentials, path = "in-cluster service account token", SERVICE_ACCOUNT_DIR / "token"
    else:
        credentials, path = "kubeconfig", settings.kubeconfig
    try:
        with path.open("rb"):
            readable = "readable"
    except OSError as error:
        # Not a configuration error: the agent retries until it can read them.
        readable = f"not readable: {error.strerror or error}; the agent retries until it is"
    return f"Node {node} ({named}), {credentials} {path} ({readable})"


def _notify_status(status: str) -> None:
    """Send STATUS= to systemd; without the sdnotify library, `check` goes on without it."""
    try:
        from token_resource.notify import SystemdNotifier  # noqa: PLC0415 (optional here)
    except ImportError:
        return
    notifier = SystemdNotifier()
    notifier.status(status)
    notifier.close()


def _reload(args: argparse.Namespace) -> int:
    answer = _ask(args, "reload")
    if answer is None:
        return EXIT_FAILED
    print(answer)
    return EXIT_OK


def _status(args: argparse.Namespace) -> int:
    answer = _ask(args, "status")
    if answer is None:
        return EXIT_FAILED
    try:
        report = json.loads(answer)
    except ValueError:
        # An agent from before status reports (a package upgrade not yet restarted it).
        print(answer)
        return EXIT_OK
    print(json.dumps(report, indent=2) if args.json else render_text(report))
    return EXIT_OK


def _node_status(args: argparse.Namespace) -> int:
    try:
        settings = _kubernetes_settings(args)
    except ConfigError as error:
        return _complain(error)
    node = args.node or node_name(settings)
    if args.action == "set":
        operations = [
            {"op": "add", "path": capacity_path(name), "value": str(count)}
            for name, count in args.assignments
        ]
    elif args.action == "remove":
        operations = [{"op": "remove", "path": capacity_path(name)} for name in args.names]
    else:
        operations = []
    try:
        client = NodeClient(load_credentials(settings))
        if operations:
            client.patch_node_status(node, operations)
        current = client.get_node(node)
        ownership = Ownership.of(current)
        if args.action == "remove" and ownership.names & set(args.names):
            # After the capacity, as the agent does: a name is never unlisted while it counts.
            current = client.list_as_owned(node, ownership, ownership.names - set(args.names))
            ownership = Ownership.of(current)
    except KubeError as error:
        logs.print_error(f"token-resource node-status: node {node}: {error}")
        return EXIT_FAILED
    status = current.get("status", {})
    capacity, allocatable = status.get("capacity", {}), status.get("allocatable", {})
    listed = {**capacity, **allocatable, **dict.fromkeys(ownership.names)}
    extended = sorted(name for name in listed if _is_extended(name))
    print(f"node {node}: {len(extended)} extended resource(s)")
    for name in extended:
        counts = f"capacity {capacity.get(name, '-')}, allocatable {allocatable.get(name, '-')}"
        owner = f", the agent's ({OWNED_ANNOTATION})" if name in ownership.names else ""
        print(f"  {name}: {counts}{owner}")
    return EXIT_OK


def _kubernetes_settings(args: argparse.Namespace) -> KubernetesSettings:
    """The configuration file's [kubernetes] table (defaults without a file); --kubeconfig wins."""
    settings = load_config(args.config).kubernetes if args.config.exists() else KubernetesSettings()
    if args.kubeconfig is not None:
        settings = replace(settings, kubeconfig=args.kubeconfig.absolute(), in_cluster=False)
    return settings


def _is_extended(name: str) -> bool:
    return resource_name_problem(name) is None


def _ask(args: argparse.Namespace, command: str) -> str | None:
    """The agent's answer to ``command``; None, with the reason on stderr, without one."""
    try:
        return request(args.control_socket or default_control_socket(), command, args.timeout)
    except ControlError as error:
        logs.print_error(f"token-resource {command}: {error}")
        return None
