"""Cluster-scoped resources and their publishers' leader election: one file's values, and the
rules only the merged files can be held to.

    [resources."example.com/seat"]
    count = 20
    advertise = "dra"
    scope = "cluster"                   # one pool of 20 for the cluster (default "node")
    nodes = "license-zone in (a,b)"     # optional: a label selector; default every node

    [kubernetes]
    lease_duration_seconds = 15         # client-go's leader election, and its defaults
    renew_deadline_seconds = 10
    retry_period_seconds = 2
    lease_namespace = "token-resource"  # default: the pod's namespace, else the kubeconfig
                                        # context's, else this

A drop-in may set any of these keys; the resource and the election settings are checked once
merged, each refusal naming the file that set the offending key.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from token_resource.config.errors import (
    ConfigError,
    Invalid,
    describe_value,
    find_line,
    format_key,
)
from token_resource.config.model import (
    CLUSTER_SCOPE,
    DEFAULT_LEASE_DURATION,
    DEFAULT_RENEW_DEADLINE,
    DEFAULT_RETRY_PERIOD,
    DRA,
    NODE_SCOPE,
    PATH,
    SCOPES,
    NodeSelection,
    ProbeSpec,
)
from token_resource.config.names import DNS_LABEL, MAX_DNS_LABEL_LENGTH
from token_resource.config.probes import parse_seconds
from token_resource.config.selectors import SelectorError, parse_selector

RESOURCE_KEYS = frozenset({"scope", "nodes"})
# The file's keys and the KubernetesSettings fields they set.
LEASE_TIMING_KEYS = {
    "lease_duration_seconds": "lease_duration",
    "renew_deadline_seconds": "renew_deadline",
    "retry_period_seconds": "retry_period",
}
KUBERNETES_KEYS = frozenset({*LEASE_TIMING_KEYS, "lease_namespace"})
MAX_LEASE_SECONDS = 3600.0
# client-go's leaderelection.JitterFactor: a renewal must fit 1.2 retry periods.
JITTER_FACTOR = 1.2
_NANOSECONDS = 1_000_000_000


def parse_resource_keys(table: Mapping[str, Any], key_path: tuple[str, ...]) -> dict[str, Any]:
    """``scope`` and ``nodes`` of one file's resource table, each valid on its own."""
    keys: dict[str, Any] = {}
    if "scope" in table:
        if table["scope"] not in SCOPES:
            raise Invalid(
                (*key_path, "scope"),
                f'scope must be "{NODE_SCOPE}" or "{CLUSTER_SCOPE}", '
                f"got {describe_value(table['scope'])}",
            )
        keys["scope"] = table["scope"]
    if "nodes" in table:
        keys["nodes"] = _parse_nodes(table["nodes"], (*key_path, "nodes"))
    return keys


def _parse_nodes(value: object, key_path: tuple[str, ...]) -> NodeSelection:
    if not isinstance(value, str):
        raise Invalid(
            key_path,
            'nodes must be a label selector (e.g. "license-zone=a" or "site in (a,b),!spot"), '
            f"got {describe_value(value)}",
        )
    try:
        requirements = parse_selector(value)
    except SelectorError as error:
        raise Invalid(key_path, f"nodes is not a valid label selector: {error}") from None
    if not requirements:
        raise Invalid(
            key_path, "nodes is empty: leave nodes out for a pool that every node may use"
        )
    return NodeSelection(value, requirements)


def check_resource(
    settings: Mapping[str, tuple[Any, Path]], advertise: str, probe: ProbeSpec | None
) -> None:
    """The merged resource's scope, nodes and probe together: raises Invalid with the
    offending key's path below the resource (("scope",), ("nodes",) or ("probe",))."""
    scope = settings["scope"][0] if "scope" in settings else NODE_SCOPE
    if scope == CLUSTER_SCOPE and advertise != DRA:
        advertise_file = settings["advertise"][1] if "advertise" in settings else "the default"
        raise Invalid(
            ("scope",),
            f'scope = "{CLUSTER_SCOPE}" needs advertise = "{DRA}" (a cluster pool is published '
            f'as ResourceSlices), got advertise = "{advertise}" ({advertise_file})',
        )
    if "nodes" in settings and scope != CLUSTER_SCOPE:
        raise Invalid(
            ("nodes",),
            f'nodes only applies to a cluster-scoped resource (scope = "{CLUSTER_SCOPE}"): a '
            "node-scoped resource's tokens are on the node that serves them",
        )
    if scope == CLUSTER_SCOPE and probe is not None and probe.kind == PATH:
        raise Invalid(
            ("probe",),
            "a path probe checks files on one node, and a cluster pool's publisher runs on no "
            "particular node: use a command (printing the number of free seats), tcp or http "
            "probe",
        )


