"""The Ansible role writes every key of the file: its argument specs and its filter know the
agent's keys (config/sections.py's, compared here, so a new key fails this test until the
role has it), its template renders nested tables and arrays as TOML, and what it renders with
every key set is what the agent's own parser reads (the role's template run by
ansible-playbook). Its verify step's comparison with ``status --json`` is checked on the
agent's own report."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.packaging.local_playbook import ROLE, run_playbook
from tests.scripts import load_script
from token_resource._compat import tomllib
from token_resource.config import sections
from token_resource.config.load import load_config
from token_resource.config.model import ADVERTISE_MODES
from token_resource.observe.report import ResourceReport, StatusReport

pytestmark = pytest.mark.timeout(600)

FILTER = load_script(ROLE / "filter_plugins/token_resource.py", "token_resource")
SPECS = yaml.safe_load((ROLE / "meta/argument_specs.yml").read_text())
OPTIONS = SPECS["argument_specs"]["main"]["options"]

EVERY_KEY: dict[str, Any] = {
    "token_resource_agent": {
        "device_plugin_dir": "/srv/kubelet/device-plugins",
        "pod_resources_socket": "/srv/kubelet/pod-resources/kubelet.sock",
    },
    "token_resource_kubernetes": {
        "kubeconfig": "/etc/kubernetes/kubelet.conf",
        "node_name": "node-1",
        "resync_seconds": 30,
        "lease_namespace": "token-resource",
        "lease_duration_seconds": 20,
        "renew_deadline_seconds": 12,
        "retry_period_seconds": 3,
    },
    "token_resource_metrics": {
        "listen": "127.0.0.1:9464",
        "textfile": "/var/lib/node_exporter/token-resource.prom",
    },
    "token_resource_dra": {
        "driver": "tokens.example.com",
        "plugins_registry_dir": "/srv/kubelet/plugins_registry",
        "plugins_dir": "/srv/kubelet/plugins",
        "cdi_dir": "/run/cdi",
    },
    "token_resource_resources": {
        "example.com/token": 2,
        "example.com/license": {"count": 5, "env": "LICENSE_SEATS"},
        "example.com/quota": {"count": 7, "advertise": "node-status"},
        "example.com/seat": {
            "count": 3,
            "advertise": "dra",
            "probe": {"command": ["/usr/bin/test", "-e", "/run/ok"], "interval": 30},
        },
        "example.com/pool": {
            "count": 4,
            "advertise": "dra",
            "scope": "cluster",
            "nodes": "license-zone in (a,b)",
        },
    },
}


def test_the_argument_specs_name_every_key_of_each_table() -> None:
    tables = {
        "token_resource_agent": sections.AGENT_KEYS,
        "token_resource_kubernetes": sections.KUBERNETES_KEYS,
        "token_resource_metrics": sections.METRICS_KEYS,
        "token_resource_dra": sections.DRA_KEYS,
    }
    for variable, keys in tables.items():
        assert set(OPTIONS[variable]["options"]) == keys, variable
    assert set(EVERY_KEY) <= set(OPTIONS)


def test_the_filter_takes_every_key_and_mode_of_a_resource() -> None:
    assert set(FILTER.RESOURCE_KEYS) == sections.RESOURCE_KEYS
    assert set(FILTER.ADVERTISE_MODES) == set(ADVERTISE_MODES)
    assert FILTER.token_resource_problems(EVERY_KEY["token_resource_resources"]) == []
    problems = FILTER.token_resource_problems({"example.com/x": {"count": 1, "probes": {}}})
    assert problems == [
        'token_resource_resources["example.com/x"]: unknown key(s) probes; allowed: '
        "advertise, count, env, nodes, probe, scope"
    ]


@pytest.mark.parametrize(
    "value",
    [
        "plain",
        'a "quoted" \\ back\tslash\nline, non-ASCII: ü',
        0,
        -3,
        2.5,
        True,
        False,
        ["/usr/bin/test", "-e", "/run/ok"],
        [],
        {"command": ["true"], "interval": 30, "odd key": "x"},
        {"nested": {"list": [1, 2]}},
        {},
    ],
)
def test_a_value_is_written_as_the_toml_it_reads_back(value: object) -> None:
    assert tomllib.loads(f"key = {FILTER.token_resource_toml(value)}\n") == {"key": value}


def test_the_template_writes_every_key_as_the_agent_reads_it() -> None:
    play = [
        {
            "hosts": "all",
            "gather_facts": False,
            "tasks": [
                {
                    "ansible.builtin.template": {
                        "src": str(ROLE / "templates/token-resource.toml.j2"),
                        "dest": "{{ out_dir }}/token-resource.toml",
                        "mode": "0644",
                    }
                }
            ],
        }
    ]
    with tempfile.TemporaryDirectory(prefix="ansible-keys-") as tmp:
        directory = Path(tmp)
        run_playbook(play, {"node": EVERY_KEY}, directory)
        config = load_config(directory / "token-resource.toml")
    assert config.agent.device_plugin_dir == Path("/srv/kubelet/device-plugins")
    assert config.kubernetes.lease_namespace == "token-resource"
    assert config.kubernetes.renew_deadline == 12
    assert config.metrics.listen is not None
    assert config.dra.driver == "tokens.example.com"
    assert config.dra.cdi_dir == Path("/run/cdi")
    assert {name: spec.count for name, spec in config.resources.items()} == {
        "example.com/token": 2,
        "example.com/license": 5,
        "example.com/quota": 7,
        "example.com/seat": 3,
        "example.com/pool": 4,
    }
    seat, pool = config.resources["example.com/seat"], config.resources["example.com/pool"]
    assert seat.probe is not None
    assert seat.probe.interval == 30
    assert pool.cluster_scoped
    assert config.resources["example.com/license"].env == "LICENSE_SEATS"


def report(resources: list[ResourceReport], summary: str = "ready") -> str:
    return json.dumps(StatusReport(summary, "/pod-resources", None, tuple(resources)).to_json())


def test_verify_compares_the_agents_report_with_the_inventory() -> None:
    unserved = FILTER.token_resource_unserved
    wanted = {"example.com/token": 2, "example.com/seat": {"count": 3, "advertise": "dra"}}
    token = ResourceReport("example.com/token", 2, "device-plugin", True, ())
    seat = ResourceReport("example.com/seat", 3, "dra", True, ())
    assert unserved(report([token, seat]), wanted) == []
    waiting = ResourceReport("example.com/seat", 3, "dra", False, ())
    assert unserved(report([token, waiting]), wanted) == [
        "example.com/seat: not registered with the kubelet (dra)"
    ]
    assert unserved(report([token, waiting]), wanted, False) == []
    fewer = ResourceReport("example.com/token", 1, "device-plugin", True, ())
    assert unserved(report([fewer, seat]), wanted) == ["example.com/token: count 1, not 2"]
    assert unserved(report([token]), wanted) == ["example.com/seat: not served"]
    assert unserved("older agent's text", wanted)[0].startswith("the agent's status is not JSON")
    quota = {"example.com/quota": {"count": 7, "advertise": "node-status"}}
    node = ResourceReport("example.com/quota", 7, "node-status", None, None)
    pending = report([node], "no device-plugin resources; node status of node-1: pending")
    assert unserved(pending, quota) == [
        "node status of example.com/quota not accepted: "
        "no device-plugin resources; node status of node-1: pending"
    ]
    accepted = report([node], "no device-plugin resources; node status of node-1: accepted (x)")
    assert unserved(accepted, quota) == []
