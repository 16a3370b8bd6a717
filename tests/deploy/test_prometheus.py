"""The shipped alerts and dashboard in a real Prometheus (Debian 12's 2.42, started here with
its own configuration and storage under tmp_path, on a port the kernel picks) scraping a real
agent against the kubelet stand-ins and a real publisher of a cluster pool against the API
server stand-in, as docs/observability.md configures it.

The rules are the shipped file with one documented rewrite: every rule's `for` becomes
FOR_SECONDS (its minutes are no test's to wait), so each alert still goes pending, then firing.
The expressions, their windows and the annotations are the shipped ones."""

from __future__ import annotations

import json
import re
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.monitoring import (
    alerting_rules,
    dashboard_queries,
    documented_prometheus_config,
    runbook_base,
    shipped_rules,
    tool,
)
from tests.harness import AgentProcess
from tests.observe.test_metrics import eventually, start_path_probed
from tests.observe.test_status import LICENSE
from tests.publisher.cluster_publishers import (
    PUBLISHER_RULES,
    account,
    publisher_config,
)
from tests.standin.apiserver import ApiServerStandin, CertificateAuthority
from tests.standin.kubelet import KubeletStandin, serves_exactly
from tests.standin.podresources import PodResourcesStandin

TIMEOUT = 30.0
# The rewritten `for` (above), and the scrape and evaluation interval.
FOR_SECONDS = 3
INTERVAL = "1s"
# Grafana's window of the rate panels, filled in as Grafana would (a few scrapes).
RATE_INTERVAL = "15s"
# Only a DRA node's agent counts prepares (tests/dra/test_dra.py reads it from a real one).
DRA_ONLY = {"token_resource_dra_prepares_total"}
METRIC = re.compile(r"\btoken_resource_\w+")
# Where 2.42 says which port it got for 127.0.0.1:0.
LISTENING = re.compile(r'msg="Listening on" address=(127\.0\.0\.1:\d+)')


@dataclass
class Prometheus:
    url: str

    def api(self, path: str, **query: str) -> Any:
        address = f"{self.url}/api/v1/{path}?{urllib.parse.urlencode(query)}"
        with urllib.request.urlopen(address, timeout=TIMEOUT) as response:
            answer = json.loads(response.read())
        assert answer["status"] == "success", answer
        return answer["data"]

    def ready(self) -> bool:
        """/-/ready: its API answers 503 from "Listening on" until the TSDB is open and the
        configuration loaded ("Server is ready to receive web requests")."""
        try:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=TIMEOUT) as response:
                return bool(response.status == 200)
        except urllib.error.HTTPError as refused:
            if refused.code != 503:
                raise
            return False

    def alerts(self) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = self.api("alerts")["alerts"]
        return found


def metrics_url(process: AgentProcess) -> str:
    found = re.search(r"metrics: serving http://(127\.0\.0\.1:\d+)/metrics", process.log())
    assert found, process.log()
    return found[1]


def rules_for_the_test(directory: Path) -> Path:
    """The shipped rules, each `for` FOR_SECONDS (the module's docstring says why)."""
    groups = shipped_rules()
    for rule in alerting_rules(groups):
        rule["for"] = f"{FOR_SECONDS}s"
    path = directory / "token-resource.rules.yml"
    path.write_text(yaml.safe_dump(groups))
    return path


@pytest.fixture
def apiserver(ca: CertificateAuthority) -> Iterator[ApiServerStandin]:
    with ApiServerStandin(ca, nodes=("node-a",)) as standin:
        yield standin


@pytest.fixture
def publisher(apiserver: ApiServerStandin, tmp_path: Path) -> Iterator[AgentProcess]:
    """The one publisher of a cluster pool of 5 seats: its leader."""
    apiserver.add_token("token-p0", user=account("p0"), rules=PUBLISHER_RULES)
    kubeconfig = apiserver.write_kubeconfig(tmp_path / "p0.conf", token="token-p0")
    process = AgentProcess(tmp_path / "p0", tmp_path / "unused", role="publisher")
    metrics = '[metrics]\nlisten = "127.0.0.1:0"\n'
    process.write_config(publisher_config(kubeconfig, 5, resources=("example.com/seat",)) + metrics)
    try:
        process.start()
        yield process
    finally:
        process.kill()


@pytest.fixture
def devices(
    agent: AgentProcess, kubelet: KubeletStandin, pod_resources: PodResourcesStandin, tmp_path: Path
) -> Path:
    """The agent with two license tokens, each probed by a file of its own every second."""
    directory = tmp_path / "dev"
    start_path_probed(agent, pod_resources, directory, 2, present=(0, 1))
    kubelet.wait_for(serves_exactly({LICENSE: 2}))
    return directory


