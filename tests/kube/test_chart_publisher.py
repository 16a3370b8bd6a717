"""The Helm chart's cluster-pools publisher (clusterPools.publisher) with the real helm: when it
is installed, its Deployment, account, PodDisruptionBudget, RBAC and admission policy named
after the release and its configured driver, and the values it refuses. (Field by field against
the overlay: test_chart_overlays.py; its policy on the real API server: test_cp_chart.py.)"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.test_manifests_cluster_pools import PUBLISHER_SECURITY_CONTEXT
from tests.kube.chart import CHART, EXAMPLES, Helm, by_key
from tests.kube.test_chart import AGENT_KINDS, DRA_KINDS, daemonset
from token_resource.apiserver.keeping.cluster_slices import lease_name

EXAMPLE = EXAMPLES / "cluster-pools.yaml"
CHART_APP_VERSION = yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"]
OVERLAYS_DRIVER = "tokens.example.com"
PUBLISHER_KINDS = [
    "ClusterRole",
    "ClusterRoleBinding",
    "Deployment",
    "PodDisruptionBudget",
    "Role",
    "RoleBinding",
    "ServiceAccount",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
]


def cluster_pools_values(directory: Path, driver: str, kubernetes: str = "") -> Path:
    """The example's values with another [dra] driver (and more of [kubernetes])."""
    values = yaml.safe_load(EXAMPLE.read_text())
    toml = values["config"]["toml"]
    assert toml.count(f'driver = "{OVERLAYS_DRIVER}"') == 1, toml
    toml = toml.replace(OVERLAYS_DRIVER, driver) + kubernetes
    values["config"]["toml"] = toml
    path = directory / f"cluster-pools-{driver}.yaml"
    path.write_text(yaml.safe_dump(values))
    return path


def of_kind(objects: list[dict[str, Any]], kind: str) -> dict[tuple[str, str, str], Any]:
    return by_key(item for item in objects if item["kind"] == kind)


def test_the_cluster_pools_example(helm: Helm) -> None:
    """The DRA example's objects, a DeviceClass more, and the publisher's, named after the
    release; its pods are not the DaemonSet's, and run `run --role publisher` as nobody."""
    objects = helm.objects([EXAMPLE], release="tr", namespace="infra")
    assert sorted(item["kind"] for item in objects) == sorted(
        AGENT_KINDS + DRA_KINDS + ["DeviceClass"] + PUBLISHER_KINDS
    )
    name = "tr-token-resource-publisher"
    (deployment,) = of_kind(objects, "Deployment").values()
    assert (deployment["metadata"]["name"], deployment["spec"]["replicas"]) == (name, 2)
    selector = deployment["spec"]["selector"]["matchLabels"]
    assert selector == {
        "app.kubernetes.io/name": "token-resource",
        "app.kubernetes.io/instance": name,
    }
    pod = deployment["spec"]["template"]
    assert pod["metadata"]["labels"] == {**selector, "app.kubernetes.io/component": "publisher"}
    # The DaemonSet's selector takes none of the publisher's pods.
    agents = daemonset(objects)["spec"]["selector"]["matchLabels"]
    assert not agents.items() <= pod["metadata"]["labels"].items(), agents
    spec = pod["spec"]
    assert (spec["serviceAccountName"], spec["priorityClassName"]) == (
        name,
        "system-cluster-critical",
    )
    (container,) = spec["containers"]
    command = container["command"]
    assert command[:4] == ["token-resource", "run", "--role", "publisher"], command
    assert command[command.index("--config") + 1] == "/etc/token-resource/token-resource.toml"
    assert container["securityContext"] == PUBLISHER_SECURITY_CONTEXT
    # Nothing of a node: the ConfigMap and a memory emptyDir for the control socket.
    assert {volume["name"]: sorted(volume) for volume in spec["volumes"]} == {
        "config": ["configMap", "name"],
        "run": ["emptyDir", "name"],
    }
    assert spec["volumes"][0]["configMap"]["name"] == "tr-token-resource"
    (budget,) = of_kind(objects, "PodDisruptionBudget").values()
    assert budget["spec"] == {"minAvailable": 1, "selector": {"matchLabels": selector}}
    (account,) = [
        item
        for item in objects
        if item["kind"] == "ServiceAccount" and item["metadata"]["name"] == name
    ]
    assert account["metadata"]["namespace"] == "infra"


