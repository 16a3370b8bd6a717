"""A resource's ``probe`` table: one kind of check, with the settings Kubernetes probes have.

    [resources."example.com/license".probe]
    command = ["/usr/local/bin/free-seats"]   # or tcp = "host:port", http = "URL", path = "...",
                                              # flexlm = "27000@licsrv" with feature = "NAME",
                                              # rlm = "5053@licsrv" with product = "NAME"
    interval = 10            # seconds between checks
    timeout = 1              # seconds a check may take
    failure_threshold = 3    # failed checks in a row that make the tokens unhealthy
    success_threshold = 1    # good checks in a row that make them healthy again
    taint_effect = "NoSchedule"   # DRA only: or "NoExecute", which evicts their pods

The license kinds count a license server's free seats through the vendor's tool: ``lmutil``
(``lmutil = "/opt/flexlm/bin/lmutil"``; default, the one on PATH) or ``rlmutil`` likewise.
Their server is what that tool's ``-c`` takes: ``port@host`` (``@host`` for FlexNet's default
ports), several joined by ":" as FlexNet and RLM allow on Linux (a FlexNet redundant triad is
``port@h1,port@h2,port@h3``), or the absolute path of a license file. Their timeout defaults
to DEFAULT_LICENSE_TIMEOUT.

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
    DEFAULT_LICENSE_TIMEOUT,
    FLEXLM,
    HTTP,
    INDEX_PLACEHOLDER,
    NO_EXECUTE,
    NO_SCHEDULE,
    PATH,
    PROBE_KINDS,
    RLM,
    TCP,
    ProbeSpec,
)

# Each license kind's keys: what it counts, and the vendor's tool (by default on PATH).
LICENSE_KEYS = {FLEXLM: ("feature", "lmutil"), RLM: ("product", "rlmutil")}
PROBE_KEYS = frozenset(
    {
        *PROBE_KINDS,
        *(key for keys in LICENSE_KEYS.values() for key in keys),
        "interval",
        "timeout",
        "failure_threshold",
        "success_threshold",
        "taint_effect",
    }
)
MIN_INTERVAL, MAX_INTERVAL = 1.0, 86400.0
MAX_TIMEOUT = 3600.0
MAX_THRESHOLD = 100
_MAX_PORT = 65535
_HOST = re.compile(r"\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?")
# A FlexNet feature or RLM product name: no spaces, colons or parentheses, which lmstat's and
# rlmstat's lines use around it.
_LICENSED_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]{0,63}")


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
    if not kinds:
        _license_settings(value, None, key_path)
    if len(kinds) != 1:
        raise Invalid(
            key_path,
            f"a probe needs exactly one of {', '.join(PROBE_KINDS[:-1])} or {PROBE_KINDS[-1]}"
            + (f", got {' and '.join(kinds)}" if kinds else ""),
        )
    kind = kinds[0]
    settings: dict[str, Any] = {
        "kind": kind,
        "target": _TARGETS[kind](value[kind], (*key_path, kind)),
    }
    settings.update(_license_settings(value, kind, key_path))
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


def _license_server(value: object, key_path: tuple[str, ...]) -> str:
    kind = key_path[-1]
    flexnet = ' or "@HOST" (its default ports)' if kind == FLEXLM else ""
    triad = ' (a redundant triad: "PORT@H1,PORT@H2,PORT@H3")' if kind == FLEXLM else ""
    problem = (
        f'{kind} must be the license server as "PORT@HOST" (port 1 to {_MAX_PORT}){flexnet}, '
        f'several joined by ":"{triad}, or the absolute path of a license file, '
        f"got {describe_value(value)}"
    )
    if not isinstance(value, str):
        raise Invalid(key_path, problem)
    if value.startswith("/"):
        if "\0" in value or ":" in value:
            raise Invalid(key_path, problem)
        return value
    for server in (part for listed in value.split(":") for part in listed.split(",")):
        port, at, host = server.partition("@")
        # FlexNet's "@host" asks its default ports; RLM has one, so it needs its port.
        default_port = not port and kind == FLEXLM
        known_port = port.isdigit() and 1 <= int(port) <= _MAX_PORT
        if not at or not _HOST.fullmatch(host) or not (default_port or known_port):
            raise Invalid(key_path, problem)
    if "," in value and kind != FLEXLM:
        raise Invalid(key_path, problem)
    return value


def _license_settings(
    value: Mapping[str, Any], kind: str | None, key_path: tuple[str, ...]
) -> dict[str, Any]:
    """A license kind's counted name, tool and timeout; their keys refused on any other kind
    (``kind`` None: a table of no kind)."""
    for owner, keys in LICENSE_KEYS.items():
        for key in (key for key in keys if key in value and owner != kind):
            raise Invalid(
                (*key_path, key),
                f'{key} belongs to a {owner} probe, which needs {owner} = "PORT@HOST"'
                + ("" if kind is None else f" (this probe is {kind})"),
            )
    if kind not in LICENSE_KEYS:
        return {}
    name_key, tool_key = LICENSE_KEYS[kind]
    if name_key not in value:
        raise Invalid(
            (*key_path, kind),
            f'a {kind} probe needs {name_key} = "NAME": the {name_key} whose free seats it counts',
        )
    name = value[name_key]
    if not isinstance(name, str) or not _LICENSED_NAME.fullmatch(name):
        raise Invalid(
            (*key_path, name_key),
            f'{name_key} must be a name of letters, digits, "_", "-", "." and "+" (at most 64, '
            f"as the license file spells it), got {describe_value(name)}",
        )
    tool = value.get(tool_key, tool_key)
    if (
        not isinstance(tool, str)
        or not tool
        or "\0" in tool
        or ("/" in tool and not tool.startswith("/"))
    ):
        raise Invalid(
            (*key_path, tool_key),
            f"{tool_key} must be an absolute path or a program name found on PATH, "
            f"got {describe_value(tool)}",
        )
    return {"feature": name, "tool": tool, "timeout": DEFAULT_LICENSE_TIMEOUT}


_TARGETS = {
    COMMAND: _command,
    TCP: _tcp,
    HTTP: _http,
    PATH: _path,
    FLEXLM: _license_server,
    RLM: _license_server,
}


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
