"""The Helm chart (deploy/helm/token-resource) rendered by the real helm, and the kustomize
overlays it installs the same objects as, rendered by the real kubectl, brought to a form in
which the two compare field by field."""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from tests.kube.programs import CONTROL_PLANE_RELEASE, helm, program
from token_resource._compat import tomllib

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy" / "helm" / "token-resource"
EXAMPLES = ROOT / "deploy" / "helm" / "examples"
DEPLOY = ROOT / "deploy" / "kubernetes"
CONFIG_FILE = "token-resource.toml"
# The pods' digest of the settings the agent applies only when it starts.
RESTART_ANNOTATION = "checksum/restart-settings"
# What the chart labels every object with beyond what the overlays do (`helm create`'s set).
HELM_LABELS = frozenset(
    {
        "helm.sh/chart",
        "app.kubernetes.io/managed-by",
        "app.kubernetes.io/version",
        "app.kubernetes.io/instance",
    }
)

Object = dict[str, Any]
Key = tuple[str, str, str]


class Helm:
    """The real helm, with its configuration, cache and data under ``home`` (none of the
    user's)."""

    def __init__(self, home: Path) -> None:
        self.env = {
            **os.environ,
            "HELM_CONFIG_HOME": str(home / "config"),
            "HELM_CACHE_HOME": str(home / "cache"),
            "HELM_DATA_HOME": str(home / "data"),
        }

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(helm()), *args],
            check=False,
            capture_output=True,
            text=True,
            env=self.env,
            timeout=120,
        )

    def output(self, *args: str) -> str:
        done = self.run(*args)
        if done.returncode != 0:
            raise AssertionError(f"helm {' '.join(args)}: {done.returncode}\n{done.stderr}")
        return done.stdout

    def template(
        self,
        values: Sequence[Path] = (),
        release: str = "token-resource",
        namespace: str = "token-resource",
        settings: Sequence[str] = (),
    ) -> str:
        args = ["template", release, str(CHART), "--namespace", namespace]
        for path in values:
            args += ["--values", str(path)]
        for setting in settings:
            args += ["--set", setting]
        return self.output(*args)

    def objects(self, *args: Any, **kwargs: Any) -> list[Object]:
        return documents(self.template(*args, **kwargs))


def documents(text: str) -> list[Object]:
    return [document for document in yaml.safe_load_all(text) if document]


def kustomize(directory: Path) -> list[Object]:
    """The overlay as the real kubectl's kustomize renders it (no API server needed)."""
    done = subprocess.run(
        [str(program(CONTROL_PLANE_RELEASE, "kubectl")), "kustomize", str(directory)],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return documents(done.stdout)


def key(item: Mapping[str, Any]) -> Key:
    return (item["kind"], item["metadata"].get("namespace", ""), item["metadata"]["name"])


def by_key(items: Iterable[Object]) -> dict[Key, Object]:
    keyed = {key(item): item for item in items}
    return keyed


def comparable_chart_object(chart: Object, overlay: Object) -> Object:
    """The chart's object without the labels the chart adds to every object and the overlay
    does not set, and its ConfigMap's file parsed (values written as TOML by the chart)."""
    chart = yaml.safe_load(yaml.safe_dump(chart))
    labels = chart["metadata"].get("labels", {})
    wanted = overlay["metadata"].get("labels", {})
    # The overlay's DeviceClasses are what `token-resource device-classes` prints, unlabelled;
    # the chart labels them as every object it installs.
    added = HELM_LABELS if wanted else HELM_LABELS | {"app.kubernetes.io/name"}
    for name in added - set(wanted):
        labels.pop(name, None)
    if not labels:
        chart["metadata"].pop("labels", None)
    template = chart.get("spec", {}).get("template", {}).get("metadata", {})
    # Helm rolls the pods for the restart-only settings (test_chart_restart.py); kustomize
    # has no templates: `kubectl rollout restart` after such an edit (docs/kubernetes.md).
    template.get("annotations", {}).pop(RESTART_ANNOTATION, None)
    if template.get("annotations") == {}:
        del template["annotations"]
    return parsed_config(chart)


def comparable_overlay_object(overlay: Object) -> Object:
    """The overlay's object with what the API server would default and the chart says
    explicitly: a container's imagePullPolicy (IfNotPresent for a tag other than latest)."""
    overlay = yaml.safe_load(yaml.safe_dump(overlay))
    if overlay["kind"] in ("DaemonSet", "Deployment"):
        for container in overlay["spec"]["template"]["spec"]["containers"]:
            if not container["image"].endswith(":latest"):
                container.setdefault("imagePullPolicy", "IfNotPresent")
    return parsed_config(overlay)


def parsed_config(item: Object) -> Object:
    if item["kind"] == "ConfigMap" and CONFIG_FILE in item.get("data", {}):
        item["data"][CONFIG_FILE] = tomllib.loads(item["data"][CONFIG_FILE])
    return item


def differences(chart: Any, overlay: Any, path: str = "") -> list[str]:
    """Each field where the two differ, by its path, e.g. ``spec.template.spec.volumes[3]``."""
    if isinstance(chart, dict) and isinstance(overlay, dict):
        found = []
        for name in sorted(set(chart) | set(overlay)):
            where = f"{path}.{name}" if path else name
            if name not in chart:
                found.append(f"{where}: only the overlay has it: {overlay[name]!r}")
            elif name not in overlay:
                found.append(f"{where}: only the chart has it: {chart[name]!r}")
            else:
                found += differences(chart[name], overlay[name], where)
        return found
    if isinstance(chart, list) and isinstance(overlay, list) and len(chart) == len(overlay):
        return [
            line
            for index, (a, b) in enumerate(zip(chart, overlay))
            for line in differences(a, b, f"{path}[{index}]")
        ]
    return [] if chart == overlay else [f"{path}: chart {chart!r}, overlay {overlay!r}"]


def drift(
    chart: Iterable[Object],
    overlay: Iterable[Object],
    chart_only: Iterable[Key] = (),
    renamed: Mapping[str, str] = {},
) -> list[str]:
    """Every difference between the chart's objects and the overlay's: objects one of them
    lacks (but ``chart_only``'s), and fields, object by object. ``renamed`` maps an overlay's
    object names to the chart's (names the chart cannot take, e.g. a kustomize suffix)."""
    charted = by_key(chart)
    for name in chart_only:
        assert name in charted, f"the chart renders no {name}"
        del charted[name]
    overlaid = by_key(rename(item, renamed) for item in overlay)
    found = [f"{name}: only the overlay has it" for name in sorted(set(overlaid) - set(charted))]
    found += [f"{name}: only the chart has it" for name in sorted(set(charted) - set(overlaid))]
    for name in sorted(set(charted) & set(overlaid)):
        wanted = comparable_overlay_object(overlaid[name])
        got = comparable_chart_object(charted[name], wanted)
        found += [f"{name}: {line}" for line in differences(got, wanted)]
    return found


def rename(item: Object, renamed: Mapping[str, str]) -> Object:
    text = yaml.safe_dump(item)
    for old, new in renamed.items():
        text = re.sub(rf"\b{re.escape(old)}\b", new, text)
    loaded: Object = yaml.safe_load(text)
    return loaded