def parse_kubernetes_keys(table: Mapping[str, Any]) -> dict[str, Any]:
    """The leader-election keys of one file's [kubernetes] table, as KubernetesSettings
    fields, each valid on its own."""
    settings: dict[str, Any] = {
        field: parse_seconds(table, key, 0.0, MAX_LEASE_SECONDS, ("kubernetes",))
        for key, field in LEASE_TIMING_KEYS.items()
        if key in table
    }
    if "lease_namespace" in table:
        namespace = table["lease_namespace"]
        if (
            not isinstance(namespace, str)
            or len(namespace) > MAX_DNS_LABEL_LENGTH
            or not DNS_LABEL.fullmatch(namespace)
        ):
            raise Invalid(
                ("kubernetes", "lease_namespace"),
                "lease_namespace must be a namespace name (a DNS label: lowercase letters, "
                f"digits and '-', starting and ending with a letter or digit, at most "
                f"{MAX_DNS_LABEL_LENGTH} characters), got {describe_value(namespace)}",
            )
        settings["lease_namespace"] = namespace
    return settings


def lease_timing_error(
    settings: Mapping[str, Any],
    origins: Mapping[str, Path],
    files: Sequence[Path],
    texts: Mapping[Path, str],
) -> ConfigError | None:
    """The error of client-go's NewLeaderElector rules for the merged settings
    (KubernetesSettings fields; ``origins``: the file that set each), or None: lease duration
    > renew deadline > JITTER_FACTOR times the retry period, compared in nanoseconds as
    time.Duration is. It names whichever of the two keys the latest file set."""
    duration = settings.get("lease_duration", DEFAULT_LEASE_DURATION)
    deadline = settings.get("renew_deadline", DEFAULT_RENEW_DEADLINE)
    retry = settings.get("retry_period", DEFAULT_RETRY_PERIOD)
    if _nanoseconds(duration) <= _nanoseconds(deadline):
        keys = ("lease_duration_seconds", "renew_deadline_seconds")
        reason = (
            f"lease_duration_seconds ({duration:g}) must be greater than renew_deadline_seconds "
            f"({deadline:g}): a leader that fails to renew must give up before another may "
            "take the lease"
        )
    elif _nanoseconds(deadline) <= int(JITTER_FACTOR * _nanoseconds(retry)):
        keys = ("renew_deadline_seconds", "retry_period_seconds")
        reason = (
            f"renew_deadline_seconds ({deadline:g}) must be greater than {JITTER_FACTOR:g} "
            f"times retry_period_seconds ({retry:g}, making {JITTER_FACTOR * retry:g}): a "
            "leader must have time to retry its renewal (every retry period, jittered by up to "
            f"{JITTER_FACTOR:g} times) before the deadline"
        )
    else:
        return None
    # The defaults keep both rules, so a file set at least one of the two keys.
    set_keys = [key for key in keys if LEASE_TIMING_KEYS[key] in origins]
    # The later file's key: the one whose change broke the rule, most likely.
    key = max(set_keys, key=lambda k: files.index(origins[LEASE_TIMING_KEYS[k]]))
    file = origins[LEASE_TIMING_KEYS[key]]
    key_path = ("kubernetes", key)
    return ConfigError(
        reason, file=file, key=format_key(key_path), line=find_line(texts[file], key_path)
    )


def _nanoseconds(seconds: float) -> int:
    return round(seconds * _NANOSECONDS)
