"""`token-resource device-classes`: the DeviceClass of each configured DRA resource, as YAML for
``kubectl apply -f -``.

The agent cannot create cluster-wide objects with a node's credentials; an administrator
applies these once per cluster (the same for every node configured alike).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping, Sequence
from typing import Any

from token_resource.apiserver.objects.slices import device_class
from token_resource.cli.common import EXIT_FAILED, EXIT_OK, complain
from token_resource.config.errors import ConfigError
from token_resource.config.load import load_config
from token_resource.config.model import DRA
from token_resource.host import logs


def device_classes(args: argparse.Namespace) -> int:
    try:
        config = load_config(args.config)
    except ConfigError as error:
        return complain(error)
    resources = config.advertised_by(DRA).resources
    if not resources:
        logs.print_error(
            f'token-resource device-classes: {args.config} has no advertise = "dra" resource'
        )
        return EXIT_FAILED
    documents = [
        f"# {name}, served by DRA driver {config.dra.driver}\n"
        + to_yaml(device_class(config.dra.driver, name))
        for name in resources
    ]
    print("---\n".join(documents), end="")
    return EXIT_OK


def to_yaml(value: Any, indent: int = 0) -> str:
    """Block-style YAML of JSON-like data; strings are JSON-quoted (valid YAML scalars)."""
    return "".join(f"{line}\n" for line in _lines(value, indent))


def _lines(value: Any, indent: int) -> list[str]:
    pad = " " * indent
    if isinstance(value, Mapping):
        lines = []
        for key, item in value.items():
            if _is_scalar(item):
                lines.append(f"{pad}{key}: {_scalar(item)}")
            else:
                lines.append(f"{pad}{key}:")
                lines += _lines(item, indent + 2)
        return lines
    assert isinstance(value, Sequence), value
    lines = []
    for item in value:
        nested = _lines(item, indent + 2) if not _is_scalar(item) else [f"{pad}  {_scalar(item)}"]
        lines.append(f"{pad}- {nested[0].lstrip()}")
        lines += nested[1:]
    return lines


def _is_scalar(value: Any) -> bool:
    return isinstance(value, (str, int, float, bool)) or value is None


def _scalar(value: Any) -> str:
    return json.dumps(value)
