"""The Helm chart with the real helm (built by `make kube-programs`): lint, the rendered
objects of every example values file, the schema refusing bad values, the package."""

from __future__ import annotations

import shlex
import tarfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.monitoring import (
    DASHBOARD,
    RULES,
    check_rules,
    documented_commands,
    shipped_rules,
)
from tests.kube.chart import CHART, DEPLOY, EXAMPLES, ROOT, Helm, by_key, documents
from token_resource._compat import tomllib
from token_resource.apiserver.objects.slices import device_class

EXAMPLE_FILES = sorted(EXAMPLES.glob("*.yaml"))
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
AGENT_KINDS = ["ClusterRole", "ClusterRoleBinding", "ConfigMap", "DaemonSet", "ServiceAccount"]
DRA_KINDS = [
    "ClusterRole",
    "ClusterRoleBinding",
    "DeviceClass",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
]


def daemonset(objects: list[dict[str, Any]]) -> dict[str, Any]:
    (found,) = [item for item in objects if item["kind"] == "DaemonSet"]
    return found


def test_the_chart_has_the_projects_version() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert (chart["apiVersion"], chart["version"], chart["appVersion"]) == ("v2", VERSION, VERSION)


@pytest.mark.parametrize(
    "values", [None, *EXAMPLE_FILES], ids=lambda path: getattr(path, "name", "defaults")
)
def test_lint_strict(helm: Helm, values: Path | None) -> None:
    args = ["lint", "--strict", str(CHART)] + (["--values", str(values)] if values else [])
    printed = helm.output(*args)
    assert "1 chart(s) linted, 0 chart(s) failed" in printed, printed


@pytest.mark.parametrize(
    "values", [None, *EXAMPLE_FILES], ids=lambda path: getattr(path, "name", "defaults")
)
def test_every_mode_rolls_the_new_pod_first_with_its_uid_as_instance(
    helm: Helm, values: Path | None
) -> None:
    spec = daemonset(helm.objects([values] if values else []))["spec"]
    assert spec["updateStrategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1},
    }
    (container,) = spec["template"]["spec"]["containers"]
    env = {item["name"]: item["valueFrom"]["fieldRef"]["fieldPath"] for item in container["env"]}
    assert env == {"NODE_NAME": "spec.nodeName", "TOKEN_RESOURCE_INSTANCE": "metadata.uid"}


def test_the_device_plugin_example(helm: Helm) -> None:
    """A release named otherwise: the names follow it, the selector is the release's own."""
    objects = helm.objects([EXAMPLES / "example.yaml"], release="tokens", namespace="infra")
    assert sorted(item["kind"] for item in objects) == AGENT_KINDS
    assert {item["metadata"]["name"] for item in objects} == {
        "tokens-token-resource",
        "tokens-token-resource-nodes",
    }
    for item in objects:
        labels = item["metadata"]["labels"]
        assert labels["app.kubernetes.io/instance"] == "tokens", item
        assert labels["helm.sh/chart"] == f"token-resource-{VERSION}", item
    pod = daemonset(objects)["spec"]["template"]
    assert pod["metadata"]["labels"] == {
        "app.kubernetes.io/name": "token-resource",
        "app.kubernetes.io/instance": "tokens",
    }
    assert pod["spec"]["containers"][0]["image"] == "registry.example.com/token-resource:0.1.0"
    (binding,) = [item for item in objects if item["kind"] == "ClusterRoleBinding"]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "tokens-token-resource", "namespace": "infra"}
    ]
    (configmap,) = [item for item in objects if item["kind"] == "ConfigMap"]
    # The structured values, written as TOML: whole numbers stay integers.
    assert tomllib.loads(configmap["data"]["token-resource.toml"]) == {
        "resources": {
            "example.com/token": 2,
            "example.com/license": {"count": 5, "env": "LICENSE_SEATS"},
        },
        "kubernetes": {"in_cluster": True},
    }


def test_the_image_tag_defaults_to_the_app_version(helm: Helm) -> None:
    pod = daemonset(helm.objects(settings=["imagePullSecrets[0].name=registry"]))["spec"][
        "template"
    ]
    assert pod["spec"]["containers"][0]["image"] == f"localhost/token-resource:{VERSION}"
    assert pod["spec"]["imagePullSecrets"] == [{"name": "registry"}]


