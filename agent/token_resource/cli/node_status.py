"""`token-resource node-status`: a Node's extended resources on the API server, by hand."""

from __future__ import annotations

import argparse
from dataclasses import replace

from token_resource.apiserver.connection.client import KubeError
from token_resource.apiserver.connection.credentials import load_credentials, node_name
from token_resource.apiserver.objects.node import (
    OWNED_ANNOTATION,
    NodeClient,
    Ownership,
    capacity_path,
)
from token_resource.cli.common import EXIT_FAILED, EXIT_OK, complain
from token_resource.config.errors import ConfigError
from token_resource.config.load import load_config
from token_resource.config.model import MAX_COUNT, KubernetesSettings
from token_resource.config.names import resource_name_problem
from token_resource.host import logs


def resource_name(text: str) -> str:
    problem = resource_name_problem(text)
    if problem is not None:
        raise argparse.ArgumentTypeError(f"{text}: {problem}")
    return text


def assignment(text: str) -> tuple[str, int]:
    name, equals, count = text.rpartition("=")
    if not equals or not count.isdigit() or int(count) > MAX_COUNT:
        raise argparse.ArgumentTypeError(f"{text}: expected NAME=COUNT, COUNT 0 to {MAX_COUNT}")
    return resource_name(name), int(count)


def node_status(args: argparse.Namespace) -> int:
    try:
        settings = _kubernetes_settings(args)
    except ConfigError as error:
        return complain(error)
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
        with NodeClient(load_credentials(settings)) as client:
            if operations:
                client.patch_node_status(node, operations)
            current = client.get_node(node)
            ownership = Ownership.of(current)
            if args.action == "remove" and ownership.names & set(args.names):
                # After the capacity, as the agent does: a name is never unlisted while it
                # counts.
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
