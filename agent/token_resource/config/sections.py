"""One file's settings: each section and resource parsed and checked on its own.

The rules for one value live here (an absolute path, a count, an env name, a listen address);
what only the files together can get wrong is checked where they are merged (``load``).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from token_resource._compat import tomllib
from token_resource.config import cluster
from token_resource.config.errors import ConfigError, Invalid, describe_value, located, quote
from token_resource.config.model import (
    ADVERTISE_MODES,
    DEVICE_PLUGIN,
    DRA,
    MAX_COUNT,
    MAX_RESYNC_SECONDS,
    MIN_RESYNC_SECONDS,
    NODE_STATUS,
)
from token_resource.config.names import DNS_SUBDOMAIN, resource_name_problem
from token_resource.config.probes import parse_probe

# Allowed keys per section: a new setting starts here.
TOP_LEVEL_KEYS = frozenset({"agent", "resources", "kubernetes", "metrics", "dra"})
AGENT_KEYS = frozenset({"device_plugin_dir", "pod_resources_socket"})
RESOURCE_KEYS = frozenset({"count", "env", "advertise", "probe", *cluster.RESOURCE_KEYS})
# In a resource's table, alone: takes away what earlier files defined.
REMOVE_KEY = "remove"
KUBERNETES_KEYS = frozenset(
    {"kubeconfig", "in_cluster", "node_name", "resync_seconds", *cluster.KUBERNETES_KEYS}
)
METRICS_KEYS = frozenset({"textfile", "listen"})
DRA_KEYS = frozenset({"driver", "plugins_registry_dir", "plugins_dir", "cdi_dir"})
# A ResourceSlice's spec.driver: a DNS subdomain of at most 63 characters.
_MAX_DRIVER_LENGTH = 63
# node_exporter's textfile collector reads only files with this suffix.
TEXTFILE_SUFFIX = ".prom"
_MAX_PORT = 65535

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_DECODE_POSITION = re.compile(r"(?P<reason>.*) \(at line (?P<line>\d+), column \d+\)")


@dataclass(frozen=True)
class Document:
    agent: Mapping[str, Any]
    kubernetes: Mapping[str, Any]
    metrics: Mapping[str, Any]
    dra: Mapping[str, Any]
    # The keys each resource's definition sets, or None for `remove = true`.
    resources: Mapping[str, Mapping[str, Any] | None]
    defined: bool  # whether the document has any table or key at all
    kubernetes_table: bool


def parse_document(path: Path, text: str, errors: list[ConfigError]) -> Document | None:
    """One file's settings, each valid on its own; what is not goes to ``errors`` (a section
    or resource at a time), and None if it is not TOML at all."""
    try:
        table = _parse_toml(path, text)
    except ConfigError as error:
        errors.append(error)
        return None
    problems: list[Invalid] = []
    try:
        _check_keys(table, TOP_LEVEL_KEYS, ())
    except Invalid as error:
        problems.append(error)
    sections: dict[str, Mapping[str, Any]] = {}
    sections_parsed = (
        ("agent", _parse_agent),
        ("kubernetes", _parse_kubernetes),
        ("metrics", _parse_metrics),
        ("dra", _parse_dra),
    )
    for name, parse in sections_parsed:
        try:
            sections[name] = parse(_section(table, name))
        except Invalid as error:
            problems.append(error)
            sections[name] = {}
    resources: dict[str, Mapping[str, Any] | None] = {}
    try:
        for name, value in _section(table, "resources").items():
            try:
                resources[name] = _parse_resource(name, value)
            except Invalid as error:
                problems.append(error)
    except Invalid as error:
        problems.append(error)
    errors.extend(located(problem, path, text) for problem in problems)
    return Document(
        agent=sections["agent"],
        kubernetes=sections["kubernetes"],
        metrics=sections["metrics"],
        dra=sections["dra"],
        resources=resources,
        defined=bool(table),
        kubernetes_table="kubernetes" in table,
    )


def _parse_toml(path: Path, text: str) -> dict[str, Any]:
    try:
        table: dict[str, Any] = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        position = _DECODE_POSITION.fullmatch(str(error))
        if position is None:
            raise ConfigError(f"invalid TOML: {error}", file=path) from None
        raise ConfigError(
            f"invalid TOML: {position['reason']}", file=path, line=int(position["line"])
        ) from None
    except RecursionError:
        # tomllib recurses once per nesting level of arrays and inline tables.
        raise ConfigError("invalid TOML: values are nested too deeply", file=path) from None
    return table


def _section(table: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    value = table.get(name, {})
    if not isinstance(value, dict):
        raise Invalid((name,), f"{name} must be a table, got {describe_value(value)}")
    return value


def _check_keys(table: Mapping[str, Any], allowed: frozenset[str], path: tuple[str, ...]) -> None:
    for key in table:
        if key not in allowed:
            raise Invalid(
                (*path, key), f"unknown key {quote(key)}; allowed: {', '.join(sorted(allowed))}"
            )


def _parse_agent(table: Mapping[str, Any]) -> dict[str, Any]:
    _check_keys(table, AGENT_KEYS, ("agent",))
    return {
        key: _parse_absolute_path(table[key], ("agent", key)) for key in AGENT_KEYS if key in table
    }


def _parse_metrics(table: Mapping[str, Any]) -> dict[str, Any]:
    _check_keys(table, METRICS_KEYS, ("metrics",))
    settings: dict[str, Any] = {}
    if "textfile" in table:
        path = _parse_absolute_path(table["textfile"], ("metrics", "textfile"))
        if path.suffix != TEXTFILE_SUFFIX:
            raise Invalid(
                ("metrics", "textfile"),
                f"textfile must end in {TEXTFILE_SUFFIX} (node_exporter reads only those), "
                f"got {describe_value(table['textfile'])}",
            )
        settings["textfile"] = path
    if "listen" in table:
        settings["listen"] = _parse_listen(table["listen"])
    return settings


def _parse_listen(value: object) -> tuple[str, int]:
    """ "IP:PORT" or "[IPv6]:PORT": an address, never a host name to resolve."""
    problem = (
        'listen must be "IP:PORT" or "[IPv6]:PORT" (an IP address, not a host name; '
        f"port 0 to {_MAX_PORT}), got {describe_value(value)}"
    )
    if not isinstance(value, str):
        raise Invalid(("metrics", "listen"), problem)
    host, colon, port = value.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        host = ""  # an IPv6 address without brackets: its port cannot be told apart
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        raise Invalid(("metrics", "listen"), problem) from None
    if not colon or not port.isdigit() or int(port) > _MAX_PORT:
        raise Invalid(("metrics", "listen"), problem)
    return str(address), int(port)


def _parse_dra(table: Mapping[str, Any]) -> dict[str, Any]:
    _check_keys(table, DRA_KEYS, ("dra",))
    settings: dict[str, Any] = {
        key: _parse_absolute_path(table[key], ("dra", key))
        for key in ("plugins_registry_dir", "plugins_dir", "cdi_dir")
        if key in table
    }
    if "driver" in table:
        driver = table["driver"]
        if (
            not isinstance(driver, str)
            or len(driver) > _MAX_DRIVER_LENGTH
            or not DNS_SUBDOMAIN.fullmatch(driver)
        ):
            raise Invalid(
                ("dra", "driver"),
                f"driver must be a DRA driver name (a lowercase DNS subdomain of at most "
                f"{_MAX_DRIVER_LENGTH} characters, e.g. tokens.example.com), "
                f"got {describe_value(driver)}",
            )
        settings["driver"] = driver
    return settings


def _parse_kubernetes(table: Mapping[str, Any]) -> dict[str, Any]:
    _check_keys(table, KUBERNETES_KEYS, ("kubernetes",))
    settings: dict[str, Any] = {}
    if "kubeconfig" in table:
        settings["kubeconfig"] = _parse_absolute_path(
            table["kubeconfig"], ("kubernetes", "kubeconfig")
        )
    if "in_cluster" in table:
        if not isinstance(table["in_cluster"], bool):
            raise Invalid(
                ("kubernetes", "in_cluster"),
                f"in_cluster must be true or false, got {describe_value(table['in_cluster'])}",
            )
        settings["in_cluster"] = table["in_cluster"]
    if "node_name" in table:
        name = table["node_name"]
        if not isinstance(name, str) or len(name) > 253 or not DNS_SUBDOMAIN.fullmatch(name):
            raise Invalid(
                ("kubernetes", "node_name"),
                "node_name must be a Node name (a lowercase DNS subdomain), "
                f"got {describe_value(name)}",
            )
        settings["node_name"] = name
    if "resync_seconds" in table:
        seconds = table["resync_seconds"]
        if (
            isinstance(seconds, bool)
            or not isinstance(seconds, (int, float))
            or not MIN_RESYNC_SECONDS <= seconds <= MAX_RESYNC_SECONDS
        ):
            raise Invalid(
                ("kubernetes", "resync_seconds"),
                f"resync_seconds must be a number between {MIN_RESYNC_SECONDS:g} and "
                f"{MAX_RESYNC_SECONDS:g}, got {describe_value(seconds)}",
            )
        settings["resync_seconds"] = float(seconds)
    settings.update(cluster.parse_kubernetes_keys(table))
    return settings


def _parse_absolute_path(value: object, key_path: tuple[str, ...]) -> Path:
    # NUL cannot occur in a path; letting it through would fail later, far from the config.
    if not isinstance(value, str) or not value.startswith("/") or "\0" in value:
        raise Invalid(
            key_path, f"{key_path[-1]} must be an absolute path, got {describe_value(value)}"
        )
    return Path(value)


def _parse_resource(name: str, value: object) -> Mapping[str, Any] | None:
    """The keys one file sets for a resource, each valid on its own; None: remove it."""
    key_path = ("resources", name)
    problem = resource_name_problem(name)
    if problem is not None:
        raise Invalid(key_path, problem)
    if not isinstance(value, dict):
        return {"count": _parse_count(value, key_path)}
    _check_keys(value, RESOURCE_KEYS | {REMOVE_KEY}, key_path)
    if REMOVE_KEY in value:
        if value[REMOVE_KEY] is not True or len(value) > 1:
            raise Invalid(
                (*key_path, REMOVE_KEY),
                f"{REMOVE_KEY} must be true and alone in the resource's table (it takes away "
                f"what earlier files defined), got {describe_value(value[REMOVE_KEY])}"
                + (" beside other keys" if len(value) > 1 else ""),
            )
        return None
    keys: dict[str, Any] = {}
    if "count" in value:
        keys["count"] = _parse_count(value["count"], (*key_path, "count"))
    if "advertise" in value:
        if value["advertise"] not in ADVERTISE_MODES:
            raise Invalid(
                (*key_path, "advertise"),
                f'advertise must be "{DEVICE_PLUGIN}", "{NODE_STATUS}" or "{DRA}", '
                f"got {describe_value(value['advertise'])}",
            )
        keys["advertise"] = value["advertise"]
    if "env" in value:
        keys["env"] = _parse_env(value["env"], (*key_path, "env"))
    if "probe" in value:
        keys["probe"] = parse_probe(value["probe"], (*key_path, "probe"))
    keys.update(cluster.parse_resource_keys(value, key_path))
    return keys


def _parse_count(value: object, key_path: tuple[str, ...]) -> int:
    # bool is an int subclass in Python, but `count = true` is a mistake, not a 1.
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_COUNT:
        raise Invalid(
            key_path,
            f"count must be an integer between 0 and {MAX_COUNT}, got {describe_value(value)}",
        )
    return value


def _parse_env(value: object, key_path: tuple[str, ...]) -> str:
    if not isinstance(value, str) or not _ENV_NAME.fullmatch(value):
        raise Invalid(
            key_path,
            "env must be an environment variable name (letters, digits and '_', not starting"
            f" with a digit), got {describe_value(value)}",
        )
    return value
