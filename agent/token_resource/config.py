"""The agent's configuration: one TOML file plus drop-ins, parsed, validated and diffed.

Everything here is pure apart from reading the files, so the agent can load a new configuration,
reject it with an operator-readable ConfigError, or diff it against the running one before
touching any device plugin.

The format (the main file and every drop-in share it)::

    [agent]
    device_plugin_dir = "/var/lib/kubelet/device-plugins"   # optional, absolute
    pod_resources_socket = "/var/lib/kubelet/pod-resources/kubelet.sock"  # who holds tokens

    [resources]
    "example.com/token" = 2                # shorthand: a count

    [resources."example.com/license"]      # long form
    count = 5                              # required
    env = "LICENSE_SEATS"                  # optional; default: default_env_name(name)

    [resources."example.com/dongle"]
    count = 4
    advertise = "node-status"              # optional; default "device-plugin"

    [kubernetes]                           # API access, for node-status resources only
    kubeconfig = "/etc/kubernetes/kubelet.conf"   # or in_cluster = true
    node_name = "node-1"                   # default: the host name, lower-cased
    resync_seconds = 30                    # how often the Node is re-read and put right

    [metrics]                              # Prometheus metrics; both off by default
    textfile = "/var/lib/prometheus/node-exporter/token-resource.prom"  # node_exporter's
    listen = "127.0.0.1:9464"              # an HTTP listener (IP address and port)

Drop-ins (``<stem>.d/*.toml`` next to the main file, in lexical order) override the main file
key by key, as systemd's drop-ins do: a later file that sets a resource's ``count`` keeps the
``env`` an earlier file gave it. A later file takes a resource away with ``remove = true``::

    [resources."example.com/license"]
    remove = true

The main file must define something (an empty ``[resources]`` table serves nothing): an empty
main file is what a half-done write leaves, and is refused rather than served as "no resources".
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

from token_resource._compat import tomllib

DEFAULT_CONFIG_PATH = Path("/etc/token-resource.toml")
DEFAULT_DEVICE_PLUGIN_DIR = Path("/var/lib/kubelet/device-plugins")
DEFAULT_POD_RESOURCES_SOCKET = Path("/var/lib/kubelet/pod-resources/kubelet.sock")
# The kubelet's own credentials: its node identity may patch its own Node's status.
DEFAULT_KUBECONFIG = Path("/etc/kubernetes/kubelet.conf")
DEFAULT_RESYNC_SECONDS = 30.0
MIN_RESYNC_SECONDS, MAX_RESYNC_SECONDS = 1.0, 3600.0
# How a resource reaches the scheduler.
DEVICE_PLUGIN, NODE_STATUS = "device-plugin", "node-status"
ADVERTISE_MODES = (DEVICE_PLUGIN, NODE_STATUS)
# A ListAndWatch list of 100k "token-N" devices is ~2.5 MB, under the kubelet's 4 MiB gRPC limit.
MAX_COUNT = 100_000

# Allowed keys per section: a new setting starts here.
TOP_LEVEL_KEYS = frozenset({"agent", "resources", "kubernetes", "metrics"})
AGENT_KEYS = frozenset({"device_plugin_dir", "pod_resources_socket"})
RESOURCE_KEYS = frozenset({"count", "env", "advertise"})
# In a resource's table, alone: takes away what earlier files defined.
REMOVE_KEY = "remove"
KUBERNETES_KEYS = frozenset({"kubeconfig", "in_cluster", "node_name", "resync_seconds"})
METRICS_KEYS = frozenset({"textfile", "listen"})
# node_exporter's textfile collector reads only files with this suffix.
TEXTFILE_SUFFIX = ".prom"
_MAX_PORT = 65535

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_DNS_LABEL = r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?"
_DNS_SUBDOMAIN = re.compile(rf"{_DNS_LABEL}(?:\.{_DNS_LABEL})*")
_NAME_PART = re.compile(r"[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?")
_MAX_NAME_PART_LENGTH = 63
# The kubelet also requires "requests." + name to be a valid qualified name (the resource's
# quota key), which leaves the domain 9 characters short of a DNS subdomain's 253.
_QUOTA_PREFIX = "requests."
_MAX_DOMAIN_LENGTH = 253 - len(_QUOTA_PREFIX)
# The kubelet treats any name containing "kubernetes.io/" as a native resource.
_RESERVED_DOMAIN_SUFFIX = "kubernetes.io"

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")
_KEY_PART = r"""(?:[A-Za-z0-9_-]+|"(?:[^"\\]|\\.)*"|'[^']*')"""
_DOTTED_KEY = rf"{_KEY_PART}(?:[ \t]*\.[ \t]*{_KEY_PART})*"
_TABLE_HEADER = re.compile(rf"[ \t]*\[\[?[ \t]*({_DOTTED_KEY})[ \t]*\]")
_KEY_VALUE = re.compile(rf"[ \t]*({_DOTTED_KEY})[ \t]*=")
_CONTAINER_NAMES: Mapping[type, str] = {list: "an array", dict: "a table"}
_DECODE_POSITION = re.compile(r"(?P<reason>.*) \(at line (?P<line>\d+), column \d+\)")


