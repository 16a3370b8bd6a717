"""Reading the main file and its drop-ins, merging them key by key, and validating the result.

The one place that says what a valid configuration (and a valid reload) is: the agent, `check`
and the tests all ask it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from token_resource.config import cluster
from token_resource.config.errors import (
    ConfigError,
    Invalid,
    find_line,
    format_key,
    located,
    os_reason,
    quote,
)
from token_resource.config.model import (
    DEVICE_PLUGIN,
    DEVICES_PER_SLICE,
    DRA,
    MAX_DRA_COUNT,
    MODES_WITH_ENV,
    NODE_SCOPE,
    AgentSettings,
    Config,
    DraSettings,
    KubernetesSettings,
    MetricsSettings,
    ProbeSpec,
    ResourceSpec,
    format_listen,
)
from token_resource.config.names import default_env_name
from token_resource.config.sections import Document, parse_document


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
            f"cannot list the drop-in directory: {os_reason(error)}", file=directory
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


# The settings a reload may not change: the agent serves from the old ones until it restarts
# (the chart rolls its pods when one of them changes: deploy/helm's restartSettings).
# What a refused reload of one of them says: the CLI's reload --else-handover looks for it.
NEEDS_A_NEW_AGENT = "this takes a new agent (token-resource handover, or a restart), not a reload"
RESTART_ONLY = (
    "agent.device_plugin_dir",
    "metrics.textfile",
    "metrics.listen",
    "dra.driver",
    "dra.plugins_registry_dir",
    "dra.plugins_dir",
    "dra.cdi_dir",
)


def load_reload(
    main: Path,
    running: AgentSettings,
    running_metrics: MetricsSettings = MetricsSettings(),  # noqa: B008 (frozen)
    running_dra: DraSettings = DraSettings(),  # noqa: B008 (frozen)
) -> Config:
    """What a reload of the files would apply to an agent running with these settings.

    The one rule for "is this a valid reload": everything load_config refuses, and a change
    of a setting that only a restart applies (the agent serves from the old one until then).
    """
    config = load_config(main)
    before_tables = {"agent": running, "metrics": running_metrics, "dra": running_dra}
    after_tables = {"agent": config.agent, "metrics": config.metrics, "dra": config.dra}
    for key in RESTART_ONLY:
        table, _, name = key.partition(".")
        before = getattr(before_tables[table], name)
        after = getattr(after_tables[table], name)
        if before != after:
            raise ConfigError(
                f"{name} changed from {_setting(before)} to {_setting(after)}: {NEEDS_A_NEW_AGENT}",
                file=main,
                key=key,
            )
    return config


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
    kubernetes_origins: dict[str, Path] = {}
    metrics: dict[str, Any] = {}
    dra: dict[str, Any] = {}
    # Per resource, each key a file set: (value, that file); and the last file to mention it.
    settings: dict[str, dict[str, tuple[Any, Path]]] = {}
    sources: dict[str, Path] = {}
    removed: dict[str, Path] = {}
    kubernetes_table = False
    for path, document in parsed:
        kubernetes_table |= document.kubernetes_table
        agent.update(document.agent)
        kubernetes.update(document.kubernetes)
        kubernetes_origins.update(dict.fromkeys(document.kubernetes, path))
        metrics.update(document.metrics)
        dra.update(document.dra)
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
    lease_error = cluster.lease_timing_error(
        kubernetes, kubernetes_origins, [path for path, _ in documents], texts
    )
    if lease_error is not None:
        errors.append(lease_error)
    if errors:
        return Validation(None, tuple(errors))
    config = Config(
        agent=AgentSettings(**agent),
        resources=resources,
        files=tuple(path for path, _ in documents),
        kubernetes=KubernetesSettings(**kubernetes),
        metrics=MetricsSettings(**metrics),
        dra=DraSettings(**dra),
        removed=removed,
        kubernetes_table=kubernetes_table,
    )
    return Validation(config, ())


def _parse_documents(
    main: Path, documents: Sequence[tuple[Path, str]], errors: list[ConfigError]
) -> list[tuple[Path, Document]]:
    """Each document parsed on its own; their errors go to ``errors``."""
    parsed: list[tuple[Path, Document]] = []
    for path, text in documents:
        document = parse_document(path, text, errors)
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


def _is_dropin(path: Path) -> bool:
    # Hidden names are editors' lock and backup files (Emacs's ".#x.toml" is even a dangling
    # symlink). Anything else is kept, dangling symlinks included, so a broken drop-in is
    # reported instead of silently ignored.
    return path.suffix == ".toml" and not path.name.startswith(".") and not path.is_dir()


def _read_text(path: Path) -> str:
    try:
        data = path.read_bytes()
    except OSError as error:
        raise ConfigError(f"cannot read: {os_reason(error)}", file=path) from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ConfigError(
            f"invalid UTF-8: {error.reason} at byte {error.start}",
            file=path,
            line=data.count(b"\n", 0, error.start) + 1,
        ) from None


def _build_resource(
    name: str, settings: Mapping[str, tuple[Any, Path]], source: Path, texts: Mapping[Path, str]
) -> ResourceSpec:
    """One resource from the keys its files set, the later file winning key by key."""
    origins = {key: path for key, (_, path) in settings.items()}
    key_path = ("resources", name)
    if "count" not in settings:
        reason = "count is required: no file sets it for this resource"
        raise located(Invalid(key_path, reason), source, texts[source])
    advertise = settings["advertise"][0] if "advertise" in settings else DEVICE_PLUGIN
    if "env" in settings and advertise not in MODES_WITH_ENV:
        env_file = origins["env"]
        reason = (
            "env only applies to device-plugin and DRA resources: node-status resources "
            "allocate no IDs"
        )
        raise located(Invalid((*key_path, "env"), reason), env_file, texts[env_file])
    count = settings["count"][0]
    if advertise == DRA and count > MAX_DRA_COUNT:
        count_file = origins["count"]
        reason = (
            f"a DRA resource has at most {MAX_DRA_COUNT} tokens (each node publishes them as "
            f"ResourceSlices of {DEVICES_PER_SLICE} devices: {MAX_DRA_COUNT} make "
            f"{MAX_DRA_COUNT // DEVICES_PER_SLICE}), got {count}"
        )
        raise located(Invalid((*key_path, "count"), reason), count_file, texts[count_file])
    env = settings["env"][0] if "env" in settings else default_env_name(name)
    probe: ProbeSpec | None = settings["probe"][0] if "probe" in settings else None
    if probe is not None and probe.taint_effect is not None and advertise != DRA:
        probe_file = origins["probe"]
        reason = (
            "taint_effect only applies to DRA resources (their unhealthy tokens are tainted in "
            "the ResourceSlices); a device-plugin resource reports them unhealthy to the "
            "kubelet, a node-status one leaves them out of its count"
        )
        located_at = (*key_path, "probe", "taint_effect")
        raise located(Invalid(located_at, reason), probe_file, texts[probe_file])
    try:
        cluster.check_resource(settings, advertise, probe)
    except Invalid as error:
        offending_file = origins[error.key_path[0]]
        problem = Invalid((*key_path, *error.key_path), error.reason)
        raise located(problem, offending_file, texts[offending_file]) from None
    scope = settings["scope"][0] if "scope" in settings else NODE_SCOPE
    nodes = settings["nodes"][0] if "nodes" in settings else None
    return ResourceSpec(name, count, env, source, advertise, origins, probe, scope, nodes)


def _env_collisions(
    resources: Mapping[str, ResourceSpec], texts: Mapping[Path, str]
) -> list[ConfigError]:
    # One container may request several resources; each needs its own variable.
    errors: list[ConfigError] = []
    users: dict[str, ResourceSpec] = {}
    for name in sorted(resources):
        spec = resources[name]
        if spec.advertise not in MODES_WITH_ENV:
            continue
        other = users.setdefault(spec.env, spec)
        if other is not spec:
            key_path = ("resources", name)
            file = spec.origin("env") or spec.source
            errors.append(
                ConfigError(
                    f"env {quote(spec.env)} is also the env of resource {quote(other.name)}"
                    f" (defined in {other.origin('env') or other.source}); set a different env"
                    " for one of them",
                    file=file,
                    key=format_key(key_path),
                    line=find_line(texts[file], key_path),
                )
            )
    return errors
