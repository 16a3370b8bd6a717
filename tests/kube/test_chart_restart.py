"""The chart rolls its pods for exactly the settings the agent applies only when it starts
(config/load.py's RESTART_ONLY, whose reload the agent refuses): each of them changes the
pods' checksum/restart-settings annotation, in the DaemonSet and the publisher's Deployment
alike; a change the agent applies live (a count, a cluster pool's nodes, a path it reads on
demand) leaves it, and reaches the running pods through the mounted ConfigMap."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.kube.chart import RESTART_ANNOTATION, Helm
from token_resource.config.load import RESTART_ONLY, parse_config

BASE = """\
[resources."example.com/token"]
count = 2
advertise = "dra"

[resources."example.com/license"]
count = 20
advertise = "dra"
scope = "cluster"

[kubernetes]
in_cluster = true
"""
# A value other than the default for each restart-only setting, as its table's line.
CHANGED = {
    "agent.device_plugin_dir": '[agent]\ndevice_plugin_dir = "/var/lib/kubelet/dp-elsewhere"',
    "metrics.textfile": '[metrics]\ntextfile = "/var/lib/node_exporter/token-resource.prom"',
    "metrics.listen": '[metrics]\nlisten = "0.0.0.0:9464"',
    "dra.driver": '[dra]\ndriver = "tokens.example.com"',
    "dra.plugins_registry_dir": '[dra]\nplugins_registry_dir = "/var/lib/kubelet/registry"',
    "dra.plugins_dir": '[dra]\nplugins_dir = "/var/lib/kubelet/dra-plugins"',
    "dra.cdi_dir": '[dra]\ncdi_dir = "/etc/cdi"',
}
# Changes a reload applies.
LIVE = {
    "a count": BASE.replace("count = 2", "count = 3"),
    "a cluster pool's nodes": BASE.replace(
        'scope = "cluster"', 'scope = "cluster"\nnodes = "example.com/licensed=true"'
    ),
    "the pod-resources socket": BASE
    + '[agent]\npod_resources_socket = "/var/lib/kubelet/pod-resources/other.sock"\n',
}


def checksum(helm: Helm, directory: Path, toml: str) -> str:
    """The annotation of the DaemonSet's and the publisher's pods, the same in both."""
    parse_config([(directory / "token-resource.toml", toml)])  # a file the agent accepts
    values = directory / "values.json"
    values.write_text(json.dumps({"config": {"toml": toml}}))
    found = {
        item["kind"]: item["spec"]["template"]["metadata"]["annotations"][RESTART_ANNOTATION]
        for item in helm.objects([values])
        if item["kind"] in ("DaemonSet", "Deployment")
    }
    assert sorted(found) == ["DaemonSet", "Deployment"], found
    assert found["DaemonSet"] == found["Deployment"], found
    digest: str = found["DaemonSet"]
    return digest


@pytest.mark.parametrize("setting", RESTART_ONLY)
def test_a_restart_only_setting_rolls_the_pods(helm: Helm, tmp_path: Path, setting: str) -> None:
    assert setting in CHANGED, f"{setting} is restart-only: give the chart's test a value for it"
    before = checksum(helm, tmp_path, BASE)
    assert checksum(helm, tmp_path, BASE + CHANGED[setting] + "\n") != before, setting


@pytest.mark.parametrize("change", sorted(LIVE))
def test_a_live_change_rolls_nothing(helm: Helm, tmp_path: Path, change: str) -> None:
    assert checksum(helm, tmp_path, LIVE[change]) == checksum(helm, tmp_path, BASE)