class ConfigError(Exception):
    """A configuration the agent cannot use, explained in one operator-readable paragraph.

    str(error) names the file, the line (where known) and the dotted key path, then the reason.
    """

    def __init__(
        self,
        reason: str,
        *,
        file: Path | None = None,
        key: str | None = None,
        line: int | None = None,
    ) -> None:
        self.file = file
        self.key = key
        self.line = line
        self.reason = reason
        location = [
            *([str(file)] if file is not None else []),
            *([f"line {line}"] if line is not None else []),
            *([f"key {key}"] if key is not None else []),
        ]
        super().__init__(f"{', '.join(location)}: {reason}" if location else reason)


@dataclass(frozen=True)
class ResourceSpec:
    """One extended resource: `count` devices named to pods through the `env` variable.

    ``advertise`` says how the scheduler learns the count: through a device plugin (the
    kubelet), or by patching the Node's status on the API server (``env`` is then unused).
    ``source`` is the last file that set any of its keys, ``origins`` the file of each key that
    a file set (the others are defaults). Where a setting was written changes nothing the
    kubelet or a pod can see, so neither takes part in comparisons.
    """

    name: str
    count: int
    env: str
    source: Path = field(compare=False)
    advertise: str = DEVICE_PLUGIN
    origins: Mapping[str, Path] = field(default_factory=dict, compare=False)

    def origin(self, key: str) -> Path | None:
        """The file that set ``key``, or None for a default."""
        return self.origins.get(key)


@dataclass(frozen=True)
class AgentSettings:
    device_plugin_dir: Path = DEFAULT_DEVICE_PLUGIN_DIR
    # Read on demand (status, metrics) to tell who holds the tokens; never needed to serve.
    pod_resources_socket: Path = DEFAULT_POD_RESOURCES_SOCKET


@dataclass(frozen=True)
class MetricsSettings:
    """Where the Prometheus metrics go; neither by default, so no port opens unasked."""

    # A file for node_exporter's textfile collector (the host convention).
    textfile: Path | None = None
    # (IP address, port) of an HTTP listener for scrapes (the DaemonSet convention).
    listen: tuple[str, int] | None = None

    @property
    def enabled(self) -> bool:
        return self.textfile is not None or self.listen is not None


@dataclass(frozen=True)
class KubernetesSettings:
    """API server access for node-status resources."""

    kubeconfig: Path = DEFAULT_KUBECONFIG
    # The pod's service-account credentials instead of a kubeconfig.
    in_cluster: bool = False
    # None: the host name, lower-cased, as the kubelet names its Node.
    node_name: str | None = None
    resync_seconds: float = DEFAULT_RESYNC_SECONDS