def test_the_dra_example(helm: Helm) -> None:
    """The DeviceClass as `token-resource device-classes` makes it; the admission policies
    hold the release's own account (in its own namespace) to its node."""
    objects = helm.objects([EXAMPLES / "dra.yaml"], release="tr", namespace="infra")
    assert sorted(item["kind"] for item in objects) == sorted(AGENT_KINDS + DRA_KINDS)
    (deviceclass,) = [item for item in objects if item["kind"] == "DeviceClass"]
    del deviceclass["metadata"]["labels"]
    assert deviceclass == device_class("tokens.example.com", "example.com/token")
    assert deviceclass["spec"]["extendedResourceName"] == "example.com/token"
    policies = [item for item in objects if item["kind"] == "ValidatingAdmissionPolicy"]
    assert sorted(item["metadata"]["name"] for item in policies) == [
        "tr-token-resource-own-node-pod-nudges",
        "tr-token-resource-own-node-slices",
    ]
    for policy in policies:
        (condition,) = policy["spec"]["matchConditions"]
        assert condition["expression"] == (
            'request.userInfo.username == "system:serviceaccount:infra:tr-token-resource"'
        )
    bindings = [item for item in objects if item["kind"] == "ValidatingAdmissionPolicyBinding"]
    assert sorted(item["spec"]["policyName"] for item in bindings) == sorted(
        item["metadata"]["name"] for item in policies
    )
    mounts = daemonset(objects)["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]
    assert [mount["mountPath"] for mount in mounts][-3:] == [
        "/var/lib/kubelet/plugins_registry",
        "/var/lib/kubelet/plugins",
        "/var/run/cdi",
    ]


NODE_STATUS_KINDS = [
    "ClusterRole",
    "ClusterRoleBinding",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
]


def test_the_node_status_example(helm: Helm) -> None:
    """The overlay's RBAC and policy, named after the release and holding its own account; the
    DaemonSet as for device plugins (nothing to mount)."""
    objects = helm.objects([EXAMPLES / "node-status.yaml"], release="tr", namespace="infra")
    assert sorted(item["kind"] for item in objects) == sorted(AGENT_KINDS + NODE_STATUS_KINDS)
    (policy,) = [item for item in objects if item["kind"] == "ValidatingAdmissionPolicy"]
    assert policy["metadata"]["name"] == "tr-token-resource-own-node-status"
    (condition,) = policy["spec"]["matchConditions"]
    assert condition["expression"] == (
        'request.userInfo.username == "system:serviceaccount:infra:tr-token-resource"'
    )
    (binding,) = [item for item in objects if item["kind"] == "ValidatingAdmissionPolicyBinding"]
    assert binding["spec"]["policyName"] == policy["metadata"]["name"]
    roles = by_key(item for item in objects if item["kind"] == "ClusterRole")
    assert roles["ClusterRole", "", "tr-token-resource-node-status"]["rules"] == [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["patch"]},
        {"apiGroups": [""], "resources": ["nodes/status"], "verbs": ["patch"]},
    ]
    bindings = by_key(item for item in objects if item["kind"] == "ClusterRoleBinding")
    assert bindings["ClusterRoleBinding", "", "tr-token-resource-node-status"]["subjects"] == [
        {"kind": "ServiceAccount", "name": "tr-token-resource", "namespace": "infra"}
    ]
    plain = daemonset(helm.objects([EXAMPLES / "example.yaml"], release="tr", namespace="infra"))
    mounts = daemonset(objects)["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]
    assert mounts == plain["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]


def test_the_node_status_objects_only_when_asked(helm: Helm) -> None:
    """No node-status resource, no permission to write a Node; nodeStatus.enabled keeps it
    while the last of them leave the configuration."""
    assert sorted(item["kind"] for item in helm.objects()) == AGENT_KINDS
    kept = helm.objects(settings=["nodeStatus.enabled=true"])
    assert sorted(item["kind"] for item in kept) == sorted(AGENT_KINDS + NODE_STATUS_KINDS)


def test_device_class_names_follow_the_agents_rule(helm: Helm, tmp_path: Path) -> None:
    """Names that are no DNS label get the agent's digest, as device_class() makes them."""
    names = ["example.com/token", "example.com/Big_Token", "example.com/a.b", "example.com/-x-"]
    values = tmp_path / "values.yaml"
    values.write_text(
        yaml.safe_dump(
            {
                "config": {
                    "values": {
                        "resources": {name: {"count": 1, "advertise": "dra"} for name in names},
                        "dra": {"driver": "d.example.com"},
                    }
                }
            }
        )
    )
    classes = [item for item in helm.objects([values]) if item["kind"] == "DeviceClass"]
    for item in classes:
        del item["metadata"]["labels"]
    wanted = [device_class("d.example.com", name) for name in names]
    assert by_key(classes) == by_key(wanted)


def test_metrics_and_the_monitors_only_when_asked(helm: Helm) -> None:
    metrics = EXAMPLES / "metrics.yaml"
    kinds = {item["kind"] for item in helm.objects([metrics])}
    assert "Service" in kinds
    assert not kinds & {"ServiceMonitor", "PodMonitor"}
    assert "Service" not in {item["kind"] for item in helm.objects()}
    asked = helm.objects(
        [metrics],
        settings=["metrics.serviceMonitor.enabled=true", "metrics.podMonitor.enabled=true"],
    )
    monitors = by_key(item for item in asked if item["kind"].endswith("Monitor"))
    service = monitors["ServiceMonitor", "token-resource", "token-resource"]
    # Each target labelled with its pod's node, which the alerts and the dashboard name.
    node = [{"sourceLabels": ["__meta_kubernetes_pod_node_name"], "targetLabel": "node"}]
    assert service["spec"]["endpoints"] == [
        {"port": "metrics", "path": "/metrics", "relabelings": node}
    ]
    pod = monitors["PodMonitor", "token-resource", "token-resource"]
    assert pod["spec"]["podMetricsEndpoints"] == [
        {"targetPort": 9464, "path": "/metrics", "relabelings": node}
    ]
    annotations = daemonset(asked)["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/port"] == "9464"


def test_the_alerts_and_the_dashboard_only_when_asked(helm: Helm, tmp_path: Path) -> None:
    """The PrometheusRule's spec is the rule file (promtool checks it as the chart renders
    it), the dashboard ConfigMap's file the dashboard, labelled for Grafana's sidecar."""
    metrics = EXAMPLES / "metrics.yaml"
    kinds = {item["kind"] for item in helm.objects([metrics])}
    assert "PrometheusRule" not in kinds
    assert "token-resource-dashboard" not in {item["metadata"]["name"] for item in helm.objects()}
    asked = by_key(
        helm.objects(
            [metrics],
            settings=[
                "metrics.prometheusRule.enabled=true",
                "metrics.prometheusRule.labels.release=monitoring",
                "metrics.grafanaDashboard.enabled=true",
            ],
        )
    )
    rule = asked["PrometheusRule", "token-resource", "token-resource"]
    assert rule["metadata"]["labels"]["release"] == "monitoring"
    assert rule["spec"] == shipped_rules()
    rendered = tmp_path / "chart.rules.yml"
    rendered.write_text(yaml.safe_dump(rule["spec"]))
    check_rules(rendered)
    dashboard = asked["ConfigMap", "token-resource", "token-resource-dashboard"]
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert dashboard["data"] == {DASHBOARD.name: DASHBOARD.read_text()}


def test_the_observability_docs_helm_line_renders_the_alerts_and_the_dashboard(
    helm: Helm,
) -> None:
    """docs/observability.md's `helm install`, as `helm template` (its objects need the
    Prometheus Operator's CRDs, which no API server here has)."""
    (line,) = documented_commands("helm")
    args = [str(ROOT / arg) if arg.startswith("deploy/") else arg for arg in shlex.split(line)[1:]]
    assert args[0] == "install"
    objects = by_key(documents(helm.output("template", *args[1:])))
    rule = objects["PrometheusRule", "token-resource", "token-resource"]
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert ("PodMonitor", "token-resource", "token-resource") in objects
    assert ("ConfigMap", "token-resource", "token-resource-dashboard") in objects


# Each refusal names the value: the schema's by its path, the templates' in words.
REFUSALS = {
    "image.pullPolicy=Sometimes": (
        "at '/image/pullPolicy': value must be one of 'Always', 'IfNotPresent', 'Never'"
    ),
    "replicas=2": "at '': additional properties 'replicas' not allowed",
    "probes.liveness.periodSeconds=0": "at '/probes/liveness/periodSeconds': minimum: got 0",
    "nodeSelector.pool=1": "at '/nodeSelector/pool': got number, want string",
    "config.toml=[resources": "config: not valid TOML: toml: line 1",
    "nodeStatus.enabled=yes": "at '/nodeStatus/enabled': got string, want boolean",
    "metrics.podMonitor.enabled=true": (
        "metrics.serviceMonitor/podMonitor: the configuration has no [metrics] listen"
    ),
    "metrics.prometheusRule.enabled=true": (
        "metrics.prometheusRule/grafanaDashboard: the configuration has no [metrics] listen"
    ),
    "metrics.grafanaDashboard.enabled=1": (
        "at '/metrics/grafanaDashboard/enabled': got number, want boolean"
    ),
}


@pytest.mark.parametrize("setting", sorted(REFUSALS))
def test_a_bad_value_is_refused_by_name(helm: Helm, setting: str) -> None:
    done = helm.run("template", "token-resource", str(CHART), "--set", setting)
    assert done.returncode == 1, done.stdout
    assert REFUSALS[setting] in done.stderr, done.stderr


def test_both_config_forms_are_refused(helm: Helm) -> None:
    done = helm.run(
        "template",
        "token-resource",
        str(CHART),
        "--set",
        "config.toml=x",
        "--set",
        "config.values.kubernetes.in_cluster=true",
    )
    assert done.returncode == 1
    assert "set config.toml or config.values, not both" in done.stderr, done.stderr


# Each mode's oldest Kubernetes (DRA's resource.k8s.io/v1, the node-status policy's
# admissionregistration.k8s.io/v1 ValidatingAdmissionPolicy) and the release before it.
OLDEST = {
    "dra.yaml": ("1.34.0", "1.33.0", "DRA resources (example.com/token) need Kubernetes 1.34"),
    "node-status.yaml": ("1.30.0", "1.29.0", "node-status resources need Kubernetes 1.30"),
}


@pytest.mark.parametrize("values", sorted(OLDEST))
def test_a_mode_needs_its_kubernetes(helm: Helm, values: str) -> None:
    oldest, older, refusal = OLDEST[values]
    args = ["template", "token-resource", str(CHART), "-f", str(EXAMPLES / values)]
    done = helm.run(*args, "--kube-version", older)
    assert done.returncode == 1
    assert f"{refusal} or newer, not v{older}" in done.stderr, done.stderr
    assert helm.run(*args, "--kube-version", oldest).returncode == 0


def test_the_package_holds_the_overlays_files(helm: Helm, tmp_path: Path) -> None:
    """`make chart`'s package, with the overlays' files in it (files/ links there)."""
    helm.output("package", str(CHART), "--destination", str(tmp_path))
    package = tmp_path / f"token-resource-{VERSION}.tgz"
    with tarfile.open(package) as archive:
        linked = {
            f"{overlay}-{name}": f"{overlay}/{name}"
            for overlay in ("dra", "node-status")
            for name in ("admission.yaml", "rbac.yaml")
        }
        for name in ("publisher-admission.yaml", "publisher-rbac.yaml"):
            linked[name] = f"cluster-pools/{name}"
        for path in (RULES, DASHBOARD):
            linked[path.name] = path.relative_to(DEPLOY / "overlays").as_posix()
        for packed_name, overlay_file in linked.items():
            packed = archive.extractfile(f"token-resource/files/{packed_name}")
            assert packed is not None
            assert packed.read().decode() == (DEPLOY / "overlays" / overlay_file).read_text()