@pytest.fixture
def prometheus(
    agent: AgentProcess, devices: Path, publisher: AgentProcess, tmp_path: Path
) -> Iterator[Prometheus]:
    """docs/observability.md's configuration: its targets those of the agent and the
    publisher, its rules file the test's, every interval INTERVAL."""
    settings = documented_prometheus_config()
    settings["global"] = {"scrape_interval": INTERVAL, "evaluation_interval": INTERVAL}
    settings["rule_files"] = [str(rules_for_the_test(tmp_path))]
    jobs = {job["job_name"]: job for job in settings["scrape_configs"]}
    targets = {"token-resource": agent, "token-resource-publisher": publisher}
    assert set(jobs) == set(targets)
    for name, target in targets.items():
        jobs[name]["static_configs"] = [{"targets": [metrics_url(target)]}]
    path = tmp_path / "prometheus.yml"
    path.write_text(yaml.safe_dump(settings))
    log = tmp_path / "prometheus.log"
    command = [
        tool("prometheus"),
        f"--config.file={path}",
        f"--storage.tsdb.path={tmp_path / 'data'}",
        # 2.42 takes port 0 and logs the port it got ("Listening on").
        "--web.listen-address=127.0.0.1:0",
    ]
    with log.open("w") as output:
        process = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT)
    try:
        listening = eventually(
            log.read_text,
            lambda text: process.poll() is not None or LISTENING.search(text) is not None,
            "prometheus's log",
        )
        found = LISTENING.search(listening)
        assert found, listening
        server = Prometheus(f"http://{found[1]}")
        eventually(server.ready, bool, "prometheus ready")
        eventually(
            lambda: server.api("targets")["activeTargets"],
            lambda active: len(active) == 2 and all(t["health"] == "up" for t in active),
            "both targets up",
        )
        # Before the first scrape TokenResourceMetricsAbsent may be pending, or even firing.
        eventually(server.alerts, lambda alerts: alerts == [], "no alert once scraped")
        yield server
    finally:
        process.terminate()
        try:
            process.wait(TIMEOUT)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def alerts_named(names: set[str]) -> Callable[[list[dict[str, Any]]], bool]:
    """All of ``names`` firing."""
    return lambda alerts: (
        names <= {alert["labels"]["alertname"] for alert in alerts if alert["state"] == "firing"}
    )


def test_alerts_fire_and_resolve_and_every_panel_shows_series(
    prometheus: Prometheus,
    pod_resources: PodResourcesStandin,
    devices: Path,
) -> None:
    # The pool exhausted, then a token's probe failing.
    pod_resources.admit_pod("default", "web-1", "app", LICENSE, 2)
    (devices / "ttyUSB1").unlink()
    expected = {"TokenResourcePoolExhausted", "TokenResourceTokensUnhealthy"}
    # Each alert's states in the order the polls saw them, a state once per change.
    seen: dict[str, list[str]] = {}

    def read() -> list[dict[str, Any]]:
        alerts = prometheus.alerts()
        for alert in alerts:
            states = seen.setdefault(alert["labels"]["alertname"], [])
            if states[-1:] != [alert["state"]]:
                states.append(alert["state"])
        return alerts

    alerts = eventually(read, alerts_named(expected), "the alerts firing")
    fired_by = time.time()
    # Nothing else fired meanwhile; each was pending, then firing (a pending lasts FOR_SECONDS
    # and more, the polls come every 0.05 s: no poll can miss it).
    assert seen == {name: ["pending", "firing"] for name in expected}, seen
    firing = {alert["labels"]["alertname"]: alert for alert in alerts}
    for name in expected:
        alert = firing[name]
        assert alert["labels"]["resource"] == LICENSE
        assert alert["labels"]["job"] == "token-resource"
        node = alert["labels"]["instance"]
        assert f"{LICENSE} on node {node}" in alert["annotations"]["description"], alert
        assert alert["annotations"]["runbook_url"] == f"{runbook_base()}#{name.lower()}"
        # Prometheus's own record of the pending: active since FOR_SECONDS before firing.
        assert fired_by - unix_time(alert["activeAt"]) >= FOR_SECONDS, (alert, fired_by)
    assert firing["TokenResourceTokensUnhealthy"]["value"] in ("1", "1e+00")
    assert "All 2 token(s)" in firing["TokenResourcePoolExhausted"]["annotations"]["description"]

    check_panels(prometheus)

    (devices / "ttyUSB1").touch()
    pod_resources.remove_pod("default", "web-1")
    eventually(prometheus.alerts, lambda alerts: alerts == [], "the alerts resolved")


def unix_time(rfc3339: str) -> float:
    """Prometheus's times (nanoseconds, Z), as Python 3.9's fromisoformat takes them."""
    text = re.sub(r"(\.\d{6})\d*", r"\1", rfc3339).replace("Z", "+00:00")
    return datetime.fromisoformat(text).timestamp()


def check_panels(prometheus: Prometheus) -> None:
    """Each panel's query returns series; each metric of the rules and the dashboard exists."""
    for title, expr in dashboard_queries():
        query = expr.replace("$__rate_interval", RATE_INTERVAL)
        result = prometheus.api("query", query=query)["result"]
        assert result, f"panel {title!r}: {query} returned no series"
    names = set(prometheus.api("label/__name__/values"))
    used = {
        name
        for text in [json.dumps(shipped_rules()), *(expr for _, expr in dashboard_queries())]
        for name in METRIC.findall(text)
    }
    histograms = {name for name in names if name.endswith("_bucket")}
    missing = used - names - DRA_ONLY - histograms
    assert not missing, sorted(missing)