@dataclass(frozen=True)
class Config:
    agent: AgentSettings
    resources: Mapping[str, ResourceSpec]
    files: tuple[Path, ...]
    kubernetes: KubernetesSettings = KubernetesSettings()
    metrics: MetricsSettings = MetricsSettings()
    # Resources an earlier file defined and a later one took away with `remove = true`.
    removed: Mapping[str, Path] = field(default_factory=dict)
    # Whether any file has a [kubernetes] table (even an empty one).
    kubernetes_table: bool = False

    def __post_init__(self) -> None:
        # Immutable and in a stable order however it was built, so that holders of a Config can
        # share it and log or serve its resources deterministically.
        ordered = {name: self.resources[name] for name in sorted(self.resources)}
        object.__setattr__(self, "resources", MappingProxyType(ordered))

    @property
    def uses_api_server(self) -> bool:
        """Whether the agent talks to the API server: for a node-status resource, or, given a
        [kubernetes] table, to remove the node-status resources its Node still lists after the
        last of them left the files while the agent was stopped."""
        modes = {spec.advertise for spec in self.resources.values()}
        return self.kubernetes_table or NODE_STATUS in modes

    def advertised_by(self, mode: str) -> Config:
        """The same configuration with only the resources advertised ``mode``'s way."""
        kept = {name: spec for name, spec in self.resources.items() if spec.advertise == mode}
        return replace(self, resources=kept)


@dataclass(frozen=True)
class ConfigDiff:
    added: tuple[ResourceSpec, ...]
    removed: tuple[ResourceSpec, ...]
    changed: tuple[tuple[ResourceSpec, ResourceSpec], ...]
    unchanged: tuple[ResourceSpec, ...]

    @property
    def empty(self) -> bool:
        return not (self.added or self.removed or self.changed)


def default_env_name(resource_name: str) -> str:
    """E.g. "example.com/token" -> "TOKEN_RESOURCE_EXAMPLE_COM_TOKEN"."""
    return "TOKEN_RESOURCE_" + re.sub(r"[^A-Za-z0-9]+", "_", resource_name).upper()


def dropin_dir(main: Path) -> Path:
    """E.g. /etc/token-resource.toml -> /etc/token-resource.d."""
    return main.parent / f"{main.stem}.d"


def config_files(main: Path) -> list[Path]:
    """The main file, then its drop-ins in the order they apply; no drop-in directory is fine."""
    directory = dropin_dir(main)
    try:
        dropins = sorted(
            (path for path in directory.iterdir() if _is_dropin(path)), key=lambda p: p.name
        )
    except FileNotFoundError:
        return [main]
    except OSError as error:
        raise ConfigError(
            f"cannot list the drop-in directory: {_os_reason(error)}", file=directory
        ) from None
    return [main, *dropins]


@dataclass(frozen=True)
class Validation:
    """The files' configuration, or every error found in them (then ``config`` is None)."""

    config: Config | None
    errors: tuple[ConfigError, ...]

    def result(self) -> Config:
        """The configuration; else the first error is raised (the agent needs one answer)."""
        if self.config is None:
            raise self.errors[0]
        return self.config


def load_config(main: Path) -> Config:
    """Read and parse the main file and its drop-ins; every failure is a ConfigError."""
    return validate_config(main).result()


def validate_config(main: Path) -> Validation:
    """Every error in the files that one run can find, for `check`: each file is read and
    parsed on its own (with each bad section or resource reported); what only the files
    together can get wrong (a count no file sets, two resources with one env) is checked
    once every file parsed, as it would otherwise report the fallout of the other errors."""
    errors: list[ConfigError] = []
    try:
        paths = config_files(main)
    except ConfigError as error:
        errors.append(error)
        paths = [main]
    documents: list[tuple[Path, str]] = []
    for path in paths:
        try:
            documents.append((path, _read_text(path)))
        except ConfigError as error:
            errors.append(error)
    return _validate(main, documents, errors)


