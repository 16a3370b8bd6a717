"""The Kubernetes manifests under deploy/kubernetes/: rendered, schema-checked, and what they say.

Every kustomization is rendered here in Python by a small renderer of the kustomize features
the manifests use (``resources``, ``namePrefix``/``nameSuffix`` with the ConfigMap references
they rename, ``images``, ``configMapGenerator`` without name hashes, and ``patches`` whose
strategic-merge patch holds only maps, or JSON patches), so the tests need no kubectl. Where
``kubectl`` is on PATH its ``kubectl kustomize`` renders each one too, and both renderings must
be the same objects: the renderer is checked against the real kustomize wherever that is at hand. A
kustomization that uses anything else is refused by the renderer, not rendered approximately.

Each rendered object is validated, strictly (no unknown fields), against the OpenAPI schemas
of the oldest Kubernetes version the manifests support and the newest one kubernetes-validate
ships. Then the objects are held to what the README and the manifests' comments promise.
"""

from __future__ import annotations

import copy
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path, PurePosixPath
from typing import Any

import jsonpatch  # type: ignore[import-untyped]
import kubernetes_validate  # type: ignore[import-untyped]
import pytest
import yaml

from token_resource.apiserver.objects.slices import device_class
from token_resource.config.load import parse_config
from token_resource.config.model import (
    DEFAULT_DEVICE_PLUGIN_DIR,
    DEFAULT_POD_RESOURCES_SOCKET,
    Config,
)

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy" / "kubernetes"
BASE = "base"
EXAMPLE = "overlays/example"
POOLS = "overlays/node-pools"
METRICS = "overlays/metrics"
# The alerts and the dashboard, beside the metrics overlay (tests/deploy/test_alerts.py).
MONITORING = "overlays/metrics/monitoring"
DEMO = "examples/token-demo"
DRA_OVERLAY = "overlays/dra"
NODE_STATUS_OVERLAY = "overlays/node-status"
# The DRA overlay and the cluster pools' publisher (tests/deploy/test_manifests_cluster_pools.py).
CLUSTER_POOLS = "overlays/cluster-pools"
# The DaemonSet's ServiceAccount as the API server names it.
ACCOUNT = "system:serviceaccount:token-resource:token-resource"
# Every kustomization a user is told to apply.
KUSTOMIZATIONS = (
    BASE, EXAMPLE, POOLS, METRICS, MONITORING, DEMO, DRA_OVERLAY, NODE_STATUS_OVERLAY,
    CLUSTER_POOLS,
)  # fmt: skip
# Custom resources, which no Kubernetes schema knows: the Prometheus Operator's PrometheusRule
# (promtool checks its spec, tests/deploy/test_alerts.py).
CUSTOM_RESOURCES = frozenset({"monitoring.coreos.com/v1"})

# The oldest Kubernetes whose schemas the manifests must pass (DaemonSet maxSurge and seccomp
# fields are long GA there), and the newest whose schemas kubernetes-validate ships.
OLDEST_KUBERNETES = "1.27"
NEWEST_KUBERNETES = ".".join(kubernetes_validate.latest_version().split(".")[:2])
SCHEMA_VERSIONS = (OLDEST_KUBERNETES, NEWEST_KUBERNETES)
# Where a kustomization needs a newer Kubernetes: DRA's resource.k8s.io/v1 is 1.34's, the
# ValidatingAdmissionPolicy of admissionregistration.k8s.io/v1 1.30's.
OLDEST_FOR = {DRA_OVERLAY: "1.34", NODE_STATUS_OVERLAY: "1.30", CLUSTER_POOLS: "1.34"}

CONFIG_DIR = "/etc/token-resource"
CONFIG_FILE = f"{CONFIG_DIR}/token-resource.toml"
CONTROL_DIR = "/run/token-resource"
CONTROL_SOCKET = f"{CONTROL_DIR}/control.sock"
POOL_LABEL = "example.com/token-pool"
# The least delay before the first startup probe. The agent's container answers
# `token-resource status` 0.5 s after `runc run` (tests/system/test_image.py, which holds it to
# the manifest's delay); the agent is ready in 1.3-1.6 s with 1,000 resources, and a busy node
# has been seen to take 3.6 s (docs/operations.md).
AGENT_START_SECONDS = 5

Object = dict[str, Any]


# --- a renderer of the kustomize features the manifests use --------------------------------------


class Unsupported(Exception):
    """A kustomization uses something this renderer does not reproduce faithfully."""


KUSTOMIZATION_KEYS = frozenset(
    {
        "apiVersion",
        "kind",
        "resources",
        "namePrefix",
        "nameSuffix",
        "images",
        "configMapGenerator",
        "patches",
    }
)
GENERATOR_KEYS = frozenset({"name", "namespace", "behavior", "files", "options"})
GENERATOR_OPTION_KEYS = frozenset({"disableNameSuffixHash", "labels"})
# kustomize renames everything but these (prefixsuffix transformer's skipped kinds).
NOT_RENAMED = frozenset({"Namespace", "CustomResourceDefinition", "APIService"})
POD_TEMPLATE_KINDS = frozenset(
    {"Deployment", "DaemonSet", "StatefulSet", "ReplicaSet", "Job", "ReplicationController"}
)


