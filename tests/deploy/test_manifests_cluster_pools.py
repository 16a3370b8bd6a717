"""deploy/kubernetes/overlays/cluster-pools, rendered as tests/deploy/test_manifests.py renders
every kustomization: the DRA overlay's nodes unchanged, and the publisher of the cluster pools (a
Deployment of `token-resource run --role publisher` on the same ConfigMap), its Lease and
ResourceSlice RBAC and the admission policy holding it to the driver's cluster-wide slices (the
real API server enforcing both: tests/kube/test_cp_cluster_pools.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.deploy.test_manifests import (
    ACCOUNT,
    CLUSTER_POOLS,
    CONFIG_DIR,
    CONFIG_FILE,
    CONTROL_DIR,
    DEPLOY,
    DRA_OVERLAY,
    Object,
    agent_config,
    config_maps,
    granted,
    kind_of,
    of_kind,
    rendered,
    the_container,
)
from token_resource.apiserver.keeping.cluster_slices import lease_name
from token_resource.config.load import parse_config
from token_resource.config.model import CLUSTER_SCOPE, COMMAND, DRA, NODE_SCOPE, Config

PUBLISHER = "token-resource-publisher"
NAMESPACE = "token-resource"
PUBLISHER_ACCOUNT = f"system:serviceaccount:{NAMESPACE}:{PUBLISHER}"
PUBLISHER_POLICY = "token-resource-publisher-cluster-slices"
# The publisher's container: no root, no capability, nothing writable (also the chart's).
PUBLISHER_SECURITY_CONTEXT = {
    "runAsUser": 65534,
    "runAsGroup": 65534,
    "runAsNonRoot": True,
    "privileged": False,
    "allowPrivilegeEscalation": False,
    "readOnlyRootFilesystem": True,
    "capabilities": {"drop": ["ALL"]},
    "seccompProfile": {"type": "RuntimeDefault"},
}
# (namespace, "" for a ClusterRole's; API group, resource, resourceNames, verb)
Grant = tuple[str, str, str, tuple[str, ...], str]


def the_publisher(objects: list[Object]) -> Object:
    return kind_of(objects, "Deployment", PUBLISHER)


def publisher_config(objects: list[Object]) -> Config:
    """The configuration the publisher reads: its ConfigMap's file, by the agent's parser."""
    spec = the_publisher(objects)["spec"]["template"]["spec"]
    [volume] = [v for v in spec["volumes"] if "configMap" in v]
    config_map = config_maps(objects)[(NAMESPACE, volume["configMap"]["name"])]
    return parse_config([(Path(CONFIG_FILE), config_map["data"]["token-resource.toml"])])


def grants(objects: list[Object], account: Object) -> set[Grant]:
    """Every verb the Roles and ClusterRoles bound to ``account`` allow, one grant a verb."""
    subject = {
        "kind": "ServiceAccount",
        "name": account["metadata"]["name"],
        "namespace": account["metadata"]["namespace"],
    }
    found: set[Grant] = set()
    for kind, role_kind in (("RoleBinding", "Role"), ("ClusterRoleBinding", "ClusterRole")):
        for binding in of_kind(objects, kind):
            if subject not in binding["subjects"]:
                continue
            namespace = binding["metadata"].get("namespace", "")
            assert binding["roleRef"]["kind"] == role_kind, binding
            role = kind_of(objects, role_kind, binding["roleRef"]["name"])
            assert role["metadata"].get("namespace", "") == namespace, role
            for rule in role["rules"]:
                names = tuple(rule.get("resourceNames", ()))
                found |= {
                    (namespace, group, resource, names, verb)
                    for group in rule["apiGroups"]
                    for resource in rule["resources"]
                    for verb in rule["verbs"]
                }
    return found


def test_the_nodes_run_the_dra_overlays_daemonset_on_the_same_file_as_the_publisher() -> None:
    """Everything of overlays/dra but its ConfigMap is there unchanged; the one ConfigMap
    holds the nodes' resources and the cluster's, read by the DaemonSet and the publisher."""
    objects, dra = rendered(CLUSTER_POOLS), rendered(DRA_OVERLAY)
    ids = {(obj["kind"], obj["metadata"]["name"]) for obj in objects}
    for obj in dra:
        if obj["kind"] != "ConfigMap":
            assert obj in objects, (obj["kind"], obj["metadata"]["name"])
    [daemon_set] = of_kind(objects, "DaemonSet")
    config = agent_config(objects, daemon_set)
    assert config == publisher_config(objects)
    # The DRA overlay's node resources, and a cluster pool beside them, of the same driver.
    dra_config = agent_config(dra, of_kind(dra, "DaemonSet")[0])
    assert config.scoped(NODE_SCOPE).resources == dra_config.resources
    cluster = config.scoped(CLUSTER_SCOPE).resources
    assert cluster, "no resource with scope = cluster"
    assert {spec.advertise for spec in cluster.values()} == {DRA}
    assert config.dra.driver == dra_config.dra.driver
    assert config.kubernetes.in_cluster
    new = ids - {(obj["kind"], obj["metadata"]["name"]) for obj in dra}
    assert new == {
        ("ServiceAccount", PUBLISHER),
        ("Deployment", PUBLISHER),
        ("PodDisruptionBudget", PUBLISHER),
        ("Role", f"{PUBLISHER}-lease"),
        ("RoleBinding", f"{PUBLISHER}-lease"),
        ("ClusterRole", PUBLISHER),
        ("ClusterRoleBinding", PUBLISHER),
        ("ValidatingAdmissionPolicy", PUBLISHER_POLICY),
        ("ValidatingAdmissionPolicyBinding", PUBLISHER_POLICY),
        ("DeviceClass", "license.example.com"),
    }


def test_the_commented_settings_are_valid_once_uncommented() -> None:
    """The file shows a node selector and a free-seats probe, commented out: each is what
    the parser takes when a user takes the "# " away."""
    path = DEPLOY / CLUSTER_POOLS / "token-resource.toml"
    text = path.read_text()
    for setting in ("nodes = ", "probe = "):
        assert text.count(f"\n# {setting}") == 1, setting
        text = text.replace(f"\n# {setting}", f"\n{setting}")
    [spec] = parse_config([(path, text)]).scoped(CLUSTER_SCOPE).resources.values()
    assert spec.probe is not None
    assert spec.probe.kind == COMMAND
    assert spec.nodes is not None


def test_the_publisher_runs_the_agents_image_as_publisher_on_the_same_configmap() -> None:
    objects = rendered(CLUSTER_POOLS)
    deployment = the_publisher(objects)
    [daemon_set] = of_kind(objects, "DaemonSet")
    spec = deployment["spec"]["template"]["spec"]
    [container] = spec["containers"]
    agent = the_container(daemon_set)
    assert container["image"] == agent["image"]
    command = list(agent["command"])
    command[2:2] = ["--role", "publisher"]
    assert container["command"] == command
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert container[probe] == agent[probe], probe
    # No node of its own: no hostPath, no host namespaces, no $NODE_NAME, and no instance
    # (its sockets are no kubelet's).
    assert all("hostPath" not in volume for volume in spec["volumes"])
    assert not any(spec.get(key) for key in ("hostNetwork", "hostPID", "hostIPC"))
    assert "env" not in container
    # The ConfigMap whole (never subPath), the DaemonSet's; the control socket in memory.
    mounts = {mount["mountPath"]: mount for mount in container["volumeMounts"]}
    assert sorted(mounts) == sorted([CONFIG_DIR, CONTROL_DIR])
    assert all("subPath" not in mount and "subPathExpr" not in mount for mount in mounts.values())
    volumes = {volume["name"]: volume for volume in spec["volumes"]}
    assert mounts[CONFIG_DIR]["readOnly"] is True
    config_volume = volumes[mounts[CONFIG_DIR]["name"]]["configMap"]
    [agent_volume] = [
        v for v in daemon_set["spec"]["template"]["spec"]["volumes"] if "configMap" in v
    ]
    assert config_volume == agent_volume["configMap"] == {"name": "token-resource"}
    assert volumes[mounts[CONTROL_DIR]["name"]]["emptyDir"]["medium"] == "Memory"
    # Its own account, whose token it needs (the API server, and its namespace for the Lease).
    assert spec["serviceAccountName"] == PUBLISHER
    assert spec["automountServiceAccountToken"] is True
    kind_of(objects, "ServiceAccount", PUBLISHER)


def test_the_publisher_runs_as_nobody_with_nothing() -> None:
    """No root, no capability, nothing writable but its memory emptyDir; small requests."""
    deployment = the_publisher(rendered(CLUSTER_POOLS))
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    assert container["securityContext"] == PUBLISHER_SECURITY_CONTEXT
    assert container["resources"] == {
        "requests": {"cpu": "10m", "memory": "64Mi"},
        "limits": {"memory": "128Mi"},
    }


def test_two_publishers_on_different_nodes_hand_over_in_a_rollout() -> None:
    """Two candidates, spread over the nodes; a rollout starts the new pod before an old one
    stops (which gives the Lease up); a drain keeps one; and the DaemonSet selects none of
    them, nor they its pods."""
    objects = rendered(CLUSTER_POOLS)
    deployment = the_publisher(objects)
    spec = deployment["spec"]
    assert spec["replicas"] == 2
    assert spec["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
    }
    selector = spec["selector"]["matchLabels"]
    labels = spec["template"]["metadata"]["labels"]
    assert selector.items() <= labels.items()
    pod = spec["template"]["spec"]
    assert pod["priorityClassName"] == "system-cluster-critical"
    [spread] = pod["topologySpreadConstraints"]
    assert spread["topologyKey"] == "kubernetes.io/hostname"
    assert spread["labelSelector"] == {"matchLabels": selector}
    assert spread["maxSkew"] == 1
    [budget] = of_kind(objects, "PodDisruptionBudget")
    assert budget["spec"] == {"minAvailable": 1, "selector": {"matchLabels": selector}}
    [daemon_set] = of_kind(objects, "DaemonSet")
    agent_selector = daemon_set["spec"]["selector"]["matchLabels"]
    agent_labels = daemon_set["spec"]["template"]["metadata"]["labels"]
    assert not agent_selector.items() <= labels.items()
    assert not selector.items() <= agent_labels.items()


def test_the_publishers_rbac_allows_what_it_does_and_no_more() -> None:
    """Its Lease: created, read and replaced (client-go's leader election, as
    apiserver/election/elector.py runs it), no other Lease updated; the cluster pools' slices
    listed, watched, created, replaced and deleted (apiserver/keeping/node_slices.py); every
    claim listed and watched (apiserver/keeping/allocations.py, the allocated tokens). The
    nodes' account gets none of it."""
    objects = rendered(CLUSTER_POOLS)
    driver = publisher_config(objects).dra.driver
    publisher = kind_of(objects, "ServiceAccount", PUBLISHER)
    assert publisher["metadata"]["namespace"] == NAMESPACE
    lease = (lease_name(driver),)
    slices = {"get", "list", "watch", "create", "update", "delete"}
    assert grants(objects, publisher) == {
        (NAMESPACE, "coordination.k8s.io", "leases", (), "create"),
        (NAMESPACE, "coordination.k8s.io", "leases", lease, "get"),
        (NAMESPACE, "coordination.k8s.io", "leases", lease, "update"),
        *(("", "resource.k8s.io", "resourceslices", (), verb) for verb in slices),
        ("", "resource.k8s.io", "resourceclaims", (), "get"),
        ("", "resource.k8s.io", "resourceclaims", (), "list"),
        ("", "resource.k8s.io", "resourceclaims", (), "watch"),
    }
    # The DaemonSet's account: what the DRA overlay grants it, nothing of the publisher's.
    dra = rendered(DRA_OVERLAY)
    agent = kind_of(objects, "ServiceAccount", "token-resource")
    assert grants(objects, agent) == grants(dra, kind_of(dra, "ServiceAccount", "token-resource"))
    assert granted(objects, agent) == granted(dra, agent)