def load_reload(
    main: Path, running: AgentSettings, running_metrics: MetricsSettings = MetricsSettings()
) -> Config:
    """What a reload of the files would apply to an agent running with these settings.

    The one rule for "is this a valid reload": everything load_config refuses, and a change
    of a setting that only a restart applies (the agent serves from the old one until then).
    """
    config = load_config(main)
    restart_only = (
        ("agent.device_plugin_dir", running.device_plugin_dir, config.agent.device_plugin_dir),
        ("metrics.textfile", running_metrics.textfile, config.metrics.textfile),
        ("metrics.listen", running_metrics.listen, config.metrics.listen),
    )
    for key, before, after in restart_only:
        if before != after:
            raise ConfigError(
                f"{key.partition('.')[2]} changed from {_setting(before)} to {_setting(after)}: "
                "this takes a restart of the agent, not a reload",
                file=main,
                key=key,
            )
    return config


def format_listen(address: tuple[str, int]) -> str:
    """E.g. ("::1", 9464) -> "[::1]:9464", as written in the file."""
    host, port = address
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _setting(value: object) -> str:
    if value is None:
        return "unset"
    if isinstance(value, tuple):
        return format_listen(value)
    return str(value)


def parse_config(documents: Sequence[tuple[Path, str]]) -> Config:
    """Build a Config from (path, text) pairs: the main file first, then its drop-ins."""
    return _validate(documents[0][0], documents, []).result()


def _validate(
    main: Path, documents: Sequence[tuple[Path, str]], errors: list[ConfigError]
) -> Validation:
    """The Config the documents make, after ``errors`` (those found reading the files)."""
    parsed = _parse_documents(main, documents, errors)
    if errors:
        return Validation(None, tuple(errors))
    agent: dict[str, Any] = {}
    kubernetes: dict[str, Any] = {}
    metrics: dict[str, Any] = {}
    # Per resource, each key a file set: (value, that file); and the last file to mention it.
    settings: dict[str, dict[str, tuple[Any, Path]]] = {}
    sources: dict[str, Path] = {}
    removed: dict[str, Path] = {}
    kubernetes_table = False
    for path, document in parsed:
        kubernetes_table |= document.kubernetes_table
        agent.update(document.agent)
        kubernetes.update(document.kubernetes)
        metrics.update(document.metrics)
        for name, keys in document.resources.items():
            if keys is None:
                if settings.pop(name, None) is not None:
                    removed[name] = path
                sources.pop(name, None)
            else:
                removed.pop(name, None)
                settings.setdefault(name, {}).update(
                    {key: (value, path) for key, value in keys.items()}
                )
                sources[name] = path
    texts = dict(documents)
    resources: dict[str, ResourceSpec] = {}
    for name, keys in settings.items():
        try:
            resources[name] = _build_resource(name, keys, sources[name], texts)
        except ConfigError as error:
            errors.append(error)
    errors.extend(_env_collisions(resources, texts))
    if kubernetes.get("in_cluster") and "kubeconfig" in kubernetes:
        errors.append(
            ConfigError("set either kubeconfig or in_cluster = true, not both", key="kubernetes")
        )
    if errors:
        return Validation(None, tuple(errors))
    config = Config(
        agent=AgentSettings(**agent),
        resources=resources,
        files=tuple(path for path, _ in documents),
        kubernetes=KubernetesSettings(**kubernetes),
        metrics=MetricsSettings(**metrics),
        removed=removed,
        kubernetes_table=kubernetes_table,
    )
    return Validation(config, ())


def _parse_documents(
    main: Path, documents: Sequence[tuple[Path, str]], errors: list[ConfigError]
) -> list[tuple[Path, _Document]]:
    """Each document parsed on its own; their errors go to ``errors``."""
    parsed: list[tuple[Path, _Document]] = []
    for path, text in documents:
        document = _parse_document(path, text, errors)
        if document is None:
            continue
        if path == main and not document.defined:
            errors.append(
                ConfigError(
                    "the main file defines nothing (empty, or only comments): an incomplete "
                    "write? To serve no resources, write an empty [resources] table",
                    file=path,
                )
            )
        parsed.append((path, document))
    return parsed