def object_id(obj: Object) -> tuple[str, str, str]:
    metadata = obj["metadata"]
    return (obj["kind"], metadata.get("namespace", ""), metadata["name"])


def kustomize(directory: Path) -> list[Object]:
    """The objects `kubectl kustomize DIRECTORY` renders, in no particular order."""
    kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text())
    unknown = set(kustomization) - KUSTOMIZATION_KEYS
    if unknown:
        raise Unsupported(f"{directory}: kustomization keys {sorted(unknown)}")
    if kustomization.get("kind") != "Kustomization":
        raise Unsupported(f"{directory}: kind {kustomization.get('kind')!r}")

    objects: dict[tuple[str, str, str], Object] = {}

    def add(obj: Object) -> None:
        key = object_id(obj)
        if key in objects:  # kustomize: "may not add resource with an already registered id"
            raise ValueError(f"{directory}: {key} defined twice")
        objects[key] = obj

    for entry in kustomization.get("resources", []):
        path = directory / entry
        if path.is_dir():
            for obj in kustomize(path):
                add(obj)
        else:
            # kustomize's default load restrictor: files only from this directory down.
            if not path.resolve().is_relative_to(directory.resolve()):
                raise ValueError(f"{directory}: {entry} is outside the kustomization")
            for obj in yaml.safe_load_all(path.read_text()):
                if obj is not None:
                    add(obj)

    for generator in kustomization.get("configMapGenerator", []):
        generate_config_map(directory, generator, objects)
    for patch in kustomization.get("patches", []):
        apply_patch(directory, patch, objects)
    rename(kustomization.get("namePrefix", ""), kustomization.get("nameSuffix", ""), objects)
    for image in kustomization.get("images", []):
        set_image(image, objects.values())
    return list(objects.values())


def generate_config_map(
    directory: Path, generator: dict[str, Any], objects: dict[tuple[str, str, str], Object]
) -> None:
    unknown = set(generator) - GENERATOR_KEYS
    options = generator.get("options", {})
    unknown |= set(options) - GENERATOR_OPTION_KEYS
    if unknown:
        raise Unsupported(f"{directory}: configMapGenerator keys {sorted(unknown)}")
    if options.get("disableNameSuffixHash") is not True:
        raise Unsupported(f"{directory}: a ConfigMap name with kustomize's content hash")
    data = {}
    for entry in generator["files"]:
        if "=" in entry or PurePosixPath(entry).name != entry:
            raise Unsupported(f"{directory}: configMapGenerator file {entry!r}")
        data[entry] = (directory / entry).read_text()
    metadata: dict[str, Any] = {"name": generator["name"]}
    if "namespace" in generator:
        metadata["namespace"] = generator["namespace"]
    if "labels" in options:
        metadata["labels"] = dict(options["labels"])
    config_map: Object = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata}
    config_map["data"] = data
    key = object_id(config_map)
    behavior = generator.get("behavior", "create")
    if behavior == "create":
        if key in objects:
            raise ValueError(f"{directory}: {key} exists; behavior create")
    elif behavior == "replace":
        if key not in objects:
            raise ValueError(f"{directory}: no {key} to replace")
        old_labels = objects[key]["metadata"].get("labels", {})
        if old_labels or "labels" in metadata:
            metadata["labels"] = {**old_labels, **metadata.get("labels", {})}
    else:
        raise Unsupported(f"{directory}: configMapGenerator behavior {behavior!r}")
    objects[key] = config_map


def apply_patch(
    directory: Path, patch: dict[str, Any], objects: dict[tuple[str, str, str], Object]
) -> None:
    if set(patch) != {"target", "patch"} or set(patch["target"]) - {"kind", "name"}:
        raise Unsupported(f"{directory}: patch {sorted(patch)} (target and inline patch only)")
    target = patch["target"]
    body = yaml.safe_load(patch["patch"])
    if isinstance(body, dict):
        # With a target, the patch's own name and namespace do not choose the object.
        body.get("metadata", {}).pop("name", None)
        body.get("metadata", {}).pop("namespace", None)
    matched = [
        obj
        for obj in objects.values()
        if obj["kind"] == target["kind"]
        and target.get("name", obj["metadata"]["name"]) == obj["metadata"]["name"]
    ]
    if not matched:
        raise ValueError(f"{directory}: patch target {target} matches nothing")
    for obj in matched:
        if isinstance(body, list):  # a JSON patch (RFC 6902), as kustomize tells them apart
            obj.update(jsonpatch.apply_patch(obj, body))
        else:
            merge_maps(obj, body, f"{directory}: patch")


