"""The API server stand-in itself: lifecycle, the request pipeline (authentication, the
injected failure, routing) and observing. Its parts are mixins: nodes.py (Nodes),
resources.py (resource.k8s.io), pods.py (Pods), leases.py (Leases), scheduler.py (hooks for
what other components do), kubeconfig.py (client configuration)."""

from __future__ import annotations

import copy
import dataclasses
import errno
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any
from urllib.parse import urlsplit

from tests.standin.apiserver.admission import AdmissionPolicies
from tests.standin.apiserver.authz import Authorizer, Rule
from tests.standin.apiserver.certificates import CertificateAuthority, load_chain
from tests.standin.apiserver.discovery import discovery
from tests.standin.apiserver.kubeconfig import ClientConfigMixin
from tests.standin.apiserver.leases import LEASE_PATH, LeasesMixin
from tests.standin.apiserver.nodes import NODE_PATH, NODES_PATH, NodesMixin
from tests.standin.apiserver.partition import Cuts, HeldRequest, PartitionMixin
from tests.standin.apiserver.pods import POD_PATH, PodsMixin
from tests.standin.apiserver.resources import KINDS, ResourcesMixin
from tests.standin.apiserver.scheduler import SchedulerMixin
from tests.standin.apiserver.view import ApiServerView
from tests.standin.apiserver.watch import History
from tests.standin.apiserver.wire import (
    LOG,
    Fail,
    Identity,
    LoggedRequest,
    Reply,
    Server,
    fail,
)
from tests.standin.kubelet import wait_for_view

_BIND_TIMEOUT = 5.0  # start() retries this long while its port is taken


def version_info(version: str) -> dict[str, str]:
    major, minor = version.split(".")[:2]
    return {
        "major": major,
        "minor": minor,
        "gitVersion": f"v{major}.{minor}.0-standin",
        "platform": "linux/amd64",
    }


