"""`token-resource check`: every error in the files, or what each resource becomes."""

from __future__ import annotations

import argparse
import asyncio
import json

from token_resource.apiserver.connection.credentials import SERVICE_ACCOUNT_DIR, node_name
from token_resource.apiserver.objects.slices import cluster_pool_name, pool_name
from token_resource.cli.common import EXIT_FAILED, EXIT_OK, socket_errors
from token_resource.config.diff import describe_nodes, describe_probe
from token_resource.config.load import validate_config
from token_resource.config.model import (
    DEFAULT_POD_RESOURCES_SOCKET,
    DEVICE_PLUGIN,
    DRA,
    MODES_WITH_ENV,
    Config,
    KubernetesSettings,
    ProbeSpec,
    ResourceSpec,
    format_listen,
)
from token_resource.config.names import token_id
from token_resource.health.probes import check as run_check
from token_resource.host import logs
from token_resource.kubelet.sockets import SocketLayout


def check(args: argparse.Namespace) -> int:
    validation = validate_config(args.config)
    config = validation.config
    errors = list(validation.errors) if config is None else socket_errors(config, args.config)
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
        print(f"API server: {_api_access(config.kubernetes)}")
    if config.advertised_by(DRA).resources:
        dra = config.dra
        print(
            f"DRA driver {dra.driver}: registration socket in {dra.plugins_registry_dir}, "
            f"service socket in {dra.driver_dir}, CDI specs in {dra.cdi_dir}"
        )
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
        for key in _shown_keys(spec):
            origin = spec.origin(key)
            shown = _toml(spec, key)
            print(f"    {key} = {shown}  ({origin if origin is not None else 'default'})")
        if spec.probe is not None:
            print(f"    probe: {_probe(spec.probe)}  ({spec.origin('probe')})")
            if args.probe:
                print(f"    {_run_once(spec)}")
    for name, path in config.removed.items():
        print(f"  {name}: removed by {path}")
    return EXIT_OK


def _shown_keys(spec: ResourceSpec) -> tuple[str, ...]:
    """The keys that mean something for this resource: env only where a container reads it,
    scope (and nodes) only for a cluster pool."""
    keys = (
        ["count", "env", "advertise"]
        if spec.advertise in MODES_WITH_ENV
        else ["count", "advertise"]
    )
    if spec.cluster_scoped:
        keys += ["scope", "nodes"] if spec.nodes is not None else ["scope"]
    return tuple(keys)


def _toml(spec: ResourceSpec, key: str) -> str:
    """A resource's setting as the file spells it."""
    if key == "nodes":
        return describe_nodes(spec.nodes)
    return json.dumps(getattr(spec, key))  # TOML spelling, for an int or a string


def _probe(probe: ProbeSpec) -> str:
    thresholds = (
        f"unhealthy after {probe.failure_threshold} failed check(s), healthy again after "
        f"{probe.success_threshold}"
    )
    taint = f", taint {probe.taint_effect}" if probe.taint_effect else ""
    tool = f", with {probe.tool}" if probe.tool else ""
    return f"{describe_probe(probe)}{tool}, timeout {probe.timeout:g} s, {thresholds}{taint}"


def _run_once(spec: ResourceSpec) -> str:
    """One check, as the agent would run it (with this command's privileges, not the unit's)."""
    assert spec.probe is not None
    outcome = asyncio.run(run_check(spec.probe, spec.count))
    result = "passed" if outcome.ok else "failed"
    line = (
        f"checked once: {result} in {outcome.seconds:.3f} s: {outcome.message}; "
        f"{sum(outcome.passed)} of {spec.count} token(s) healthy"
    )
    failing = [token_id(index) for index, passed in enumerate(outcome.passed) if not passed]
    if failing and not outcome.ok and len(failing) < spec.count:
        line += f" (unhealthy: {', '.join(failing[:5])}{' ...' if len(failing) > 5 else ''})"
    return line


def _becomes(spec: ResourceSpec, config: Config) -> str:
    """What the resource really is, for the node: a device plugin, a DRA pool or a Node status
    entry."""
    if spec.advertise == DEVICE_PLUGIN:
        endpoint = SocketLayout(config.agent.device_plugin_dir).endpoint(spec.name)
        return f"device plugin: {spec.count} token(s) on socket {endpoint}, IDs in ${spec.env}"
    if spec.cluster_scoped:
        nodes = "every node" if spec.nodes is None else f"the nodes {describe_nodes(spec.nodes)}"
        return (
            f"DRA, cluster-wide: {spec.count} token(s) for {nodes} as the devices of pool "
            f"{cluster_pool_name(spec.name)} (driver {config.dra.driver}), published by the "
            f"elected publisher; this node prepares their claims, IDs in ${spec.env} through CDI"
        )
    node = node_name(config.kubernetes)
    if spec.advertise == DRA:
        pool = pool_name(node, spec.name)
        return (
            f"DRA: {spec.count} token(s) as the devices of pool {pool} (driver "
            f"{config.dra.driver}), IDs in ${spec.env} through CDI"
        )
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
        from token_resource.host.notify import SystemdNotifier  # noqa: PLC0415 (optional here)
    except ImportError:
        return
    notifier = SystemdNotifier()
    notifier.status(status)
    notifier.close()
