"""The alert rules and the dashboard: promtool's check of every form they are shipped in (the
plain rule file, the metrics overlay's PrometheusRule; the chart's is checked in
tests/kube/test_chart.py), promtool's unit tests of each alert, and what each alert and panel
must say. tests/deploy/test_prometheus.py runs them in a real Prometheus."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import yaml

from tests.deploy.monitoring import (
    DASHBOARD,
    INSTALLED_EXAMPLES,
    MONITORING,
    OBSERVABILITY,
    PROMETHEUS_RULE,
    RULES,
    RULES_TESTS,
    alerting_rules,
    check_rules,
    dashboard_queries,
    documented_commands,
    documented_prometheus_config,
    promtool,
    runbook_base,
    shipped_rules,
)
from tests.deploy.test_manifests import (
    DEPLOY,
    assert_kubectl_kustomize_renders,
    kind_of,
    kustomize,
)
from tests.documented import slug

# How the descriptions name the node: the target's node label, else its instance.
NODE = "{{ with $labels.node }}{{ . }}{{ else }}{{ $labels.instance }}{{ end }}"
# The alerts of a cluster pool, which is not a node's: they name the pool and its publisher.
CLUSTER_POOL_ALERTS = {
    "TokenResourceClusterPoolExhausted",
    "TokenResourceClusterPoolLeadership",
    "TokenResourceClusterPoolNoSeats",
}


def test_the_rule_file_passes_promtools_check() -> None:
    assert f"SUCCESS: {len(alerting_rules(shipped_rules()))} rules found" in check_rules(RULES)


def test_promtools_check_can_fail(tmp_path: Path) -> None:
    broken = tmp_path / "broken.yml"
    broken.write_text(RULES.read_text().replace("token_resource_registered == 0", "== 0"))
    done = promtool("check", "rules", str(broken))
    assert done.returncode != 0
    assert "parse error" in done.stdout + done.stderr


def test_each_alert_fires_and_stays_quiet_in_promtools_unit_tests() -> None:
    done = promtool("test", "rules", RULES_TESTS.name)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout
    tests = yaml.safe_load(RULES_TESTS.read_text())
    assert tests["rule_files"] == [RULES.name]
    cases = [case for test in tests["tests"] for case in test["alert_rule_test"]]
    for rule in alerting_rules(shipped_rules()):
        outcomes = [
            bool(case["exp_alerts"]) for case in cases if case["alertname"] == rule["alert"]
        ]
        assert set(outcomes) == {True, False}, f"{rule['alert']}: {outcomes}"


def test_promtools_unit_tests_can_fail(tmp_path: Path) -> None:
    """A threshold changed without its test fails the tests."""
    (tmp_path / RULES.name).write_text(RULES.read_text().replace("for: 15m", "for: 5m"))
    (tmp_path / RULES_TESTS.name).write_text(RULES_TESTS.read_text())
    done = promtool("test", "rules", RULES_TESTS.name, cwd=tmp_path)
    assert done.returncode != 0
    assert "TokenResourcePoolExhausted" in done.stdout + done.stderr


def test_each_alert_says_what_where_and_links_its_own_runbook_section() -> None:
    anchors = {
        slug(line.removeprefix("### "))
        for line in OBSERVABILITY.read_text().splitlines()
        if line.startswith("### ")
    }
    rules = alerting_rules(shipped_rules())
    assert len({rule["alert"] for rule in rules}) == len(rules)
    # The labels the alerts carry, as their unit tests fire them.
    tests = yaml.safe_load(RULES_TESTS.read_text())["tests"]
    fired: dict[str, set[str]] = {}
    for case in (case for test in tests for case in test["alert_rule_test"]):
        for alert in case["exp_alerts"]:
            fired.setdefault(case["alertname"], set()).update(alert["exp_labels"])
    for rule in rules:
        name, annotations = rule["alert"], rule["annotations"]
        assert set(annotations) == {"summary", "description", "runbook_url"}, name
        assert rule["labels"]["severity"] in ("warning", "critical"), name
        assert "for" in rule, name
        runbook = annotations["runbook_url"]
        assert runbook == f"{runbook_base()}#{name.lower()}", name
        assert name.lower() in anchors, f"docs/observability.md has no section ### {name}"
        description = annotations["description"]
        if name in CLUSTER_POOL_ALERTS:
            assert "{{ $labels.resource }}" in description, name
        elif name != "TokenResourceMetricsAbsent":  # no agent, so no node to name
            assert NODE in description, name
        if "resource" in fired[name]:
            assert "{{ $labels.resource }}" in description, name


def test_the_overlays_prometheus_rule_is_the_rule_file_under_its_spec(tmp_path: Path) -> None:
    text = PROMETHEUS_RULE.read_text()
    _, spec = text.split("\nspec:\n", 1)
    indented = "".join(
        f"  {line}" if line.strip() else line for line in RULES.read_text().splitlines(True)
    )
    assert spec == indented, f"{PROMETHEUS_RULE} is stale: run `make prometheus-rule`"
    objects = kustomize(MONITORING)
    rule = kind_of(objects, "PrometheusRule", "token-resource")
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["metadata"]["namespace"] == "token-resource"
    assert rule["spec"] == shipped_rules()
    rendered = tmp_path / "spec.yml"
    rendered.write_text(yaml.safe_dump(rule["spec"]))
    check_rules(rendered)
    assert_kubectl_kustomize_renders(MONITORING, objects)


def test_the_dashboard_is_a_configmap_for_grafanas_sidecar() -> None:
    objects = kustomize(MONITORING)
    assert sorted(obj["kind"] for obj in objects) == ["ConfigMap", "PrometheusRule"]
    config_map = kind_of(objects, "ConfigMap", "token-resource-dashboard")
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(config_map["data"][DASHBOARD.name]) == json.loads(DASHBOARD.read_text())


def test_every_panel_queries_the_chosen_prometheus() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    (variable,) = dashboard["templating"]["list"]
    assert (variable["name"], variable["type"], variable["query"]) == (
        "datasource",
        "datasource",
        "prometheus",
    )
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(set(ids)) == len(ids)
    for panel in dashboard["panels"]:
        assert panel["targets"], panel["title"]
        for holder in (panel, *panel["targets"]):
            assert holder["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
    titles = " ".join(title for title, _ in dashboard_queries())
    shown = ("configured", "allocated", "healthy", "Cluster pools", "leads", "Reloads")
    for words in (*shown, "Kubelet restarts", "Probe duration"):
        assert words in titles, words


def test_the_documented_promtool_and_kubectl_commands_run() -> None:
    """docs/observability.md's promtool lines run as they are; its `kubectl apply -k`
    directories render (its helm line runs in tests/kube/test_chart.py)."""
    promtool_lines = documented_commands("promtool")
    assert len(promtool_lines) == 2, promtool_lines
    for line in promtool_lines:
        done = promtool(*shlex.split(line)[1:], cwd=DEPLOY.parents[1])
        assert done.returncode == 0, f"{line}:\n{done.stdout}{done.stderr}"
    applied = [shlex.split(line)[1:] for line in documented_commands("kubectl")]
    assert [args[:2] for args in applied] == [["apply", "-k"]] * 2, applied
    kinds = {obj["kind"] for args in applied for obj in kustomize(DEPLOY.parents[1] / args[2])}
    assert {"DaemonSet", "PrometheusRule", "ConfigMap"} <= kinds


def test_the_documented_prometheus_configuration_loads_the_installed_rules() -> None:
    """The packages' path (tests/packaging/test_rpm.py installs the files there); the
    configuration itself runs in tests/deploy/test_prometheus.py."""
    config = documented_prometheus_config()
    assert config["rule_files"] == [f"{INSTALLED_EXAMPLES}/{RULES.name}"]
    jobs = {job["job_name"] for job in config["scrape_configs"]}
    assert jobs == {"token-resource", "token-resource-publisher"}