def diff_configs(old: Config, new: Config) -> ConfigDiff:
    """Compare resources by name; each part of the result is sorted by name."""
    return diff_resources(old.resources, new.resources)


def diff_resources(
    before: Mapping[str, ResourceSpec], after: Mapping[str, ResourceSpec]
) -> ConfigDiff:
    """The difference between two sets of resources by name, each part sorted by name."""
    common = sorted(before.keys() & after.keys())
    return ConfigDiff(
        added=tuple(after[name] for name in sorted(after.keys() - before.keys())),
        removed=tuple(before[name] for name in sorted(before.keys() - after.keys())),
        changed=tuple(
            (before[name], after[name]) for name in common if _differs(before[name], after[name])
        ),
        unchanged=tuple(after[name] for name in common if not _differs(before[name], after[name])),
    )


def _differs(old: ResourceSpec, new: ResourceSpec) -> bool:
    # Sources are not compared: moving a definition to another file changes nothing.
    return old != new


def describe_change(old: ResourceSpec, new: ResourceSpec) -> str:
    """What changed in a resource, key by key, e.g. "count 5 → 8, env LICENSE → SEATS"."""
    parts = [
        f"{key} {before} → {after}"
        for key, before, after in (
            ("count", old.count, new.count),
            ("env", old.env, new.env),
            ("advertise", old.advertise, new.advertise),
        )
        if before != after
    ]
    return ", ".join(parts) if parts else "unchanged"


# Reading


def _is_dropin(path: Path) -> bool:
    # Hidden names are editors' lock and backup files (Emacs's ".#x.toml" is even a dangling
    # symlink). Anything else is kept, dangling symlinks included, so a broken drop-in is
    # reported instead of silently ignored.
    return path.suffix == ".toml" and not path.name.startswith(".") and not path.is_dir()


def _read_text(path: Path) -> str:
    try:
        data = path.read_bytes()
    except OSError as error:
        raise ConfigError(f"cannot read: {_os_reason(error)}", file=path) from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ConfigError(
            f"invalid UTF-8: {error.reason} at byte {error.start}",
            file=path,
            line=data.count(b"\n", 0, error.start) + 1,
        ) from None


def _os_reason(error: OSError) -> str:
    return error.strerror or str(error)


# Parsing and validation


class _Invalid(Exception):
    """A validation failure inside one document, before its file and line are attached."""

    def __init__(self, key_path: tuple[str, ...], reason: str) -> None:
        super().__init__(reason)
        self.key_path = key_path
        self.reason = reason


@dataclass(frozen=True)
class _Document:
    agent: Mapping[str, Any]
    kubernetes: Mapping[str, Any]
    metrics: Mapping[str, Any]
    # The keys each resource's definition sets, or None for `remove = true`.
    resources: Mapping[str, Mapping[str, Any] | None]
    defined: bool  # whether the document has any table or key at all
    kubernetes_table: bool


def _parse_document(path: Path, text: str, errors: list[ConfigError]) -> _Document | None:
    """One file's settings, each valid on its own; what is not goes to ``errors`` (a section
    or resource at a time), and None if it is not TOML at all."""
    try:
        table = _parse_toml(path, text)
    except ConfigError as error:
        errors.append(error)
        return None
    problems: list[_Invalid] = []
    try:
        _check_keys(table, TOP_LEVEL_KEYS, ())
    except _Invalid as error:
        problems.append(error)
    sections: dict[str, Mapping[str, Any]] = {}
    sections_parsed = (
        ("agent", _parse_agent),
        ("kubernetes", _parse_kubernetes),
        ("metrics", _parse_metrics),
    )
    for name, parse in sections_parsed:
        try:
            sections[name] = parse(_section(table, name))
        except _Invalid as error:
            problems.append(error)
            sections[name] = {}
    resources: dict[str, Mapping[str, Any] | None] = {}
    try:
        for name, value in _section(table, "resources").items():
            try:
                resources[name] = _parse_resource(name, value)
            except _Invalid as error:
                problems.append(error)
    except _Invalid as error:
        problems.append(error)
    errors.extend(_located(problem, path, text) for problem in problems)
    return _Document(
        agent=sections["agent"],
        kubernetes=sections["kubernetes"],
        metrics=sections["metrics"],
        resources=resources,
        defined=bool(table),
        kubernetes_table="kubernetes" in table,
    )


