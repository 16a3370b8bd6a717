"""A real Kubernetes control plane for the tests: Debian's etcd, and the kube-apiserver,
kube-scheduler and kube-controller-manager of the release built in tests/kube/go
(``controlplane`` program), on random loopback ports, all state in one temporary directory.

The API server authorizes as a production cluster does (``Node,RBAC``, NodeRestriction, client
certificates, bound service-account tokens); :class:`ControlPlane` hands out kubeconfigs and
clients for an admin, a node (``system:node:<name>``) and a service account whose token is
bound to a pod on a node (so it carries the node's name, as a DaemonSet pod's token does).

No kubelet runs: :meth:`ControlPlane.add_node` writes a Node with capacity and a Ready
condition itself, and the controller manager runs without its node-lifecycle controller, the
one that would find the missing heartbeats and taint the Nodes unreachable.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

from tests.kube.client import KubeClient, wait_until
from tests.kube.flags import HOST, apiserver_flags, audit_log, component_flags, free_port
from tests.kube.programs import CONTROL_PLANE_RELEASE, program
from tests.standin.apiserver.certificates import CertificateAuthority, KeyPair
from tests.standin.apiserver.kubeconfig import ClientConfigMixin

ETCD = Path("/usr/bin/etcd")
STARTUP_TIMEOUT = 120.0  # a busy 2-core CI machine: etcd and the API server's first start
NODE_CAPACITY = {"cpu": "4", "memory": "8Gi", "pods": "110"}
# What a kubelet of the control plane's release writes into its Node.
KUBELET_VERSION = "v1.37.2"
# Controllers a cluster without kubelets can do without: node-lifecycle taints every Node whose
# kubelet never posts a heartbeat (node.kubernetes.io/unreachable, then evicts its pods);
# add_node removes the not-ready taint it would have removed.
CONTROLLERS = "*,-node-lifecycle-controller"
# Every request once, as it completes, with who asked (user and User-Agent) and its answer's
# code: what the agents ask of the API server, read from the API server itself.
AUDIT_POLICY = """\
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
"""


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()
    try:
        process.wait(20)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


class ControlPlane(ClientConfigMixin):
    """etcd, kube-apiserver, kube-scheduler and kube-controller-manager, started by ``with``."""

    def __init__(
        self,
        directory: Path | None = None,
        audit_policy: str = AUDIT_POLICY,
        server_names: tuple[str, ...] = (),
        controllers: str = CONTROLLERS,
    ) -> None:
        """``audit_policy``: the API server's audit policy (default: every request's
        metadata); ``server_names``: more names and addresses its serving certificate holds
        (the ``kubernetes`` Service's address, for pods of a real node); ``controllers``: the
        controller manager's (a real kubelet's node wants node-lifecycle's)."""
        self._own_directory = directory is None
        self._audit_policy = audit_policy
        self._server_names = server_names
        self._controllers = controllers
        self.directory = Path(directory or tempfile.mkdtemp(prefix="kube-cp-"))
        self.ca = CertificateAuthority("token-resource-kube-test-ca")
        self.host = HOST
        self.port = free_port()
        self._processes: list[tuple[str, subprocess.Popen[bytes], IO[bytes]]] = []
        self._commands: dict[str, list[str]] = {}
        self.startup_seconds: dict[str, float] = {}
        self.admin = self.client(self.ca.client_certificate("admin", ("system:masters",)))
        # The Nodes add_node made that are still there (remove_added_nodes deletes them).
        self.added_nodes: list[str] = []

    # Processes

    def _start(self, name: str, command: list[str]) -> None:
        log = (self.directory / f"{name}.log").open("ab")
        process = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT
        )
        self._processes.append((name, process, log))
        self._commands[name] = command

    def restart_apiserver(self) -> None:
        """The API server stopped (SIGTERM, as systemd or the kubelet stops it) and started
        again with the same flags, certificates and etcd; returns when it is ready. Its watch
        cache starts afresh from etcd's current revision, as after any real restart."""
        name = "kube-apiserver"
        index = next(i for i, (each, _, _) in enumerate(self._processes) if each == name)
        _, process, log = self._processes.pop(index)
        _stop(process)
        log.close()
        self._start(name, self._commands[name])
        # Back at its place in the order of stopping: before etcd, after its clients.
        self._processes.insert(index, self._processes.pop())
        wait_until("the restarted API server's /readyz", self._ready, STARTUP_TIMEOUT)

    def log_tail(self, name: str, lines: int = 30) -> str:
        text = (self.directory / f"{name}.log").read_text(errors="replace")
        return "\n".join(text.splitlines()[-lines:])

    def _check_running(self) -> None:
        for name, process, _ in self._processes:
            if process.poll() is not None:
                raise AssertionError(
                    f"{name} exited with {process.returncode}:\n{self.log_tail(name)}"
                )

    def __enter__(self) -> ControlPlane:
        try:
            self._start_all()
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        # The clients of etcd first: the API server drains against a live etcd.
        for _name, process, log in reversed(self._processes):
            _stop(process)
            log.close()
        self._processes.clear()
        if self._own_directory:
            shutil.rmtree(self.directory, ignore_errors=True)

    def _start_all(self) -> None:
        began = time.monotonic()
        binary = str(program(CONTROL_PLANE_RELEASE, "controlplane"))
        etcd_url = self._start_etcd()
        flags = apiserver_flags(
            self.directory, self.ca, self.port, etcd_url, self._audit_policy, self._server_names
        )
        self._start("kube-apiserver", [binary, "kube-apiserver", *flags])
        wait_until("the API server's /readyz", self._ready, STARTUP_TIMEOUT)
        self.startup_seconds["kube-apiserver"] = time.monotonic() - began
        for component, user in (
            ("kube-scheduler", "system:kube-scheduler"),
            ("kube-controller-manager", "system:kube-controller-manager"),
        ):
            kubeconfig = self.write_kubeconfig(
                self.directory / f"{component}.kubeconfig",
                identity=self.ca.client_certificate(user),
            )
            flags = component_flags(component, kubeconfig, self.directory, self._controllers)
            self._start(component, [binary, component, *flags])
        # The controller manager is up when its service-account controller has made the
        # default namespace's "default" ServiceAccount, which every pod needs to be admitted.
        wait_until("the controller manager's default ServiceAccount", self._has_default_account)
        self.startup_seconds["all"] = time.monotonic() - began

    def _start_etcd(self) -> str:
        client, peer = f"http://{HOST}:{free_port()}", f"http://{HOST}:{free_port()}"
        self._start(
            "etcd",
            [
                str(ETCD),
                f"--data-dir={self.directory / 'etcd'}",
                f"--listen-client-urls={client}",
                f"--advertise-client-urls={client}",
                f"--listen-peer-urls={peer}",
                f"--initial-advertise-peer-urls={peer}",
                f"--initial-cluster=default={peer}",
                # A test's etcd needs no durability: no fsync waits on a busy CI disk.
                "--unsafe-no-fsync",
                "--log-level=warn",
            ],
        )
        return client

    def _has_default_account(self) -> bool:
        self._check_running()
        path = "/api/v1/namespaces/default/serviceaccounts/default"
        return bool(self.admin.request("GET", path)[0] == 200)

    def _ready(self) -> bool:
        self._check_running()
        try:
            return self.admin.request("GET", "/readyz")[0] == 200
        except OSError:
            return False

    @property
    def audit_log(self) -> Path:
        return audit_log(self.directory)

    def audit_events(self, user: str | None = None) -> list[dict[str, Any]]:
        """The audit log's events (audit.k8s.io/v1 Event), oldest first; only ``user``'s if
        given."""
        with self.audit_log.open() as log:
            events = [json.loads(line) for line in log if line.strip()]
        return [e for e in events if user is None or e["user"]["username"] == user]

    # Identities

    def client(self, certificate: KeyPair | None = None, token: str | None = None) -> KubeClient:
        return KubeClient(self.host, self.port, self.ca, certificate, token)

    def node_kubeconfig(self, node: str, path: Path) -> Path:
        """The kubelet's own kubeconfig for ``node`` (``system:node:<node>``, ``system:nodes``)."""
        return self.write_kubeconfig(path, identity=self.ca.node_certificate(node))

    def node_client(self, node: str) -> KubeClient:
        return self.client(self.ca.node_certificate(node))

    def admin_kubeconfig(self, path: Path) -> Path:
        return self.write_kubeconfig(
            path, identity=self.ca.client_certificate("admin", ("system:masters",))
        )

    def service_account_token(
        self, namespace: str, name: str, node: str, pod: str | None = None
    ) -> str:
        """A token of ``namespace/name`` bound to a pod on ``node`` (made here, bound to the
        node directly, never run): the API server puts the node's name in the token's claims
        (``authentication.kubernetes.io/node-name``), as for a DaemonSet's pod."""
        pod = pod or f"{name}-{node}"
        self.ensure(f"/api/v1/namespaces/{namespace}/serviceaccounts", {"metadata": {"name": name}})
        created = self.ensure(
            f"/api/v1/namespaces/{namespace}/pods",
            {
                "metadata": {"name": pod},
                "spec": {
                    "nodeName": node,
                    "serviceAccountName": name,
                    "containers": [{"name": "agent", "image": "token-resource:test"}],
                },
            },
        )
        request = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {
                "expirationSeconds": 3600,
                "boundObjectRef": {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "name": pod,
                    "uid": created["metadata"]["uid"],
                },
            },
        }
        answer = self.admin.create(
            f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token", request
        )
        token: str = answer["status"]["token"]
        return token

    def kubectl(self, *args: str, stdin: str | None = None, timeout: float = 60.0) -> str:
        """The release's real kubectl (tests/kube/go/v1.37/kubectl) as the admin; fails on an
        error."""
        kubeconfig = self.directory / "admin.kubeconfig"
        if not kubeconfig.exists():
            self.admin_kubeconfig(kubeconfig)
        done = subprocess.run(
            [program(CONTROL_PLANE_RELEASE, "kubectl"), f"--kubeconfig={kubeconfig}", *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if done.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)}: {done.returncode}\n{done.stderr}")
        return done.stdout

    def token_kubeconfig(self, token: str, path: Path) -> Path:
        return self.write_kubeconfig(path, token=token)

    # Objects

    def ensure(self, collection: str, body: Mapping[str, Any]) -> Any:
        """Create ``body`` in ``collection``, or fetch it if it is there already."""
        status, answer = self.admin.request("POST", collection, body)
        if status == 409:
            return self.admin.get(f"{collection}/{body['metadata']['name']}")
        if status != 201:
            raise AssertionError(f"POST {collection}: {status} {answer}")
        return answer

    def add_node(
        self,
        name: str,
        capacity: Mapping[str, str] = NODE_CAPACITY,
        kubelet_version: str = KUBELET_VERSION,
    ) -> Any:
        """A Node as a kubelet of ``kubelet_version`` registers it: capacity, allocatable, its
        version and Ready, so the scheduler places pods on it. Status is a subresource: it is
        written by a second request."""
        self.added_nodes.append(name)
        self.admin.create(
            "/api/v1/nodes",
            {"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}}},
        )
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        status = {
            "capacity": dict(capacity),
            "allocatable": dict(capacity),
            "nodeInfo": {"kubeletVersion": kubelet_version},
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "KubeletReady",
                    "message": "no kubelet: the test says so",
                    "lastHeartbeatTime": now,
                    "lastTransitionTime": now,
                }
            ],
        }
        self.admin.ok(
            "PATCH",
            f"/api/v1/nodes/{name}/status",
            {"status": status},
            content_type="application/merge-patch+json",
        )
        # The API server's TaintNodesByCondition admission plugin gave the new Node the
        # node.kubernetes.io/not-ready:NoSchedule taint; the node-lifecycle controller would
        # take it off once the Node is Ready, and it does not run: the test takes it off.
        return self.admin.ok(
            "PATCH",
            f"/api/v1/nodes/{name}",
            {"spec": {"taints": None}},
            content_type="application/merge-patch+json",
        )

    def delete_node(self, name: str) -> None:
        if name in self.added_nodes:
            self.added_nodes.remove(name)
        with contextlib.suppress(AssertionError):
            self.admin.delete(f"/api/v1/nodes/{name}")

    def remove_added_nodes(self, kept: int = 0) -> None:
        """Every Node add_node made but the first ``kept`` (a wider fixture's, still in use),
        and the pods bound to them, gone: the control plane is shared by the run, and a Node
        left with a test's capacity would get the next tests' pods (the scheduler places them
        there). The pods at once (no kubelet would confirm a graceful deletion); a Node's
        ResourceSlices follow it (their owner reference)."""
        while len(self.added_nodes) > kept:
            name = self.added_nodes.pop()
            bound = self.admin.get(f"/api/v1/pods?fieldSelector=spec.nodeName={name}")
            for pod in bound["items"]:
                metadata = pod["metadata"]
                self.admin.delete(
                    f"/api/v1/namespaces/{metadata['namespace']}/pods/{metadata['name']}"
                    "?gracePeriodSeconds=0"
                )
            self.delete_node(name)