def test_the_lease_and_the_policy_follow_the_configured_driver(helm: Helm, tmp_path: Path) -> None:
    """Another driver and lease_namespace: the Role names that driver's Lease in that
    namespace, the policy allows that driver's slices to the release's publisher account."""
    driver = "seats.example.org"
    values = cluster_pools_values(tmp_path, driver, 'lease_namespace = "leases"\n')
    objects = helm.objects([values], release="tr", namespace="infra")
    (role,) = of_kind(objects, "Role").values()
    assert (role["metadata"]["name"], role["metadata"]["namespace"]) == (
        "tr-token-resource-publisher-lease",
        "leases",
    )
    named = [rule for rule in role["rules"] if "resourceNames" in rule]
    assert [rule["resourceNames"] for rule in named] == [[lease_name(driver)]]
    assert lease_name(driver) == "seats.example.org-cluster-pools"
    (binding,) = of_kind(objects, "RoleBinding").values()
    assert binding["metadata"]["namespace"] == "leases"
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "tr-token-resource-publisher", "namespace": "infra"}
    ]
    policies = of_kind(objects, "ValidatingAdmissionPolicy")
    policy = policies["ValidatingAdmissionPolicy", "", "tr-token-resource-publisher-cluster-slices"]
    (condition,) = policy["spec"]["matchConditions"]
    assert condition["expression"] == (
        'request.userInfo.username == "system:serviceaccount:infra:tr-token-resource-publisher"'
    )
    expressions = [rule["expression"] for rule in policy["spec"]["validations"]]
    assert f"variables.objectDriver == '{driver}'" in expressions, expressions
    assert OVERLAYS_DRIVER not in yaml.safe_dump(objects)
    bindings = of_kind(objects, "ClusterRoleBinding")
    publisher = bindings["ClusterRoleBinding", "", "tr-token-resource-publisher"]
    assert publisher["subjects"] == binding["subjects"]
    # The agents' own-node policy still holds the DaemonSet's account, not the publisher's.
    agents = policies["ValidatingAdmissionPolicy", "", "tr-token-resource-own-node-slices"]
    assert agents["spec"]["matchConditions"][0]["expression"] == (
        'request.userInfo.username == "system:serviceaccount:infra:tr-token-resource"'
    )


# (values files, settings, whether the publisher is installed)
WHEN = {
    "defaults": ((), (), False),
    "dra": (("dra.yaml",), (), False),
    "cluster-pools": (("cluster-pools.yaml",), (), True),
    "cluster-pools, off": (
        ("cluster-pools.yaml",),
        ("clusterPools.publisher.enabled=false",),
        False,
    ),
    "dra, kept": (("dra.yaml",), ("clusterPools.publisher.enabled=true",), True),
}


@pytest.mark.parametrize("case", sorted(WHEN))
def test_the_publisher_only_with_a_cluster_resource_or_when_asked(helm: Helm, case: str) -> None:
    values, settings, installed = WHEN[case]
    objects = helm.objects([EXAMPLES / name for name in values], settings=settings)
    assert ("Deployment" in {item["kind"] for item in objects}) == installed


def test_the_publishers_values(helm: Helm) -> None:
    settings = [
        "clusterPools.publisher.replicas=3",
        "clusterPools.publisher.podDisruptionBudget.minAvailable=2",
        "clusterPools.publisher.nodeSelector.example\\.com/role=infra",
        "clusterPools.publisher.tolerations[0].key=infra",
        "clusterPools.publisher.tolerations[0].operator=Exists",
        "clusterPools.publisher.resources.limits.memory=256Mi",
    ]
    objects = helm.objects([EXAMPLE], settings=settings)
    (deployment,) = of_kind(objects, "Deployment").values()
    spec = deployment["spec"]["template"]["spec"]
    assert deployment["spec"]["replicas"] == 3
    assert spec["nodeSelector"] == {"example.com/role": "infra"}
    assert spec["tolerations"] == [{"key": "infra", "operator": "Exists"}]
    assert spec["containers"][0]["resources"]["limits"] == {"memory": "256Mi"}
    (budget,) = of_kind(objects, "PodDisruptionBudget").values()
    assert budget["spec"]["minAvailable"] == 2
    unbudgeted = helm.objects(
        [EXAMPLE], settings=["clusterPools.publisher.podDisruptionBudget.enabled=false"]
    )
    assert "PodDisruptionBudget" not in {item["kind"] for item in unbudgeted}