def _located(error: _Invalid, path: Path, text: str) -> ConfigError:
    return ConfigError(
        error.reason,
        file=path,
        key=_format_key(error.key_path),
        line=_find_line(text, error.key_path),
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
        raise _Invalid((name,), f"{name} must be a table, got {_describe(value)}")
    return value


def _check_keys(table: Mapping[str, Any], allowed: frozenset[str], path: tuple[str, ...]) -> None:
    for key in table:
        if key not in allowed:
            raise _Invalid(
                (*path, key), f"unknown key {_quote(key)}; allowed: {', '.join(sorted(allowed))}"
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
            raise _Invalid(
                ("metrics", "textfile"),
                f"textfile must end in {TEXTFILE_SUFFIX} (node_exporter reads only those), "
                f"got {_describe(table['textfile'])}",
            )
        settings["textfile"] = path
    if "listen" in table:
        settings["listen"] = _parse_listen(table["listen"])
    return settings


def _parse_listen(value: object) -> tuple[str, int]:
    """ "IP:PORT" or "[IPv6]:PORT": an address, never a host name to resolve."""
    problem = (
        'listen must be "IP:PORT" or "[IPv6]:PORT" (an IP address, not a host name; '
        f"port 0 to {_MAX_PORT}), got {_describe(value)}"
    )
    if not isinstance(value, str):
        raise _Invalid(("metrics", "listen"), problem)
    host, colon, port = value.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        host = ""  # an IPv6 address without brackets: its port cannot be told apart
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        raise _Invalid(("metrics", "listen"), problem) from None
    if not colon or not port.isdigit() or int(port) > _MAX_PORT:
        raise _Invalid(("metrics", "listen"), problem)
    return str(address), int(port)


def _parse_kubernetes(table: Mapping[str, Any]) -> dict[str, Any]:
    _check_keys(table, KUBERNETES_KEYS, ("kubernetes",))
    settings: dict[str, Any] = {}
    if "kubeconfig" in table:
        settings["kubeconfig"] = _parse_absolute_path(
            table["kubeconfig"], ("kubernetes", "kubeconfig")
        )
    if "in_cluster" in table:
        if not isinstance(table["in_cluster"], bool):
            raise _Invalid(
                ("kubernetes", "in_cluster"),
                f"in_cluster must be true or false, got {_describe(table['in_cluster'])}",
            )
        settings["in_cluster"] = table["in_cluster"]
    if "node_name" in table:
        name = table["node_name"]
        if not isinstance(name, str) or len(name) > 253 or not _DNS_SUBDOMAIN.fullmatch(name):
            raise _Invalid(
                ("kubernetes", "node_name"),
                f"node_name must be a Node name (a lowercase DNS subdomain), got {_describe(name)}",
            )
        settings["node_name"] = name
    if "resync_seconds" in table:
        seconds = table["resync_seconds"]
        if (
            isinstance(seconds, bool)
            or not isinstance(seconds, (int, float))
            or not MIN_RESYNC_SECONDS <= seconds <= MAX_RESYNC_SECONDS
        ):
            raise _Invalid(
                ("kubernetes", "resync_seconds"),
                f"resync_seconds must be a number between {MIN_RESYNC_SECONDS:g} and "
                f"{MAX_RESYNC_SECONDS:g}, got {_describe(seconds)}",
            )
        settings["resync_seconds"] = float(seconds)
    return settings


def _parse_absolute_path(value: object, key_path: tuple[str, ...]) -> Path:
    # NUL cannot occur in a path; letting it through would fail later, far from the config.
    if not isinstance(value, str) or not value.startswith("/") or "\0" in value:
        raise _Invalid(key_path, f"{key_path[-1]} must be an absolute path, got {_describe(value)}")
    return Path(value)


def _parse_resource(name: str, value: object) -> Mapping[str, Any] | None:
    """The keys one file sets for a resource, each valid on its own; None: remove it."""
    key_path = ("resources", name)
    problem = resource_name_problem(name)
    if problem is not None:
        raise _Invalid(key_path, problem)
    if not isinstance(value, dict):
        return {"count": _parse_count(value, key_path)}
    _check_keys(value, RESOURCE_KEYS | {REMOVE_KEY}, key_path)
    if REMOVE_KEY in value:
        if value[REMOVE_KEY] is not True or len(value) > 1:
            raise _Invalid(
                (*key_path, REMOVE_KEY),
                f"{REMOVE_KEY} must be true and alone in the resource's table (it takes away "
                f"what earlier files defined), got {_describe(value[REMOVE_KEY])}"
                + (" beside other keys" if len(value) > 1 else ""),
            )
        return None
    keys: dict[str, Any] = {}
    if "count" in value:
        keys["count"] = _parse_count(value["count"], (*key_path, "count"))
    if "advertise" in value:
        if value["advertise"] not in ADVERTISE_MODES:
            raise _Invalid(
                (*key_path, "advertise"),
                f'advertise must be "{DEVICE_PLUGIN}" or "{NODE_STATUS}", '
                f"got {_describe(value['advertise'])}",
            )
        keys["advertise"] = value["advertise"]
    if "env" in value:
        keys["env"] = _parse_env(value["env"], (*key_path, "env"))
    return keys


def _build_resource(
    name: str, settings: Mapping[str, tuple[Any, Path]], source: Path, texts: Mapping[Path, str]
) -> ResourceSpec:
    """One resource from the keys its files set, the later file winning key by key."""
    origins = {key: path for key, (_, path) in settings.items()}
    key_path = ("resources", name)
    if "count" not in settings:
        reason = "count is required: no file sets it for this resource"
        raise _located(_Invalid(key_path, reason), source, texts[source])
    advertise = settings["advertise"][0] if "advertise" in settings else DEVICE_PLUGIN
    if "env" in settings and advertise != DEVICE_PLUGIN:
        env_file = origins["env"]
        reason = (
            "env only applies to device-plugin resources: node-status resources allocate no IDs"
        )
        raise _located(_Invalid((*key_path, "env"), reason), env_file, texts[env_file])
    env = settings["env"][0] if "env" in settings else default_env_name(name)
    return ResourceSpec(name, settings["count"][0], env, source, advertise, origins)


def _parse_count(value: object, key_path: tuple[str, ...]) -> int:
    # bool is an int subclass in Python, but `count = true` is a mistake, not a 1.
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_COUNT:
        raise _Invalid(
            key_path, f"count must be an integer between 0 and {MAX_COUNT}, got {_describe(value)}"
        )
    return value


def _parse_env(value: object, key_path: tuple[str, ...]) -> str:
    if not isinstance(value, str) or not _ENV_NAME.fullmatch(value):
        raise _Invalid(
            key_path,
            "env must be an environment variable name (letters, digits and '_', not starting"
            f" with a digit), got {_describe(value)}",
        )
    return value


def resource_name_problem(name: str) -> str | None:
    """Why the kubelet would refuse `name` as an extended resource name, or None if it would not."""
    if name.count("/") != 1:
        return 'a resource name must be "<domain>/<name>" with exactly one "/"'
    if name.startswith(_QUOTA_PREFIX):
        return f'a resource name must not start with "{_QUOTA_PREFIX}" (reserved for quotas)'
    domain, _, part = name.partition("/")
    return _domain_problem(domain) or _name_part_problem(part)


def _domain_problem(domain: str) -> str | None:
    if not domain:
        return 'the domain before "/" is empty'
    if len(domain) > _MAX_DOMAIN_LENGTH:
        return f"the domain is longer than {_MAX_DOMAIN_LENGTH} characters"
    if not _DNS_SUBDOMAIN.fullmatch(domain):
        return (
            f"the domain {_quote(domain)} is not a DNS subdomain: lowercase letters, digits, '-'"
            " and '.', each dot-separated label starting and ending with a letter or digit"
        )
    if domain.endswith(_RESERVED_DOMAIN_SUFFIX):
        return f"the domain {_quote(domain)} is reserved: kubernetes.io names are native resources"
    return None


def _name_part_problem(part: str) -> str | None:
    if not part:
        return 'the name after "/" is empty'
    if len(part) > _MAX_NAME_PART_LENGTH:
        return f'the name after "/" is longer than {_MAX_NAME_PART_LENGTH} characters'
    if not _NAME_PART.fullmatch(part):
        return (
            f"the name after \"/\" ({_quote(part)}) must consist of letters, digits, '-', '_'"
            " and '.', starting and ending with a letter or digit"
        )
    return None


def _env_collisions(
    resources: Mapping[str, ResourceSpec], texts: Mapping[Path, str]
) -> list[ConfigError]:
    # One container may request several resources; each needs its own variable.
    errors: list[ConfigError] = []
    users: dict[str, ResourceSpec] = {}
    for name in sorted(resources):
        spec = resources[name]
        if spec.advertise != DEVICE_PLUGIN:
            continue
        other = users.setdefault(spec.env, spec)
        if other is not spec:
            key_path = ("resources", name)
            file = spec.origin("env") or spec.source
            errors.append(
                ConfigError(
                    f"env {_quote(spec.env)} is also the env of resource {_quote(other.name)}"
                    f" (defined in {other.origin('env') or other.source}); set a different env"
                    " for one of them",
                    file=file,
                    key=_format_key(key_path),
                    line=_find_line(texts[file], key_path),
                )
            )
    return errors


# Messages


def _quote(text: str) -> str:
    # A TOML basic string: escapes control characters, so messages stay on one line.
    return json.dumps(text, ensure_ascii=False)


def _format_key(key_path: tuple[str, ...]) -> str:
    return ".".join(part if _BARE_KEY.fullmatch(part) else _quote(part) for part in key_path)


def _describe(value: object) -> str:
    """A value as a message shows it, in TOML spelling where it has one."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, str):
        return _quote(value)
    return _CONTAINER_NAMES.get(type(value), f"a {type(value).__name__}")


def _find_line(text: str, key_path: tuple[str, ...]) -> int | None:
    """Best-effort line number of key_path's definition, which tomllib does not report.

    Falls back to the nearest enclosing key that can be found, e.g. to the resource itself for
    a key inside an inline table.
    """
    for length in range(len(key_path), 0, -1):
        line = _first_line_defining(text, key_path[:length])
        if line is not None:
            return line
    return None


def _first_line_defining(text: str, key_path: tuple[str, ...]) -> int | None:
    """The first `[table]` header or `key = ` line that defines key_path or a key inside it."""
    table: tuple[str, ...] | None = ()  # None: under a header that could not be read
    for number, line in enumerate(text.split("\n"), start=1):
        header = _TABLE_HEADER.match(line)
        if header:
            table = defined = _split_key(header[1])
        else:
            assignment = _KEY_VALUE.match(line)
            key = _split_key(assignment[1]) if assignment else None
            defined = table + key if table is not None and key is not None else None
        if defined is not None and defined[: len(key_path)] == key_path:
            return number
    return None


def _split_key(dotted_key: str) -> tuple[str, ...] | None:
    # tomllib unquotes and unescapes the parts, so TOML's string rules live in one place.
    try:
        node: object = tomllib.loads(f"{dotted_key} = 0")
    except tomllib.TOMLDecodeError:
        return None
    parts: list[str] = []
    while isinstance(node, dict):
        key, node = next(iter(node.items()))
        parts.append(key)
    return tuple(parts)
