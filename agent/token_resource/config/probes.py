"""A resource's ``probe`` table: one kind of check, with the settings Kubernetes probes have.

    [resources."example.com/license".probe]
    command = ["/usr/local/bin/free-seats"]   # or tcp = "host:port", http = "URL", path = "..."
    interval = 10            # seconds between checks
    timeout = 1              # seconds a check may take
    failure_threshold = 3    # failed checks in a row that make the tokens unhealthy
    success_threshold = 1    # good checks in a row that make them healthy again
    taint_effect = "NoSchedule"   # DRA only: or "NoExecute", which evicts their pods

The table is one setting: a drop-in that sets a probe replaces the whole probe.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from token_resource.config.errors import Invalid, describe_value, quote
from token_resource.config.model import (
    COMMAND,
    HTTP,
    INDEX_PLACEHOLDER,
    NO_EXECUTE,
    NO_SCHEDULE,
    PATH,
    PROBE_KINDS,
    TCP,
    ProbeSpec,
)

PROBE_KEYS = frozenset(
    {*PROBE_KINDS, "interval", "timeout", "failure_threshold", "success_threshold", "taint_effect"}
)
MIN_INTERVAL, MAX_INTERVAL = 1.0, 86400.0
MAX_TIMEOUT = 3600.0
MAX_THRESHOLD = 100
_MAX_PORT = 65535
_HOST = re.compile(r"\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?")


def parse_probe(value: object, key_path: tuple[str, ...]) -> ProbeSpec:
    if not isinstance(value, dict):
        raise Invalid(key_path, f"probe must be a table, got {describe_value(value)}")
    unknown = sorted(set(value) - PROBE_KEYS)
    if unknown:
        raise Invalid(
            (*key_path, unknown[0]),
            f"unknown key {quote(unknown[0])}; allowed: {', '.join(sorted(PROBE_KEYS))}",
        )
    kinds = [kind for kind in PROBE_KINDS if kind in value]
    if len(kinds) != 1:
        raise Invalid(
            key_path,
            "a probe needs exactly one of command, tcp, http or path"
            + (f", got {' and '.join(kinds)}" if kinds else ""),
        )
    kind = kinds[0]
    settings: dict[str, Any] = {
        "kind": kind,
        "target": _TARGETS[kind](value[kind], (*key_path, kind)),
    }
    if "interval" in value:
        settings["interval"] = parse_seconds(
            value, "interval", MIN_INTERVAL, MAX_INTERVAL, key_path
        )
    if "timeout" in value:
        settings["timeout"] = parse_seconds(value, "timeout", 0.0, MAX_TIMEOUT, key_path)
    for key in ("failure_threshold", "success_threshold"):
        if key in value:
            settings[key] = _threshold(value[key], (*key_path, key))
    if "taint_effect" in value:
        if value["taint_effect"] not in (NO_SCHEDULE, NO_EXECUTE):
            raise Invalid(
                (*key_path, "taint_effect"),
                f'taint_effect must be "{NO_SCHEDULE}" or "{NO_EXECUTE}", '
                f"got {describe_value(value['taint_effect'])}",
            )
        settings["taint_effect"] = value["taint_effect"]
    return ProbeSpec(**settings)


def _command(value: object, key_path: tuple[str, ...]) -> tuple[str, ...]:
    if (
        not isinstance(value, list)
        or not value
        or not all(isinstance(word, str) and word and "\0" not in word for word in value)
    ):
        raise Invalid(
            key_path,
            'command must be a non-empty array of strings (the argv, e.g. ["/usr/bin/lmstat", '
            f'"-a"]), got {describe_value(value)}',
        )
    return tuple(value)


def _tcp(value: object, key_path: tuple[str, ...]) -> str:
    problem = f'tcp must be "HOST:PORT" (port 1 to {_MAX_PORT}), got {describe_value(value)}'
    if not isinstance(value, str):
        raise Invalid(key_path, problem)
    host, colon, port = value.rpartition(":")
    if not colon or not _HOST.fullmatch(host) or not port.isdigit():
        raise Invalid(key_path, problem)
    if not 1 <= int(port) <= _MAX_PORT:
        raise Invalid(key_path, problem)
    return value


def _http(value: object, key_path: tuple[str, ...]) -> str:
    problem = f"http must be an http:// or https:// URL, got {describe_value(value)}"
    if not isinstance(value, str) or any(c.isspace() for c in value):
        raise Invalid(key_path, problem)
    try:
        url = urlsplit(value)
        port = url.port
    except ValueError:
        raise Invalid(key_path, problem) from None
    if url.scheme not in ("http", "https") or not url.hostname or port == 0:
        raise Invalid(key_path, problem)
    return value


def _path(value: object, key_path: tuple[str, ...]) -> str:
    if not isinstance(value, str) or not value.startswith("/") or "\0" in value:
        raise Invalid(key_path, f"path must be an absolute path, got {describe_value(value)}")
    if "{" in value.replace(INDEX_PLACEHOLDER, "") or "}" in value.replace(INDEX_PLACEHOLDER, ""):
        raise Invalid(
            key_path,
            f"path may hold {INDEX_PLACEHOLDER} (the token's index) and no other braces, "
            f"got {describe_value(value)}",
        )
    return value


_TARGETS = {COMMAND: _command, TCP: _tcp, HTTP: _http, PATH: _path}


def parse_seconds(
    table: Mapping[str, Any], key: str, low: float, high: float, key_path: tuple[str, ...]
) -> float:
    """A number of seconds from ``low`` (or, for 0, just above it) to ``high``."""
    value = table[key]
    number = not isinstance(value, bool) and isinstance(value, (int, float))
    if not number or not (low <= value <= high if low > 0 else 0 < value <= high):
        lowest = f"from {low:g}" if low > 0 else "above 0"
        raise Invalid(
            (*key_path, key),
            f"{key} must be a number of seconds {lowest} to {high:g}, got {describe_value(value)}",
        )
    return float(value)


def _threshold(value: object, key_path: tuple[str, ...]) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_THRESHOLD:
        raise Invalid(
            key_path,
            f"{key_path[-1]} must be an integer from 1 to {MAX_THRESHOLD}, "
            f"got {describe_value(value)}",
        )
    return value