def merge_maps(into: dict[str, Any], patch: dict[str, Any], where: str) -> None:
    """A strategic-merge patch of maps: keys merged recursively, scalars replaced.

    Lists have per-field merge strategies (merge keys, replace, $patch directives) in a
    strategic-merge patch; they are refused rather than guessed.
    """
    for key, value in patch.items():
        if isinstance(value, list) or key.startswith("$"):
            raise Unsupported(f"{where}: {key!r} (only maps and scalars are patched)")
        if value is None:
            into.pop(key, None)
        elif isinstance(value, dict):
            if not isinstance(into.get(key), dict):
                into[key] = {}
            merge_maps(into[key], value, where)
        else:
            into[key] = value


def pod_spec(obj: Object) -> dict[str, Any] | None:
    if obj["kind"] in POD_TEMPLATE_KINDS:
        spec: dict[str, Any] = obj["spec"]["template"]["spec"]
        return spec
    if obj["kind"] == "Pod":
        return dict(obj["spec"])
    return None


def rename(prefix: str, suffix: str, objects: dict[tuple[str, str, str], Object]) -> None:
    """namePrefix/nameSuffix, and what refers to a renamed object follows it: the pod specs'
    ConfigMap volumes and ServiceAccount, the bindings' subjects and role."""
    if not prefix and not suffix:
        return
    # (kind, namespace, old name) -> new name; cluster-scoped objects have no namespace.
    renamed: dict[tuple[str, str, str], str] = {}
    for obj in list(objects.values()):
        if obj["kind"] in NOT_RENAMED:
            continue
        kind, namespace, name = object_id(obj)
        new = f"{prefix}{name}{suffix}"
        obj["metadata"]["name"] = new
        del objects[(kind, namespace, name)]
        objects[(kind, namespace, new)] = obj
        renamed[(kind, namespace, name)] = new

    def follow(kind: str, namespace: str, name: str) -> str:
        return renamed.get((kind, namespace, name), name)

    for obj in objects.values():
        if obj["kind"] in ("ClusterRoleBinding", "RoleBinding"):
            role = obj["roleRef"]
            scope = "" if role["kind"] == "ClusterRole" else obj["metadata"].get("namespace", "")
            role["name"] = follow(role["kind"], scope, role["name"])
            for subject in obj.get("subjects", []):
                if subject["kind"] == "ServiceAccount":
                    subject["name"] = follow(
                        "ServiceAccount", subject["namespace"], subject["name"]
                    )
        spec = pod_spec(obj)
        if spec is not None:
            follow_from_pod_spec(spec, obj["metadata"].get("namespace", ""), follow)


def follow_from_pod_spec(
    spec: dict[str, Any], namespace: str, follow: Callable[[str, str, str], str]
) -> None:
    """A pod spec's ServiceAccount and ConfigMap volumes named as ``follow`` renames them."""
    if "serviceAccountName" in spec:
        spec["serviceAccountName"] = follow("ServiceAccount", namespace, spec["serviceAccountName"])
    for volume in spec.get("volumes", []):
        if "projected" in volume:
            raise Unsupported("projected volumes' ConfigMap references")
        if "configMap" in volume:
            reference = volume["configMap"]
            reference["name"] = follow("ConfigMap", namespace, reference["name"])
    for container in spec.get("containers", []) + spec.get("initContainers", []):
        # The downward API's fieldRef names no object; the others would have to follow.
        if container.get("envFrom") or any(
            set(e.get("valueFrom", {})) - {"fieldRef"} for e in container.get("env", [])
        ):
            raise Unsupported("ConfigMap or Secret references from environment variables")


def split_image(image: str) -> tuple[str, str]:
    """(name, ":tag" or "@digest" or "")."""
    if "@" in image:
        name, digest = image.split("@", 1)
        return name, "@" + digest
    slash = image.rfind("/")
    colon = image.rfind(":")
    if colon > slash:
        return image[:colon], image[colon:]
    return image, ""


def set_image(entry: dict[str, Any], objects: Iterable[Object]) -> None:
    if set(entry) - {"name", "newName", "newTag"}:
        raise Unsupported(f"images entry {sorted(entry)}")
    for obj in objects:
        spec = pod_spec(obj)
        if spec is None:
            continue
        for container in spec.get("containers", []) + spec.get("initContainers", []):
            name, tag = split_image(container["image"])
            if name == entry["name"]:
                new_tag = f":{entry['newTag']}" if "newTag" in entry else tag
                container["image"] = entry.get("newName", name) + new_tag


# --- the renderings ------------------------------------------------------------------------------


def ordered(objects: list[Object]) -> list[Object]:
    return sorted(objects, key=object_id)


RENDERED: dict[str, list[Object]] = {}


def rendered(kustomization: str) -> list[Object]:
    """A deep copy, so that no test changes another's objects."""
    if kustomization not in RENDERED:
        RENDERED[kustomization] = ordered(kustomize(DEPLOY / kustomization))
    return copy.deepcopy(RENDERED[kustomization])


