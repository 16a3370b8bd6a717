"""One source of truth: the Helm chart, given an example values file, renders the objects the
matching kustomize overlay renders, field by field (the real helm and the real kubectl's
kustomize). Both are kept: the overlays for `kubectl apply -k`, the chart for Helm; a change to
one that the other lacks fails here. The DRA and node-status RBAC and admission policies are the
overlays' own files in both, and so are the cluster-pools publisher's (the chart reads them
through files/, links into deploy/kubernetes)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.kube.chart import DEPLOY, EXAMPLES, Helm, Key, drift, key, kustomize

# (values files, the overlay, the objects only the chart has: the overlays open no Service)
CASES: dict[str, tuple[tuple[str, ...], str, tuple[Key, ...]]] = {
    "base": ((), "base", ()),
    "example": (("example.yaml",), "overlays/example", ()),
    "metrics": (
        ("metrics.yaml",),
        "overlays/metrics",
        (("Service", "token-resource", "token-resource-metrics"),),
    ),
    "dra": (("dra.yaml",), "overlays/dra", ()),
    "node-status": (("node-status.yaml",), "overlays/node-status", ()),
    "cluster-pools": (("cluster-pools.yaml",), "overlays/cluster-pools", ()),
}
NAMESPACE = ("Namespace", "", "token-resource")
MONITORING = {
    ("PrometheusRule", "token-resource", "token-resource"),
    ("ConfigMap", "token-resource", "token-resource-dashboard"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_chart_renders_what_the_overlay_does(helm: Helm, case: str) -> None:
    """With `namespace.create` the chart renders the overlay's Namespace too."""
    values, overlay, chart_only = CASES[case]
    chart = helm.objects([EXAMPLES / name for name in values], settings=["namespace.create=true"])
    found = drift(chart, kustomize(DEPLOY / overlay), chart_only)
    assert not found, "\n".join(found)


def test_the_chart_renders_the_metrics_overlays_alerts_and_dashboard(helm: Helm) -> None:
    """overlays/metrics/monitoring: the PrometheusRule and the dashboard's ConfigMap, which the
    chart renders when asked (from the same files)."""
    settings = ["metrics.prometheusRule.enabled=true", "metrics.grafanaDashboard.enabled=true"]
    chart = helm.objects([EXAMPLES / "metrics.yaml"], settings=settings)
    monitoring = [item for item in chart if key(item) in MONITORING]
    assert len(monitoring) == len(MONITORING)
    found = drift(monitoring, kustomize(DEPLOY / "overlays" / "metrics" / "monitoring"))
    assert not found, "\n".join(found)


def test_two_releases_render_the_node_pools_overlay(helm: Helm) -> None:
    """overlays/node-pools: a release per pool, with its nodeSelector. Helm names a release's
    ClusterRole <release>-nodes where kustomize's suffix makes it token-resource-nodes-<pool>."""
    chart = [
        item
        for pool in ("large", "small")
        for item in helm.objects([EXAMPLES / f"pool-{pool}.yaml"], release=f"token-resource-{pool}")
    ]
    renamed = {
        f"token-resource-nodes-{pool}": f"token-resource-{pool}-nodes"
        for pool in ("large", "small")
    }
    overlay = [
        item
        for item in kustomize(DEPLOY / "overlays" / "node-pools")
        if item["kind"] != "Namespace"
    ]
    found = drift(chart, overlay, renamed=renamed)
    assert not found, "\n".join(found)


def test_a_drift_is_found(helm: Helm, tmp_path: Path) -> None:
    """The comparison can fail: a count and a probe period changed in the chart's values."""
    changed = tmp_path / "changed.yaml"
    changed.write_text(
        'config:\n  toml: |\n    [resources]\n    "example.com/token" = 3\n'
        "    [kubernetes]\n    in_cluster = true\n"
        "probes:\n  liveness:\n    periodSeconds: 31\n"
    )
    chart = helm.objects([changed])
    found = drift(
        chart, [item for item in kustomize(DEPLOY / "base") if item["kind"] != "Namespace"]
    )
    daemonset = ("DaemonSet", "token-resource", "token-resource")
    configmap = ("ConfigMap", "token-resource", "token-resource")
    assert found == [
        f"{configmap}: data.token-resource.toml.resources.example.com/token: chart 3, overlay 2",
        f"{daemonset}: spec.template.spec.containers[0].livenessProbe.periodSeconds: "
        "chart 31, overlay 30",
    ], found
