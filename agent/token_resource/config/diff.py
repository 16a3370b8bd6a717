"""What changed between two configurations, resource by resource."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from token_resource.config.errors import quote
from token_resource.config.model import (
    FLEXLM,
    LICENSE_KINDS,
    Config,
    NodeSelection,
    ProbeSpec,
    ResourceSpec,
)


@dataclass(frozen=True)
class ConfigDiff:
    added: tuple[ResourceSpec, ...]
    removed: tuple[ResourceSpec, ...]
    changed: tuple[tuple[ResourceSpec, ResourceSpec], ...]
    unchanged: tuple[ResourceSpec, ...]

    @property
    def empty(self) -> bool:
        return not (self.added or self.removed or self.changed)


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
            ("scope", old.scope, new.scope),
            ("nodes", describe_nodes(old.nodes), describe_nodes(new.nodes)),
        )
        if before != after
    ]
    if old.probe != new.probe:
        parts.append(f"probe {describe_probe(old.probe)} → {describe_probe(new.probe)}")
    return ", ".join(parts) if parts else "unchanged"


def describe_nodes(nodes: NodeSelection | None) -> str:
    """A cluster pool's nodes as written, e.g. '"site in (a,b)"', or 'all'."""
    return "all" if nodes is None else quote(nodes.text)


def describe_probe(probe: ProbeSpec | None) -> str:
    """E.g. 'tcp 127.0.0.1:27000 every 10 s' or 'none'."""
    if probe is None:
        return "none"
    return f"{describe_check(probe)} every {probe.interval:g} s"


def describe_check(probe: ProbeSpec) -> str:
    """What the probe checks, e.g. 'tcp 127.0.0.1:27000' or 'flexlm 27000@lic feature MATLAB'."""
    target = " ".join(probe.target) if isinstance(probe.target, tuple) else probe.target
    if probe.kind not in LICENSE_KINDS:
        return f"{probe.kind} {target}"
    counted = "feature" if probe.kind == FLEXLM else "product"
    return f"{probe.kind} {target} {counted} {probe.feature}"


def describe_diff(diff: ConfigDiff) -> str:
    """What a reload changed, in one line."""
    parts = [
        *(f"added {spec.name}={spec.count}" for spec in diff.added),
        *(f"{new.name} {describe_change(old, new)}" for old, new in diff.changed),
        *(f"removed {spec.name}" for spec in diff.removed),
    ]
    return ", ".join(parts) if parts else "no change"