class ApiServerStandin(
    NodesMixin,
    ResourcesMixin,
    PodsMixin,
    LeasesMixin,
    SchedulerMixin,
    PartitionMixin,
    ClientConfigMixin,
):
    """The API server, serving HTTPS on 127.0.0.1 on a port chosen at construction (or
    given) and kept across stop/start: :attr:`url` and kubeconfigs are valid before the
    first start.

    ``resource_versions``: the versions of resource.k8s.io it serves (discovery.py);
    ``watch_history``: how many changes a watch can start from (older: 410 Expired);
    ``version``: what ``/version`` says; ``device_taints``: whether the DRADeviceTaints
    feature gate is on (beta and on in 1.36; off, the taints of every device in a ResourceSlice
    are dropped on create and update, taints.py). :attr:`device_taints` may be changed while
    stopped, as a restart with other ``--feature-gates`` would.

    Thread-safe: one lock (inside ``_cond``) guards all state, and ``_cond`` is notified at
    every change, every request and every start and stop, so that :meth:`wait_for` wakes up.
    """

    def __init__(
        self,
        ca: CertificateAuthority | None = None,
        *,
        nodes: Iterable[str] = ("node-a",),
        tokens: Mapping[str, bool] | None = None,
        kubelet_sync: bool = True,
        port: int = 0,
        resource_versions: Iterable[str] = ("v1",),
        watch_history: int = 1000,
        version: str = "1.36",
        device_taints: bool = True,
    ) -> None:
        self.ca = ca or CertificateAuthority()
        self.host = "127.0.0.1"
        # Chosen now, so that kubeconfigs can be written before the first start: a client
        # that starts before the API server gets "connection refused" from the right port.
        self.port = port or _free_port(self.host)
        self._kubelet_sync = kubelet_sync
        self._resource_versions = tuple(resource_versions)
        self._version_info = version_info(version)
        self.device_taints = device_taints
        self.tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.tls.minimum_version = ssl.TLSVersion.TLSv1_2
        load_chain(self.tls, self.ca.server_certificate())
        self.tls.load_verify_locations(cadata=self.ca.cert_pem.decode())
        self.tls.verify_mode = ssl.CERT_OPTIONAL
        self.authorizer = Authorizer()
        self._cond = threading.Condition()
        # Guarded by _cond:
        self._server: Server | None = None
        self._thread: threading.Thread | None = None
        self._generation = 0
        self._revision = 0  # like etcd's: every change of any object gets the next one
        self._nodes: dict[str, dict[str, Any]] = {}
        self._objects = {collection: {} for collection in KINDS}
        self._pods = {}
        self._leases = {}
        self._admission = AdmissionPolicies()
        self._history = History(watch_history)
        self._requests: list[LoggedRequest] = []
        self._tls_failures: list[str] = []
        self._connections = 0
        self._failing: tuple[str, str] | None = None  # (method, path) answered with 500
        self._cuts = Cuts()  # clients cut off (partition.py)
        for name in nodes:
            self.add_node(name)
        for token, allowed in (tokens or {}).items():
            self.add_token(token, allowed=allowed)

    @property
    def running(self) -> bool:
        with self._cond:
            return self._server is not None

    def __enter__(self) -> ApiServerStandin:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # --- lifecycle -------------------------------------------------------------------------

    def start(self) -> None:
        """Listen on :attr:`port`, the same every time."""
        with self._cond:
            if self._server is not None:
                raise RuntimeError("the API server stand-in is already running")
            deadline = time.monotonic() + _BIND_TIMEOUT
            while True:
                try:
                    server = Server((self.host, self.port), self)
                    break
                except OSError as error:
                    # Briefly taken, e.g. as the local port of some outgoing connection.
                    if error.errno != errno.EADDRINUSE or time.monotonic() > deadline:
                        raise
                    time.sleep(0.05)
            self._server = server
            self._generation += 1
            self._thread = threading.Thread(
                target=server.serve_forever, args=(0.05,), name="apiserver-standin", daemon=True
            )
            self._thread.start()
            self._changed(f"API server listening on {self.url} (generation {self._generation})")

    def stop(self) -> None:
        """Stop listening and cut every open connection (watches end), as a dying API server
        does. Idempotent; waits for every request thread."""
        with self._cond:
            server, thread = self._server, self._thread
            if server is None or thread is None:
                return
            self._server = self._thread = None
            self._changed("API server stopped")
        server.shutdown()
        thread.join()
        server.close_connections()
        server.server_close()  # joins the request threads

    def drop_connections(self) -> None:
        """Cut every open connection and go on serving, as an API server (or a load balancer
        before it) does with keep-alive connections left idle: a client sees EOF, or a reset,
        on its next request over one."""
        with self._cond:
            server = self._server
        if server is not None:
            server.close_connections()

    # --- test hooks ------------------------------------------------------------------------

    def add_token(
        self,
        token: str,
        *,
        allowed: bool = True,
        user: str | None = None,
        rules: Iterable[Rule] | None = None,
        node: str | None = None,
    ) -> None:
        """Accept a bearer token: allowed everything, or nothing at all, or (``rules``) what
        those RBAC rules allow, e.g. ``authz.DAEMONSET_RULES``. With ``node``, a service
        account's token bound to a pod on that node: the user's extra names the node
        (``authentication.kubernetes.io/node-name``), as admission policies read it."""
        with self._cond:
            self.authorizer.add_token(token, allowed=allowed, user=user, rules=rules, node=node)

    def apply_admission_policies(self, documents: Iterable[Mapping[str, Any]]) -> None:
        """Create or replace ValidatingAdmissionPolicies and their bindings, as ``kubectl
        apply`` does (admission.py; e.g. ``admission.policy_documents(path)``). They hold for
        resource.k8s.io writes from the next request on."""
        with self._cond:
            for document in documents:
                self._admission.apply(document)

    def remove_token(self, token: str) -> None:
        """Forget a token, as when it expires: requests that bear it get 401 from then on."""
        with self._cond:
            self.authorizer.remove_token(token)

    def fail_requests(self, method: str, path: str) -> None:
        """Answer every authenticated ``method`` request for ``path`` with 500, as a server
        whose etcd times out does, until :meth:`stop_failing`: the writes before it stand, as
        when the client crashes right there."""
        with self._cond:
            self._failing = (method, path)

    def stop_failing(self) -> None:
        with self._cond:
            self._failing = None

    # --- observing ---------------------------------------------------------------------------

    @property
    def requests(self) -> tuple[LoggedRequest, ...]:
        with self._cond:
            return tuple(self._requests)

    def snapshot(self) -> ApiServerView:
        with self._cond:
            return self._snapshot()

    def wait_for(
        self, predicate: Callable[[ApiServerView], bool], timeout: float = 20.0
    ) -> ApiServerView:
        """The first view for which ``predicate`` holds; AssertionError with the last one.

        A predicate that raises LookupError (``view.capacity("node-b")`` before the node
        exists, ``view.extended(node)[name]`` before the resource is there) counts as not
        satisfied yet.
        """
        return wait_for_view(
            self._cond, self._snapshot, predicate, timeout, "API server stand-in", "it has"
        )

    # --- serving (called from request threads) ----------------------------------------------

    def handle(
        self,
        method: str,
        target: str,
        headers: Mapping[str, str],
        body: bytes,
        peer_cert: Mapping[str, Any] | None,
        connection: int,
        gone: Callable[[], bool] = lambda: False,
    ) -> Reply | None:
        """The answer, or None for none at all: a cut-off client's request dropped
        (partition.py); ``gone`` says whether the client gave up waiting."""
        url = urlsplit(target)
        content_type = headers.get("content-type")
        identity: Identity | None = None
        with self._cond:
            before = self._revision
            try:
                if method == "GET" and url.path == "/version":
                    reply = Reply(200, dict(self._version_info))
                else:
                    identity = self.authorizer.authenticate(headers.get("authorization"), peer_cert)
                    held = HeldRequest(method, url.path, url.query, identity.user)
                    if not self._hold(identity, held, gone):
                        return None
                    before = self._revision  # the writes of others while it was held
                    if self._failing == (method, url.path):
                        message = "Internal error occurred: etcdserver: request timed out"
                        raise fail(500, "InternalError", message, {})
                    reply = self._route(method, url.path, url.query, content_type, body, identity)
                    if reply.stream is not None:
                        stream = self._held_stream(reply.stream, identity, held, gone)
                        reply = dataclasses.replace(reply, stream=stream)
            except Fail as failure:
                reply = failure.reply
            self._requests.append(
                LoggedRequest(
                    method,
                    url.path,
                    url.query,
                    content_type,
                    identity.user if identity else None,
                    reply.status,
                    body,
                    copy.deepcopy(reply.body),
                    reply.error,
                    connection,
                    self._history.since(before),
                    time.monotonic(),
                    headers.get("user-agent"),
                )
            )
            self._changed(str(self._requests[-1]))
            return reply

    def connected(self) -> int:
        with self._cond:
            self._connections += 1
            self._changed(f"connection {self._connections} accepted")
            return self._connections

    def tls_failed(self, error: str) -> None:
        with self._cond:
            self._tls_failures.append(error)
            self._changed(f"TLS handshake failed: {error}")

    def _route(
        self,
        method: str,
        path: str,
        query: str,
        content_type: str | None,
        body: bytes,
        identity: Identity,
    ) -> Reply:
        if NODE_PATH.fullmatch(path):
            return self._route_node(method, path, content_type, body, identity)
        if path == NODES_PATH:
            return self._route_nodes(method, query, identity)
        if POD_PATH.fullmatch(path):
            return self._route_pods(method, path, query, content_type, body, identity)
        if LEASE_PATH.fullmatch(path):
            return self._route_leases(method, path, query, content_type, body, identity)
        if method == "GET":
            answer = discovery(path, self._resource_versions)
            if answer is not None:
                return answer
        if path.startswith("/apis/resource.k8s.io/v1/"):
            return self._route_resources(method, path, query, content_type, body, identity)
        raise fail(404, "NotFound", "the server could not find the requested resource", {})

    # --- state (caller holds the lock) -----------------------------------------------------

    def _next_revision(self) -> str:
        self._revision += 1
        return str(self._revision)

    def _current_revision(self) -> int:
        return self._revision

    def _serving(self) -> bool:
        return self._server is not None

    def _snapshot(self) -> ApiServerView:
        return ApiServerView(
            self._generation,
            self._server is not None,
            copy.deepcopy(self._nodes),
            tuple(self._requests),
            tuple(self._tls_failures),
            copy.deepcopy(self._objects["resourceslices"]),
            copy.deepcopy(self._objects["resourceclaims"]),
            copy.deepcopy(self._objects["deviceclasses"]),
            copy.deepcopy(self._pods),
            self._connections,
            leases=copy.deepcopy(self._leases),
            held=tuple(self._cuts.held),
            dropped=tuple(self._cuts.dropped),
        )

    def _changed(self, event: str) -> None:
        self._cond.notify_all()
        LOG.info("%s", event)


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        port: int = probe.getsockname()[1]
        return port