def of_kind(objects: list[Object], kind: str) -> list[Object]:
    return [obj for obj in objects if obj["kind"] == kind]


def kind_of(objects: list[Object], kind: str, name: str) -> Object:
    """The object of that kind and name; AssertionError if there is none."""
    found = [obj for obj in of_kind(objects, kind) if obj["metadata"]["name"] == name]
    assert len(found) == 1, f"{len(found)} {kind} objects named {name}"
    return found[0]


def config_maps(objects: list[Object]) -> dict[tuple[str, str], Object]:
    return {
        (obj["metadata"]["namespace"], obj["metadata"]["name"]): obj
        for obj in of_kind(objects, "ConfigMap")
    }


def the_container(daemon_set: Object) -> dict[str, Any]:
    containers = daemon_set["spec"]["template"]["spec"]["containers"]
    assert [c["name"] for c in containers] == ["token-resource"]
    container: dict[str, Any] = containers[0]
    return container


def agent_config(objects: list[Object], daemon_set: Object) -> Config:
    """The configuration the DaemonSet's agent reads, parsed by the agent's own parser."""
    spec = daemon_set["spec"]["template"]["spec"]
    volume = next(v for v in spec["volumes"] if "configMap" in v)
    config_map = config_maps(objects)[
        (daemon_set["metadata"]["namespace"], volume["configMap"]["name"])
    ]
    text = config_map["data"][PurePosixPath(CONFIG_FILE).name]
    return parse_config([(Path(CONFIG_FILE), text)])


def daemon_sets() -> Iterator[tuple[str, list[Object], Object]]:
    for kustomization in KUSTOMIZATIONS:
        objects = rendered(kustomization)
        for daemon_set in of_kind(objects, "DaemonSet"):
            yield kustomization, objects, daemon_set


def mebibytes(quantity: str) -> float:
    match = re.fullmatch(r"(\d+)(Mi|Gi)", quantity)
    assert match, quantity
    return int(match.group(1)) * (1024 if match.group(2) == "Gi" else 1)


# --- rendering ----------------------------------------------------------------------------------


@pytest.mark.parametrize("kustomization", KUSTOMIZATIONS)
def test_renders_and_matches_kubectl_kustomize_where_present(kustomization: str) -> None:
    """Rendered here; and where kubectl is on PATH, `kubectl kustomize` renders the same."""
    objects = rendered(kustomization)
    assert objects, kustomization
    assert_kubectl_kustomize_renders(DEPLOY / kustomization, objects)