CLUSTER_BY_DEVICE_PLUGIN = (
    'config.toml=[resources."example.com/seat"]\ncount = 1\nscope = "cluster"\n'
)
# (values files, setting, what the refusal says)
REFUSALS = {
    "not a boolean": (
        (),
        "clusterPools.publisher.enabled=yes",
        "at '/clusterPools/publisher/enabled': got string, want null or boolean",
    ),
    "no replica": (
        ("cluster-pools.yaml",),
        "clusterPools.publisher.replicas=0",
        "at '/clusterPools/publisher/replicas': minimum: got 0, want 1",
    ),
    "an unknown value": (
        (),
        "clusterPools.publisher.command=x",
        "at '/clusterPools/publisher': additional properties 'command' not allowed",
    ),
    "without DRA": (
        (),
        "clusterPools.publisher.enabled=true",
        "clusterPools.publisher.enabled: the publisher writes DRA pools, and the configuration "
        'has no resource with advertise = "dra"',
    ),
    "a cluster resource without DRA": (
        (),
        CLUSTER_BY_DEVICE_PLUGIN,
        'config: resources.example.com/seat: scope = "cluster" needs advertise = "dra"',
    ),
    "a budget that blocks every drain": (
        ("cluster-pools.yaml",),
        "clusterPools.publisher.podDisruptionBudget.minAvailable=2",
        "clusterPools.publisher.podDisruptionBudget.minAvailable (2) must be less than "
        "clusterPools.publisher.replicas (2)",
    ),
    "too long a name": (
        ("cluster-pools.yaml",),
        f"fullnameOverride={'t' * 60}",
        f"clusterPools.publisher: its name {'t' * 60}-publisher (the release's name and "
        "-publisher) is longer than 63 characters",
    ),
}


@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_a_bad_publisher_value_is_refused_by_name(helm: Helm, case: str) -> None:
    values, setting, refusal = REFUSALS[case]
    args = ["template", "token-resource", str(CHART)]
    for name in values:
        args += ["--values", str(EXAMPLES / name)]
    flag = "--set-string" if setting.startswith("config.toml=") else "--set"
    done = helm.run(*args, flag, setting)
    assert done.returncode == 1, done.stdout
    assert refusal in done.stderr, done.stderr


def publisher_container(objects: list[dict[str, Any]]) -> dict[str, Any]:
    (deployment,) = of_kind(objects, "Deployment").values()
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return {"container": container, "pod": deployment["spec"]["template"]["spec"]}


def test_the_publisher_carries_the_license_tool(helm: Helm, tmp_path: Path) -> None:
    """clusterPools.publisher's image, env, volumes and volumeMounts: the vendor's lmutil in
    an image of the operator's or a volume, added to the chart's own; the DaemonSet's pods keep
    the agent's image and none of them."""
    values = tmp_path / "tool.yaml"
    mount = {"name": "flexlm", "mountPath": "/opt/flexlm", "readOnly": True}
    volume = {"name": "flexlm", "hostPath": {"path": "/opt/flexlm", "type": "Directory"}}
    env = {"name": "LM_LICENSE_FILE", "value": "27000@licsrv"}
    publisher = {
        "image": {"repository": "registry.example.com/token-resource-flexlm", "tag": "1"},
        "env": [env],
        "volumes": [volume],
        "volumeMounts": [mount],
    }
    values.write_text(yaml.safe_dump({"clusterPools": {"publisher": publisher}}))
    objects = helm.objects([EXAMPLE, values])
    found = publisher_container(objects)
    assert found["container"]["image"] == "registry.example.com/token-resource-flexlm:1"
    assert found["container"]["env"] == [env]
    assert [m["name"] for m in found["container"]["volumeMounts"]] == ["config", "run", "flexlm"]
    assert found["container"]["volumeMounts"][-1] == mount
    assert [v["name"] for v in found["pod"]["volumes"]] == ["config", "run", "flexlm"]
    assert found["pod"]["volumes"][-1] == volume
    (agent,) = daemonset(objects)["spec"]["template"]["spec"]["containers"]
    assert agent["image"] == f"localhost/token-resource:{CHART_APP_VERSION}"
    assert "flexlm" not in yaml.safe_dump(daemonset(objects))
    # Without them: the agent's image, no env.
    default = publisher_container(helm.objects([EXAMPLE]))["container"]
    assert default["image"] == agent["image"]
    assert "env" not in default


def test_a_publisher_volume_may_not_take_the_charts_names(helm: Helm, tmp_path: Path) -> None:
    values = tmp_path / "clash.yaml"
    volume = {"name": "config", "emptyDir": {}}
    values.write_text(yaml.safe_dump({"clusterPools": {"publisher": {"volumes": [volume]}}}))
    done = helm.run("template", "tr", str(CHART), "-f", str(EXAMPLE), "-f", str(values))
    assert done.returncode == 1, done.stdout
    assert '"config" is the name of one of the chart\'s own volumes' in done.stderr, done.stderr
