"""The validated configuration: frozen settings per section and one ResourceSpec per resource."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType

DEFAULT_CONFIG_PATH = Path("/etc/token-resource.toml")
DEFAULT_DEVICE_PLUGIN_DIR = Path("/var/lib/kubelet/device-plugins")
DEFAULT_POD_RESOURCES_SOCKET = Path("/var/lib/kubelet/pod-resources/kubelet.sock")
# The kubelet's own credentials: its node identity may patch its own Node's status.
DEFAULT_KUBECONFIG = Path("/etc/kubernetes/kubelet.conf")
DEFAULT_RESYNC_SECONDS = 300.0
MIN_RESYNC_SECONDS, MAX_RESYNC_SECONDS = 1.0, 3600.0
# How a resource reaches the scheduler.
DEVICE_PLUGIN, NODE_STATUS, DRA = "device-plugin", "node-status", "dra"
ADVERTISE_MODES = (DEVICE_PLUGIN, NODE_STATUS, DRA)
# Those that name the tokens to the container, in an environment variable.
MODES_WITH_ENV = (DEVICE_PLUGIN, DRA)
# Whose tokens a resource's are: one node's (every node its own count), or the cluster's (one
# pool of `count` for every node, published by one elected process; DRA only).
NODE_SCOPE, CLUSTER_SCOPE = "node", "cluster"
SCOPES = (NODE_SCOPE, CLUSTER_SCOPE)
# Who runs: a node's agent (the kubelet's plugins; prepares claims of cluster pools, never
# publishes them) or a publisher of the cluster pools (no kubelet, no node; leader-elected).
NODE_ROLE, PUBLISHER_ROLE = "node", "publisher"
ROLES = (NODE_ROLE, PUBLISHER_ROLE)
# client-go's leader election defaults (tools/leaderelection), which operators know.
DEFAULT_LEASE_DURATION = 15.0
DEFAULT_RENEW_DEADLINE = 10.0
DEFAULT_RETRY_PERIOD = 2.0
# Where the Lease lives outside a pod when the kubeconfig's context names no namespace (in a pod:
# the pod's own namespace).
DEFAULT_LEASE_NAMESPACE = "token-resource"
# DRA: the kubelet's directories, and where container runtimes read CDI specs.
DEFAULT_DRIVER = "token-resource"
DEFAULT_PLUGINS_REGISTRY_DIR = Path("/var/lib/kubelet/plugins_registry")
DEFAULT_PLUGINS_DIR = Path("/var/lib/kubelet/plugins")
DEFAULT_CDI_DIR = Path("/var/run/cdi")
# A ListAndWatch list of 100k "token-N" devices is ~2.5 MB, under the kubelet's 4 MiB gRPC limit.
MAX_COUNT = 100_000
# A ResourceSlice holds at most 128 devices; a DRA resource of this many tokens is 32 slices on
# every node: cluster-wide API objects, kept far below what the device-plugin form allows.
DEVICES_PER_SLICE = 128
MAX_DRA_COUNT = 4096


# Probes: what a resource's tokens stand for, asked whether they are usable (health/).
COMMAND, TCP, HTTP, PATH = "command", "tcp", "http", "path"
# License servers asked for a feature's (FlexNet) or a product's (RLM) free seats.
FLEXLM, RLM = "flexlm", "rlm"
LICENSE_KINDS = (FLEXLM, RLM)
PROBE_KINDS = (COMMAND, TCP, HTTP, PATH, *LICENSE_KINDS)
# In a path probe, the token's index: each token has a path of its own.
INDEX_PLACEHOLDER = "{index}"
# The effects of the taint a DRA resource's unhealthy tokens get in the ResourceSlices.
NO_SCHEDULE, NO_EXECUTE = "NoSchedule", "NoExecute"
# Kubernetes probes' defaults: periodSeconds, timeoutSeconds, failureThreshold, successThreshold.
DEFAULT_PROBE_INTERVAL = 10.0
DEFAULT_PROBE_TIMEOUT = 1.0
DEFAULT_FAILURE_THRESHOLD = 3
DEFAULT_SUCCESS_THRESHOLD = 1
# lmstat and rlmstat ask a server that may be a redundant triad: seconds, not the 1 s of a port.
DEFAULT_LICENSE_TIMEOUT = 10.0


@dataclass(frozen=True)
class ProbeSpec:
    """How a resource's tokens are checked: ``kind`` is one of PROBE_KINDS, ``target`` its argv
    (command), ``host:port`` (tcp), URL (http), path, with INDEX_PLACEHOLDER for a path per
    token (path), or the license server as lmutil's or rlmutil's ``-c`` takes it (flexlm, rlm:
    ``port@host``, several joined by ":", or a license file), with ``feature`` the FlexNet
    feature or RLM product counted and ``tool`` the lmutil or rlmutil to run. A token turns
    unhealthy after ``failure_threshold`` failed checks in a row and healthy again after
    ``success_threshold`` good ones."""

    kind: str
    target: str | tuple[str, ...]
    interval: float = DEFAULT_PROBE_INTERVAL
    timeout: float = DEFAULT_PROBE_TIMEOUT
    failure_threshold: int = DEFAULT_FAILURE_THRESHOLD
    success_threshold: int = DEFAULT_SUCCESS_THRESHOLD
    # DRA resources only; None: NoSchedule.
    taint_effect: str | None = None
    # License kinds only.
    feature: str | None = None
    tool: str | None = None

    @property
    def per_token(self) -> bool:
        """Whether each token has a check of its own (a path with the token's index)."""
        return self.kind == PATH and INDEX_PLACEHOLDER in str(self.target)

    @property
    def effect(self) -> str:
        return self.taint_effect or NO_SCHEDULE


# Label-selector operators as a NodeSelectorRequirement spells them.
IN, NOT_IN, EXISTS, DOES_NOT_EXIST = "In", "NotIn", "Exists", "DoesNotExist"


@dataclass(frozen=True)
class SelectorRequirement:
    """One requirement of a label selector: ``key`` ``operator`` ``values`` (none for
    EXISTS and DOES_NOT_EXIST)."""

    key: str
    operator: str
    values: tuple[str, ...] = ()


@dataclass(frozen=True)
class NodeSelection:
    """The nodes a cluster pool is for: a label selector as written (``text``, e.g.
    ``"site in (a,b),!spot"``) and its requirements, all of which a node must meet."""

    text: str
    requirements: tuple[SelectorRequirement, ...]


@dataclass(frozen=True)
class ResourceSpec:
    """One extended resource: `count` devices named to pods through the `env` variable.

    ``advertise`` says how the scheduler learns the count: through a device plugin (the
    kubelet), through DRA (ResourceSlices on the API server; the kubelet prepares the claims),
    or by patching the Node's status on the API server (``env`` is then unused).
    ``source`` is the last file that set any of its keys, ``origins`` the file of each key that
    a file set (the others are defaults): where a setting was written changes nothing the
    kubelet or a pod can see, so neither takes part in comparisons. ``probe`` says how its
    tokens' health is checked.
    """

    name: str
    count: int
    env: str
    source: Path = field(compare=False)
    advertise: str = DEVICE_PLUGIN
    origins: Mapping[str, Path] = field(default_factory=dict, compare=False)
    # None: no probe, every token always healthy.
    probe: ProbeSpec | None = None
    # CLUSTER_SCOPE: one pool for the cluster (DRA only); ``nodes`` narrows it (None: all).
    scope: str = NODE_SCOPE
    nodes: NodeSelection | None = None

    @property
    def cluster_scoped(self) -> bool:
        return self.scope == CLUSTER_SCOPE

    def origin(self, key: str) -> Path | None:
        """The file that set ``key``, or None for a default."""
        return self.origins.get(key)


@dataclass(frozen=True)
class AgentSettings:
    device_plugin_dir: Path = DEFAULT_DEVICE_PLUGIN_DIR
    # Read on demand (status, metrics) to tell who holds the tokens; never needed to serve.
    pod_resources_socket: Path = DEFAULT_POD_RESOURCES_SOCKET


@dataclass(frozen=True)
class DraSettings:
    """Dynamic Resource Allocation: how the agent appears to the kubelet as a DRA driver."""

    # The driver's name in ResourceSlices, DeviceClass selectors and CDI device names.
    driver: str = DEFAULT_DRIVER
    # Where the kubelet's plugin watcher looks for registration sockets.
    plugins_registry_dir: Path = DEFAULT_PLUGINS_REGISTRY_DIR
    # <plugins_dir>/<driver>/ holds the DRA service socket and the prepared claims.
    plugins_dir: Path = DEFAULT_PLUGINS_DIR
    # Where the container runtime reads CDI specs (the container's environment).
    cdi_dir: Path = DEFAULT_CDI_DIR

    @property
    def driver_dir(self) -> Path:
        return self.plugins_dir / self.driver


@dataclass(frozen=True)
class MetricsSettings:
    """Where the Prometheus metrics go; neither by default, so no port opens unasked."""

    # A file for node_exporter's textfile collector (the host convention).
    textfile: Path | None = None
    # (IP address, port) of an HTTP listener for scrapes (the DaemonSet convention).
    listen: tuple[str, int] | None = None

    @property
    def enabled(self) -> bool:
        return self.textfile is not None or self.listen is not None


@dataclass(frozen=True)
class KubernetesSettings:
    """API server access, for node-status and DRA resources."""

    kubeconfig: Path = DEFAULT_KUBECONFIG
    # The pod's service-account credentials instead of a kubeconfig.
    in_cluster: bool = False
    # None: $NODE_NAME in a pod (in_cluster), else the host name, lower-cased, as the kubelet
    # names its Node.
    node_name: str | None = None
    resync_seconds: float = DEFAULT_RESYNC_SECONDS
    # Leader election of the cluster pools' publishers (client-go's meaning and defaults).
    lease_duration: float = DEFAULT_LEASE_DURATION
    renew_deadline: float = DEFAULT_RENEW_DEADLINE
    retry_period: float = DEFAULT_RETRY_PERIOD
    # None: the pod's namespace (in_cluster), else the kubeconfig context's, else
    # DEFAULT_LEASE_NAMESPACE.
    lease_namespace: str | None = None


@dataclass(frozen=True)
class Config:
    agent: AgentSettings
    resources: Mapping[str, ResourceSpec]
    files: tuple[Path, ...]
    kubernetes: KubernetesSettings = KubernetesSettings()
    metrics: MetricsSettings = MetricsSettings()
    dra: DraSettings = DraSettings()
    # Resources an earlier file defined and a later one took away with `remove = true`.
    removed: Mapping[str, Path] = field(default_factory=dict)
    # Whether any file has a [kubernetes] table (even an empty one).
    kubernetes_table: bool = False

    def __post_init__(self) -> None:
        # Immutable and in a stable order however it was built, so that holders of a Config can
        # share it and log or serve its resources deterministically.
        ordered = {name: self.resources[name] for name in sorted(self.resources)}
        object.__setattr__(self, "resources", MappingProxyType(ordered))

    @property
    def uses_api_server(self) -> bool:
        """Whether the agent talks to the API server: for a node-status or DRA resource, or,
        given a [kubernetes] table, to remove the node-status resources its Node still lists
        after the last of them left the files while the agent was stopped."""
        modes = {spec.advertise for spec in self.resources.values()}
        return self.kubernetes_table or bool(modes & {NODE_STATUS, DRA})

    @property
    def manages_node_status(self) -> bool:
        """Whether the agent keeps Node-status resources: there are some, or a [kubernetes]
        table lets it remove the ones its Node still lists from before."""
        modes = {spec.advertise for spec in self.resources.values()}
        return self.kubernetes_table or NODE_STATUS in modes

    def scoped(self, scope: str) -> Config:
        """The same configuration with only the resources of ``scope``."""
        kept = {name: spec for name, spec in self.resources.items() if spec.scope == scope}
        return replace(self, resources=kept)

    def advertised_by(self, mode: str) -> Config:
        """The same configuration with only the resources advertised ``mode``'s way."""
        kept = {name: spec for name, spec in self.resources.items() if spec.advertise == mode}
        return replace(self, resources=kept)


def format_listen(address: tuple[str, int]) -> str:
    """E.g. ("::1", 9464) -> "[::1]:9464", as written in the file."""
    host, port = address
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