def policies(objects: list[Object]) -> dict[str, dict[str, Any]]:
    return {
        policy["metadata"]["name"]: policy["spec"]
        for policy in of_kind(objects, "ValidatingAdmissionPolicy")
    }


def test_the_publishers_policy_holds_it_to_the_drivers_cluster_slices() -> None:
    """Every slice write of the publisher's account (a delete too), and only its: the driver
    the policy allows is the configuration's. The nodes' policies hold the DaemonSet's account
    as before, which refuses it any slice that is not its own node's, a cluster slice too."""
    objects = rendered(CLUSTER_POOLS)
    found = policies(objects)
    spec = found.pop(PUBLISHER_POLICY)
    assert spec["failurePolicy"] == "Fail"
    assert spec["matchConstraints"]["resourceRules"] == [
        {
            "apiGroups": ["resource.k8s.io"],
            "apiVersions": ["*"],
            "operations": ["CREATE", "UPDATE", "DELETE"],
            "resources": ["resourceslices"],
        }
    ]
    [condition] = spec["matchConditions"]
    assert condition["expression"] == f'request.userInfo.username == "{PUBLISHER_ACCOUNT}"'
    driver = publisher_config(objects).dra.driver
    expressions = [validation["expression"] for validation in spec["validations"]]
    assert expressions == [
        "variables.objectNodeName == ''",
        "variables.clusterWide",
        f"variables.objectDriver == '{driver}'",
    ]
    assert "DELETE' ? oldObject : object" in spec["variables"][0]["expression"]
    [binding] = [
        binding["spec"]
        for binding in of_kind(objects, "ValidatingAdmissionPolicyBinding")
        if binding["metadata"]["name"] == PUBLISHER_POLICY
    ]
    assert binding == {"policyName": PUBLISHER_POLICY, "validationActions": ["Deny"]}
    # The DRA overlay's, unchanged: the DaemonSet's account, to its own node (objectNodeName,
    # '' for a cluster slice, must be the token's node).
    assert found == policies(rendered(DRA_OVERLAY))
    for name, policy in found.items():
        [condition] = policy["matchConditions"]
        assert f'"{ACCOUNT}"' in condition["expression"], name
    validations = found["token-resource-own-node-slices"]["validations"]
    assert "variables.objectNodeName == variables.userNodeName" in [
        validation["expression"] for validation in validations
    ]