def assert_kubectl_kustomize_renders(directory: Path, objects: list[Object]) -> None:
    """Where kubectl is on PATH: `kubectl kustomize DIRECTORY` renders these very objects."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        return
    result = subprocess.run(
        [kubectl, "kustomize", str(directory)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    theirs = ordered([obj for obj in yaml.safe_load_all(result.stdout) if obj is not None])
    mine = ordered(objects)
    assert [object_id(obj) for obj in mine] == [object_id(obj) for obj in theirs]
    assert mine == theirs


def test_the_renderer_refuses_what_it_does_not_reproduce(tmp_path: Path) -> None:
    (tmp_path / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\ncommonLabels: {a: b}\n"
    )
    with pytest.raises(Unsupported, match="commonLabels"):
        kustomize(tmp_path)
    (tmp_path / "t.toml").write_text("[resources]\n")
    (tmp_path / "kustomization.yaml").write_text(
        "kind: Kustomization\nconfigMapGenerator:\n- name: c\n  files: [t.toml]\n"
    )
    with pytest.raises(Unsupported, match="content hash"):
        kustomize(tmp_path)
    with pytest.raises(Unsupported, match="only maps"):
        merge_maps({}, {"spec": {"tolerations": []}}, "here")


def test_the_renderer_renames_configmap_references_and_sets_images(tmp_path: Path) -> None:
    base = tmp_path / "base"
    base.mkdir()
    (base / "ds.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "apps/v1",
                "kind": "DaemonSet",
                "metadata": {"name": "d", "namespace": "ns"},
                "spec": {
                    "template": {
                        "spec": {
                            "containers": [{"name": "c", "image": "reg:5000/img:1"}],
                            "volumes": [
                                {"name": "x", "configMap": {"name": "cm"}},
                                {"name": "y", "configMap": {"name": "other"}},
                            ],
                        }
                    }
                },
            }
        )
    )
    (base / "cm.toml").write_text("x")
    (base / "kustomization.yaml").write_text(
        "kind: Kustomization\nresources: [ds.yaml]\nconfigMapGenerator:\n"
        "- {name: cm, namespace: ns, files: [cm.toml], options: {disableNameSuffixHash: true}}\n"
    )
    (tmp_path / "kustomization.yaml").write_text(
        "kind: Kustomization\nresources: [base]\nnameSuffix: -s\n"
        "images: [{name: reg:5000/img, newTag: '2'}]\n"
    )
    rendering = kustomize(tmp_path)
    assert_kubectl_kustomize_renders(tmp_path, rendering)
    objects = {object_id(obj): obj for obj in rendering}
    assert set(objects) == {("DaemonSet", "ns", "d-s"), ("ConfigMap", "ns", "cm-s")}
    spec = objects[("DaemonSet", "ns", "d-s")]["spec"]["template"]["spec"]
    assert [v["configMap"]["name"] for v in spec["volumes"]] == ["cm-s", "other"]
    assert spec["containers"][0]["image"] == "reg:5000/img:2"


# --- the Kubernetes schemas ---------------------------------------------------------------------


def test_the_schema_versions_are_the_supported_range() -> None:
    newest = tuple(int(part) for part in NEWEST_KUBERNETES.split("."))
    assert newest >= (1, 33), NEWEST_KUBERNETES  # kubectl 1.27-1.33 renders them


@pytest.mark.parametrize("version", SCHEMA_VERSIONS)
@pytest.mark.parametrize("kustomization", KUSTOMIZATIONS)
def test_every_object_passes_the_kubernetes_schema(kustomization: str, version: str) -> None:
    if version == OLDEST_KUBERNETES:
        version = OLDEST_FOR.get(kustomization, version)
    for obj in rendered(kustomization):
        if obj["apiVersion"] in CUSTOM_RESOURCES:
            continue
        checked = kubernetes_validate.validate(obj, version, strict=True)
        assert checked == version, (object_id(obj), checked)


def test_the_schema_check_can_fail() -> None:
    daemon_set = of_kind(rendered(BASE), "DaemonSet")[0]
    the_container(daemon_set)["securityContext"]["readOnlyRootFileSystem"] = True  # a typo
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(daemon_set, OLDEST_KUBERNETES, strict=True)


# --- the DaemonSets -----------------------------------------------------------------------------


def test_every_daemonset_runs_with_the_tightest_security_context() -> None:
    for kustomization, _, daemon_set in daemon_sets():
        spec = daemon_set["spec"]["template"]["spec"]
        context = the_container(daemon_set)["securityContext"]
        assert context == {
            "runAsUser": 0,
            "runAsGroup": 0,
            "runAsNonRoot": False,
            "privileged": False,
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
            "seccompProfile": {"type": "RuntimeDefault"},
        }, kustomization
        for host_access in ("hostNetwork", "hostPID", "hostIPC"):
            assert not spec.get(host_access), host_access


def test_every_daemonset_mounts_the_kubelet_directory_the_configmap_and_a_runtime_dir() -> None:
    for kustomization, objects, daemon_set in daemon_sets():
        spec = daemon_set["spec"]["template"]["spec"]
        volumes = {volume["name"]: volume for volume in spec["volumes"]}
        mounts = {mount["mountPath"]: mount for mount in the_container(daemon_set)["volumeMounts"]}
        # Every mount whole: a subPath mount of the ConfigMap would never be updated.
        assert all("subPath" not in m and "subPathExpr" not in m for m in mounts.values())

        plugins = volumes[mounts[str(DEFAULT_DEVICE_PLUGIN_DIR)]["name"]]
        assert plugins["hostPath"] == {"path": str(DEFAULT_DEVICE_PLUGIN_DIR), "type": "Directory"}
        assert not mounts[str(DEFAULT_DEVICE_PLUGIN_DIR)].get("readOnly")

        config = mounts[CONFIG_DIR]
        assert config["readOnly"] is True
        reference = volumes[config["name"]]["configMap"]
        assert set(reference) == {"name"}  # every key, no items: the whole map as files
        assert (daemon_set["metadata"]["namespace"], reference["name"]) in config_maps(objects)

        runtime = volumes[mounts[CONTROL_DIR]["name"]]
        assert runtime["emptyDir"]["medium"] == "Memory", kustomization

        # Who holds the tokens: the kubelet's PodResources socket where the agent looks.
        pod_resources = str(DEFAULT_POD_RESOURCES_SOCKET.parent)
        assert mounts[pod_resources]["readOnly"] is True
        assert volumes[mounts[pod_resources]["name"]]["hostPath"] == {
            "path": pod_resources,
            "type": "Directory",
        }
        config = agent_config(objects, daemon_set)
        assert config.agent.pod_resources_socket == DEFAULT_POD_RESOURCES_SOCKET, kustomization


def test_every_daemonset_runs_the_agent_on_its_configmap_and_probes_its_control_socket() -> None:
    for kustomization, objects, daemon_set in daemon_sets():
        container = the_container(daemon_set)
        assert container["command"] == [
            "token-resource",
            "run",
            "--config",
            CONFIG_FILE,
            "--control-socket",
            CONTROL_SOCKET,
        ]
        for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
            settings = container[probe]
            command = settings["exec"]["command"]
            assert command[:2] == ["token-resource", "status"], probe
            assert command[command.index("--control-socket") + 1] == CONTROL_SOCKET
            # The probe's own timeout must end before the kubelet gives up on the probe.
            assert float(command[command.index("--timeout") + 1]) < settings["timeoutSeconds"]
        for probe in ("livenessProbe", "readinessProbe"):
            assert container[probe]["periodSeconds"] >= 10
            assert container[probe]["failureThreshold"] >= 3
        # The agent finds the kubelet where the hostPath is mounted: no [agent] table needed.
        config = agent_config(objects, daemon_set)
        assert config.agent.device_plugin_dir == DEFAULT_DEVICE_PLUGIN_DIR, kustomization
        assert config.resources, kustomization
        # Every agent reads its Node's kubeletVersion (for rollouts) with the pod's
        # ServiceAccount, which rbac.yaml allows.
        spec = daemon_set["spec"]["template"]["spec"]
        assert config.uses_api_server, kustomization
        assert config.kubernetes.in_cluster, kustomization
        assert spec["automountServiceAccountToken"] is True, kustomization
        kind_of(objects, "ServiceAccount", spec["serviceAccountName"])
        # Node-status resources only where the pods' account may write their Node.
        modes = {spec.advertise for spec in config.resources.values()}
        assert ("node-status" in modes) == (kustomization == NODE_STATUS_OVERLAY), kustomization


def test_a_normal_start_fails_no_probe() -> None:
    """The kubelet records a Warning event for every failed probe, and the control socket
    appears only once the agent has started: the startup probe's first try comes after a
    start under runc takes (tests/system/test_image.py measures it against this delay), and it
    holds the other probes back until it succeeds."""
    for kustomization, _, daemon_set in daemon_sets():
        container = the_container(daemon_set)
        startup = container["startupProbe"]
        assert startup["initialDelaySeconds"] >= AGENT_START_SECONDS, kustomization
        # A slow start (1,000 resources on a busy node) gets over a minute before a restart.
        assert startup["periodSeconds"] * startup["failureThreshold"] >= 60, kustomization
        for probe in ("livenessProbe", "readinessProbe"):
            assert "initialDelaySeconds" not in container[probe], (kustomization, probe)


def test_every_daemonset_is_node_critical_tolerates_every_taint_and_rolls() -> None:
    for kustomization, _, daemon_set in daemon_sets():
        spec = daemon_set["spec"]["template"]["spec"]
        assert spec["priorityClassName"] == "system-node-critical", kustomization
        tolerated = {(t.get("key"), t["operator"], t.get("effect")) for t in spec["tolerations"]}
        assert tolerated == {(None, "Exists", "NoSchedule"), (None, "Exists", "NoExecute")}
        strategy = daemon_set["spec"]["updateStrategy"]
        assert strategy["type"] == "RollingUpdate"
        env = {item["name"]: item for item in the_container(daemon_set)["env"]}
        # Each pod an instance of its own: the new one starts before the old one stops (and
        # waits for it on a kubelet that takes only one, instances.py).
        assert env["TOKEN_RESOURCE_INSTANCE"]["valueFrom"]["fieldRef"] == {
            "fieldPath": "metadata.uid"
        }
        assert env["NODE_NAME"]["valueFrom"]["fieldRef"] == {"fieldPath": "spec.nodeName"}
        assert strategy["rollingUpdate"] == {"maxSurge": 1, "maxUnavailable": 0}, kustomization


def bench_rss_mib(resources: int) -> float:
    """The agent's RSS serving RESOURCES resources, from `make bench`'s bench/RESULTS.md."""
    results = (REPO / "bench" / "RESULTS.md").read_text()
    match = re.search(rf"^\| {resources} resource\(s\) \| RSS ([\d.]+) MiB", results, re.M)
    assert match, f"bench/RESULTS.md has no memory figure for {resources} resources"
    return float(match.group(1))


def test_requests_and_limits_fit_the_benchmarked_memory() -> None:
    for kustomization, _, daemon_set in daemon_sets():
        resources = the_container(daemon_set)["resources"]
        request = mebibytes(resources["requests"]["memory"])
        limit = mebibytes(resources["limits"]["memory"])
        # The request holds the agent at rest with up to 100 resources...
        assert bench_rss_mib(100) <= request < bench_rss_mib(1000), kustomization
        # ...the limit 1,000 resources and two probe processes of about 28 MiB each.
        assert limit >= bench_rss_mib(1000) + 2 * 28, kustomization
        assert "cpu" not in resources["limits"], "a CPU limit only delays re-registration"
        assert resources["requests"]["cpu"] == "10m"


def test_the_base_image_is_the_one_make_image_builds_and_overlays_replace_it() -> None:
    with (REPO / "pyproject.toml").open("rb") as file:
        version = tomllib.load(file)["project"]["version"]
    images: dict[str, set[str]] = {}
    for kustomization, _, daemon_set in daemon_sets():
        images.setdefault(kustomization, set()).add(the_container(daemon_set)["image"])
    assert images[BASE] == {f"localhost/token-resource:{version}"}
    assert images[EXAMPLE] == images[POOLS] == {f"registry.example.com/token-resource:{version}"}


# --- node pools ---------------------------------------------------------------------------------


def test_each_node_pool_has_its_own_daemonset_configmap_nodes_and_counts() -> None:
    objects = rendered(POOLS)
    assert len(of_kind(objects, "Namespace")) == 1
    pools = {}
    for daemon_set in of_kind(objects, "DaemonSet"):
        spec = daemon_set["spec"]["template"]["spec"]
        pool = spec["nodeSelector"][POOL_LABEL]
        config_map = next(v["configMap"]["name"] for v in spec["volumes"] if "configMap" in v)
        selector = daemon_set["spec"]["selector"]["matchLabels"]
        pools[pool] = (config_map, selector, agent_config(objects, daemon_set))
        # Its pods carry its selector's labels.
        labels = daemon_set["spec"]["template"]["metadata"]["labels"]
        assert selector.items() <= labels.items()
    assert sorted(pools) == ["large", "small"]
    (large_map, large_selector, large), (small_map, small_selector, small) = (
        pools["large"],
        pools["small"],
    )
    assert large_map != small_map
    assert len(config_maps(objects)) == 2
    # Neither DaemonSet selects the other's pods.
    assert large_selector != small_selector
    counts = {name: spec.count for name, spec in large.resources.items()}
    assert counts == {"example.com/token": 8}
    assert {name: spec.count for name, spec in small.resources.items()} == {"example.com/token": 1}


# --- the example: more replicas than tokens ------------------------------------------------------


def test_the_demo_asks_for_more_tokens_than_a_node_of_the_base_has() -> None:
    (deployment,) = of_kind(rendered(DEMO), "Deployment")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    limits = container["resources"]["limits"]
    assert limits["example.com/token"] == 1
    (daemon_set,) = of_kind(rendered(BASE), "DaemonSet")
    tokens_per_node = agent_config(rendered(BASE), daemon_set).resources["example.com/token"].count
    assert deployment["spec"]["replicas"] > tokens_per_node
    # It prints the variable the agent gives it.
    assert "$TOKEN_RESOURCE_EXAMPLE_COM_TOKEN" in " ".join(container["command"])


def test_the_demo_can_be_replaced_while_every_token_is_in_use() -> None:
    """A rolling update waits for new pods that wait for a token held by an old one; Recreate
    frees the tokens first. (Stopping at once on SIGTERM: tests/deploy/test_token_demo.py.)"""
    (deployment,) = of_kind(rendered(DEMO), "Deployment")
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}


# --- the docs -------------------------------------------------------------------------------------


def test_only_the_metrics_overlay_opens_a_port_and_its_annotations_name_it() -> None:
    for kustomization, objects, daemon_set in daemon_sets():
        listen = agent_config(objects, daemon_set).metrics.listen
        annotations = daemon_set["spec"]["template"]["metadata"].get("annotations", {})
        if kustomization != METRICS:
            assert listen is None, kustomization
            assert not any(key.startswith("prometheus.io/") for key in annotations)
            continue
        # The pod's own network namespace: every address, so that Prometheus reaches it.
        assert listen == ("0.0.0.0", int(annotations["prometheus.io/port"]))
        assert annotations["prometheus.io/scrape"] == "true"
        assert annotations["prometheus.io/path"] == "/metrics"


def test_the_docs_apply_only_kustomizations_that_exist_and_are_tested() -> None:
    documents = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
    applied = {
        (document.name, path.rstrip("/"))
        for document in documents
        for path in re.findall(
            r"kubectl apply -k deploy/kubernetes/([\w./-]+)", document.read_text()
        )
    }
    assert {"README.md", "kubernetes.md", "dra.md"} <= {document for document, _ in applied}
    for document, path in applied:
        assert path in KUSTOMIZATIONS, (document, path)


# --- the DRA overlay ------------------------------------------------------------------------


def test_the_dra_overlay_serves_its_resources_through_dra_with_the_mounts_they_need() -> None:
    objects = rendered(DRA_OVERLAY)
    [daemon_set] = of_kind(objects, "DaemonSet")
    config = agent_config(objects, daemon_set)
    assert {spec.advertise for spec in config.resources.values()} == {"dra"}
    assert config.kubernetes.in_cluster
    spec = daemon_set["spec"]["template"]["spec"]
    container = the_container(daemon_set)
    # The Node's name, as the agent reads it in a pod.
    assert container["env"] == [
        {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
        {
            "name": "TOKEN_RESOURCE_INSTANCE",
            "valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}},
        },
    ]
    assert daemon_set["spec"]["updateStrategy"]["rollingUpdate"]["maxSurge"] == 1
    mounts = {mount["mountPath"]: mount for mount in container["volumeMounts"]}
    volumes = {volume["name"]: volume for volume in spec["volumes"]}
    # Each directory where the agent's configuration says, and at the host's own path (the
    # registration names the service socket by its path, the runtime reads the CDI specs).
    for directory in (config.dra.plugins_registry_dir, config.dra.plugins_dir, config.dra.cdi_dir):
        mount = mounts[str(directory)]
        assert "readOnly" not in mount
        assert volumes[mount["name"]]["hostPath"]["path"] == str(directory)
    [account] = of_kind(objects, "ServiceAccount")
    assert spec["serviceAccountName"] == account["metadata"]["name"]


def granted(objects: list[Object], account: Object) -> dict[tuple[str, str], set[str]]:
    """What the ClusterRoles bound to ``account`` allow: (API group, resource) -> verbs."""
    subject = {
        "kind": "ServiceAccount",
        "name": account["metadata"]["name"],
        "namespace": account["metadata"]["namespace"],
    }
    roles = {role["metadata"]["name"]: role for role in of_kind(objects, "ClusterRole")}
    allowed: dict[tuple[str, str], set[str]] = {}
    for binding in of_kind(objects, "ClusterRoleBinding"):
        if subject in binding["subjects"]:
            for rule in roles[binding["roleRef"]["name"]]["rules"]:
                for group in rule["apiGroups"]:
                    for resource in rule["resources"]:
                        allowed.setdefault((group, resource), set()).update(rule["verbs"])
    return allowed


def test_every_agent_may_read_nodes_and_nothing_more() -> None:
    for kustomization, objects, daemon_set in daemon_sets():
        if kustomization in (DRA_OVERLAY, NODE_STATUS_OVERLAY, CLUSTER_POOLS):
            continue
        spec = daemon_set["spec"]["template"]["spec"]
        account = kind_of(objects, "ServiceAccount", spec["serviceAccountName"])
        # get: the kubelet's version; list and watch: a node-status agent's watch of its Node.
        assert granted(objects, account) == {("", "nodes"): {"get", "list", "watch"}}, kustomization


def test_the_dra_overlays_rbac_allows_what_the_agent_does_and_no_more() -> None:
    objects = rendered(DRA_OVERLAY)
    [account] = of_kind(objects, "ServiceAccount")
    assert (
        f"system:serviceaccount:{account['metadata']['namespace']}:{account['metadata']['name']}"
        == ACCOUNT
    )
    assert granted(objects, account) == {
        ("resource.k8s.io", "resourceslices"): {
            "get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"
        },
        ("resource.k8s.io", "resourceclaims"): {"get"},
        ("", "nodes"): {"get", "list", "watch"},
        ("", "pods"): {"list", "patch"},
    }  # fmt: skip
    assert account["metadata"]["namespace"] == "token-resource"
    # Each agent held to its own node's slices and to one annotation of its own node's pods,
    # for the account the pods run as.
    policies = {
        policy["metadata"]["name"]: policy
        for policy in of_kind(objects, "ValidatingAdmissionPolicy")
    }
    assert sorted(policies) == [
        "token-resource-own-node-pod-nudges",
        "token-resource-own-node-slices",
    ]
    bindings = of_kind(objects, "ValidatingAdmissionPolicyBinding")
    assert sorted(binding["spec"]["policyName"] for binding in bindings) == sorted(policies)
    for binding in bindings:
        assert binding["spec"]["validationActions"] == ["Deny"]
    for policy in policies.values():
        [condition] = policy["spec"]["matchConditions"]
        assert f'"{ACCOUNT}"' in condition["expression"]
    pods = policies["token-resource-own-node-pod-nudges"]["spec"]["matchConstraints"][
        "resourceRules"
    ]
    assert pods == [
        {
            "apiGroups": [""],
            "apiVersions": ["*"],
            "operations": ["UPDATE"],
            "resources": ["pods"],
        }
    ]


@pytest.mark.parametrize("kustomization", [DRA_OVERLAY, CLUSTER_POOLS])
def test_the_dra_overlays_device_classes_are_what_the_command_prints(kustomization: str) -> None:
    """One DeviceClass per DRA resource, a node's or the cluster's (cluster-pools: the DRA
    overlay's and its own, deviceclasses.yaml), as `token-resource device-classes` prints them
    for the overlay's file."""
    objects = rendered(kustomization)
    [daemon_set] = of_kind(objects, "DaemonSet")
    config = agent_config(objects, daemon_set)
    expected = [device_class(config.dra.driver, name) for name in config.resources]
    assert len(expected) == (2 if kustomization == CLUSTER_POOLS else 1)
    assert of_kind(objects, "DeviceClass") == expected
    printed = subprocess.run(
        [sys.executable, "-m", "token_resource", "device-classes", "--config",
         str(DEPLOY / kustomization / "token-resource.toml")],
        capture_output=True, text=True, check=True, timeout=60,
    ).stdout  # fmt: skip
    assert [obj for obj in yaml.safe_load_all(printed) if obj] == expected
