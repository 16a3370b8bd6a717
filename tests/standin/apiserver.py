"""A Kubernetes API server stand-in: the Node object and its ``status`` subresource over HTTPS.

It answers the requests a node agent makes when it advertises extended resources through the
Node status, the way a real API server (1.32) answers them:

- ``GET /api/v1/nodes/<name>`` and ``GET /api/v1/nodes/<name>/status``: the Node as JSON.
- ``PATCH /api/v1/nodes/<name>/status`` with ``application/json-patch+json`` (RFC 6902, applied
  by the ``jsonpatch`` library to the whole Node, so RFC 6901 escaping such as
  ``/status/capacity/example.com~1dongle`` works), ``application/merge-patch+json`` (RFC 7386)
  or ``application/strategic-merge-patch+json`` (maps only, see :func:`_strategic_merge`).
  As the real status subresource does, the patch is applied to the whole object but only
  ``status`` is kept: changes to ``metadata`` and ``spec`` are silently ignored. A changed
  ``metadata.resourceVersion`` is a precondition, as on the real server (409 if stale).
- ``PATCH /api/v1/nodes/<name>`` (the main resource): only ``metadata.labels``,
  ``metadata.annotations`` and ``spec`` are kept; status changes are silently ignored there,
  which is exactly the mistake of patching the wrong URL. A node identity patching its own
  Node is held to the NodeRestriction admission plugin's rules for an update
  (plugin/pkg/admission/noderestriction/admission.go, ``admitNode``): its annotations are
  free, its taints may not change, and of its labels it may not add, change or remove one
  under ``node-restriction.kubernetes.io/``, nor one under ``kubernetes.io`` or ``k8s.io``
  (or a subdomain of either) unless the kubelet sets it (k8s.io/kubelet/pkg/apis,
  ``IsKubeletLabel``): 403 with the plugin's words.
- ``GET /version`` without credentials.

Quantities are validated and stored in Kubernetes' canonical form, as the real server
re-serialises them: ``"1000"`` is stored as ``"1k"``, ``"04"`` as ``"4"``, a JSON number ``4``
as ``"4"``. Extended resources must be non-negative integers (422 otherwise). A patch that
changes nothing leaves ``resourceVersion`` alone, as on the real server.

Errors are ``Status`` objects with the real server's status code, reason and message:
400 BadRequest (a JSON patch body that is not a JSON array of objects), 401 Unauthorized,
403 Forbidden, 404 NotFound, 405 MethodNotAllowed, 409 Conflict, 413, 415
UnsupportedMediaType, 422 Invalid (a patch that cannot be applied: a ``remove`` of a
missing path, a failing ``test``, an unknown op; or a result that does not validate).
For a patch that cannot be applied the real server's message is the uninformative
"the server rejected our request due to an error in our request"; the library's reason is
kept in the request log (:attr:`LoggedRequest.error`), never sent.

Authentication: a client certificate signed by the stand-in's CA (verified when given, not
required) or ``Authorization: Bearer <token>``; the certificate wins when both are given, as
in the real server's authenticator chain. No valid credentials: 401 (anonymous auth off).
Authorization: the ``system:masters`` group may do anything; a node identity (CN
``system:node:<name>``, O ``system:nodes``) may get and patch its own Node only (the 1.32
Node authorizer with NodeRestriction; authorization comes before the lookup, so another,
missing node is 403 and not 404); a token is allowed on every node or on none
(:meth:`ApiServerStandin.add_token`); anyone else gets 403.

The kubelet's part: at its status sync the kubelet copies capacity to allocatable for
extended resources and drops allocatable entries no longer in capacity. By default
(``kubelet_sync=True``) the stand-in does that right after every status change, as its own
change (a second ``resourceVersion``), so a PATCH response still shows the old allocatable,
as a real one does; with ``kubelet_sync=False`` the test calls :meth:`ApiServerStandin.sync`.
Test hooks: :meth:`~ApiServerStandin.reset_capacity` (the kubelet or a node re-creation
dropping extended resources behind the agent's back), :meth:`~ApiServerStandin.set_capacity`,
:meth:`~ApiServerStandin.fail_requests` (500 for one method and path),
``add_node``/``delete_node``, ``stop``/``start`` on the same port, the request log,
:meth:`~ApiServerStandin.wait_for` and :meth:`~ApiServerStandin.write_kubeconfig`.

Not implemented: lists, watches, PUT, server-side apply (``application/apply-patch+yaml``
is 415 here).
"""

from __future__ import annotations

import base64
import contextlib
import copy
import datetime
import errno
import ipaddress
import json
import logging
import os
import re
import socket
import ssl
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from decimal import ROUND_UP, Decimal, InvalidOperation
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

# jsonpatch ships type stubs only since 1.34 (Debian 12 and Python 3.9 get older ones).
import jsonpatch  # type: ignore[import-untyped,unused-ignore]
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from tests.standin.kubelet import is_extended_resource_name, wait_for_view

LOG = logging.getLogger("apiserver-standin")

JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
PATCH_TYPES = (JSON_PATCH, MERGE_PATCH, STRATEGIC_MERGE_PATCH)

NODES_GROUP = "system:nodes"
NODE_USER_PREFIX = "system:node:"
MASTERS_GROUP = "system:masters"
DEFAULT_TOKEN_USER = "system:serviceaccount:kube-system:token-resource"
DEFAULT_CAPACITY: Mapping[str, str] = {"cpu": "4", "memory": "8Gi", "pods": "110"}
VERSION_INFO: Mapping[str, str] = {
    "major": "1",
    "minor": "32",
    "gitVersion": "v1.32.0-standin",
    "platform": "linux/amd64",
}

_MAX_BODY = 3 * 1024 * 1024  # the real server's limit for a request body
_HANDSHAKE_TIMEOUT = 10.0
_BIND_TIMEOUT = 5.0  # start() retries this long while its port is taken
_IDLE_TIMEOUT = 60.0  # a keep-alive connection with no request for this long is closed
_SHOWN_REQUESTS = 12
_NODE_PATH = re.compile(r"/api/v1/nodes/(?P<name>[^/]+)(?P<status>/status)?")
_QUANTITY = re.compile(
    r"(?P<sign>[+-]?)(?P<number>[0-9]+(?:\.[0-9]*)?|\.[0-9]+)"
    r"(?:(?P<binary>Ki|Mi|Gi|Ti|Pi|Ei)|(?P<decimal>[numkMGTPE])|[eE](?P<exponent>[+-]?[0-9]+))?"
)
# Kubeconfig values written as plain YAML scalars: those that cannot be mistaken for anything.
_YAML_PLAIN = re.compile(r"[A-Za-z0-9_./+=][A-Za-z0-9_./+=:-]*")
_YAML_NOT_A_STRING = re.compile(r"[-+0-9._:eE]+|true|false|null|yes|no|on|off|y|n", re.I)
_BINARY_SUFFIXES = ("", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei")
_DECIMAL_SUFFIXES = {-9: "n", -6: "u", -3: "m", 0: "", 3: "k", 6: "M", 9: "G", 12: "T"}
_DECIMAL_SUFFIXES.update({15: "P", 18: "E"})
_DECIMAL_EXPONENTS = {suffix: exponent for exponent, suffix in _DECIMAL_SUFFIXES.items()}
# What NodeRestriction lets a node set among the kubernetes.io and k8s.io labels of its Node:
# the kubelet's own labels and those under its namespaces (k8s.io/kubelet/pkg/apis).
_KUBELET_LABELS = frozenset(
    {
        "kubernetes.io/hostname",
        "kubernetes.io/os",
        "kubernetes.io/arch",
        "beta.kubernetes.io/os",
        "beta.kubernetes.io/arch",
        "beta.kubernetes.io/instance-type",
        "node.kubernetes.io/instance-type",
        "topology.kubernetes.io/zone",
        "topology.kubernetes.io/region",
        "failure-domain.beta.kubernetes.io/zone",
        "failure-domain.beta.kubernetes.io/region",
    }
)
_KUBELET_LABEL_NAMESPACES = ("kubelet.kubernetes.io", "node.kubernetes.io")
_NODE_RESTRICTION_NAMESPACE = "node-restriction.kubernetes.io"


# --- certificates ------------------------------------------------------------------------------


@dataclass(frozen=True)
class KeyPair:
    """A certificate and its private key, both PEM."""

    cert_pem: bytes
    key_pem: bytes

    def write(self, cert_path: Path, key_path: Path | None = None) -> None:
        """Write the certificate and the key; with no ``key_path`` both go to ``cert_path``
        (certificate first, as in the kubelet's ``kubelet-client-current.pem``)."""
        if key_path is None:
            _write_private(cert_path, self.cert_pem + self.key_pem)
        else:
            cert_path.write_bytes(self.cert_pem)
            _write_private(key_path, self.key_pem)


@dataclass(frozen=True)
class ClientCertificate(KeyPair):
    """A client certificate: the API server reads the user from CN and the groups from O."""

    user: str
    groups: tuple[str, ...]


class CertificateAuthority:
    """A test CA issuing ECDSA P-256 certificates, valid for a day, that pass Python 3.13's
    strict X.509 checks (key usages, key identifiers)."""

    def __init__(self, common_name: str = "token-resource-test-ca") -> None:
        self._key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
        public = self._key.public_key()
        builder = (
            _builder(name, name, public)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(_key_usage(cert_sign=True), critical=True)
        )
        self._cert = builder.sign(self._key, hashes.SHA256())
        self.cert_pem = self._cert.public_bytes(serialization.Encoding.PEM)

    def issue(
        self,
        common_name: str,
        *,
        organizations: Iterable[str] = (),
        hosts: Iterable[str] = (),
        server: bool = False,
    ) -> KeyPair:
        """A leaf certificate; ``hosts`` (IP addresses or DNS names) become its SANs."""
        key = ec.generate_private_key(ec.SECP256R1())
        attributes = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in organizations]
        attributes.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
        usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
        builder = (
            _builder(x509.Name(attributes), self._cert.subject, key.public_key())
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(_key_usage(cert_sign=False), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self._key.public_key()),
                critical=False,
            )
        )
        names = [_general_name(host) for host in hosts]
        if names:
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        cert = builder.sign(self._key, hashes.SHA256())
        key_pem = key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        return KeyPair(cert.public_bytes(serialization.Encoding.PEM), key_pem)

    def server_certificate(self, hosts: Iterable[str] = ("127.0.0.1", "localhost")) -> KeyPair:
        return self.issue("kube-apiserver", hosts=hosts, server=True)

    def client_certificate(self, user: str, groups: Iterable[str] = ()) -> ClientCertificate:
        groups = tuple(groups)
        pair = self.issue(user, organizations=groups)
        return ClientCertificate(pair.cert_pem, pair.key_pem, user, groups)

    def node_certificate(self, node: str) -> ClientCertificate:
        """The kubelet's own identity for ``node``, as in ``/etc/kubernetes/kubelet.conf``."""
        return self.client_certificate(NODE_USER_PREFIX + node, (NODES_GROUP,))


def client_context(
    ca: CertificateAuthority | None, certificate: KeyPair | None = None
) -> ssl.SSLContext:
    """A client's TLS context trusting ``ca`` (the system's CAs if None), presenting
    ``certificate`` if given. Verifies the host name, as every sane client does."""
    if ca is None:
        context = ssl.create_default_context()
    else:
        context = ssl.create_default_context(cadata=ca.cert_pem.decode())
    if certificate is not None:
        _load_chain(context, certificate)
    return context


def _builder(
    subject: x509.Name, issuer: x509.Name, public_key: ec.EllipticCurvePublicKey
) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.timezone.utc)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public_key), critical=False)
    )


def _key_usage(*, cert_sign: bool) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=True,
        content_commitment=False,
        key_encipherment=not cert_sign,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=cert_sign,
        crl_sign=cert_sign,
        encipher_only=False,
        decipher_only=False,
    )


def _general_name(host: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)


def _write_private(path: Path, data: bytes) -> None:
    """Write a file only its owner can read, as private keys are."""
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "wb") as file:
        file.write(data)


def _load_chain(context: ssl.SSLContext, pair: KeyPair) -> None:
    """ssl reads certificates and keys only from files: a private directory, gone at once."""
    with tempfile.TemporaryDirectory(prefix="apiserver-standin-") as directory:
        path = Path(directory, "pair.pem")
        pair.write(path)
        context.load_cert_chain(path)


# --- quantities --------------------------------------------------------------------------------


def canonical_quantity(value: object) -> str | None:
    """A quantity as the API server stores it (``"1000"`` → ``"1k"``), None if invalid.

    Like resource.Quantity: the suffix family of the input is kept (binary, decimal SI or
    decimal exponent) and the largest suffix that keeps the number whole is chosen;
    fractions become milli, micro or nano units, rounded up to a nano.
    """
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        return None
    text = value.strip() if isinstance(value, str) else json.dumps(value)
    match = _QUANTITY.fullmatch(text)
    if match is None:
        return None
    try:
        number = Decimal(match["sign"] + match["number"])
    except InvalidOperation:
        return None
    if match["binary"]:
        number *= 1024 ** _BINARY_SUFFIXES.index(match["binary"])
        return _binary(number) if abs(number) >= 1024 else _decimal(number, exponent_form=False)
    if match["decimal"]:
        number = number.scaleb(_DECIMAL_EXPONENTS[match["decimal"]])
    elif match["exponent"] is not None:
        number = number.scaleb(int(match["exponent"]))
        return _decimal(number, exponent_form=True)
    return _decimal(number, exponent_form=False)


def _binary(number: Decimal) -> str:
    if number != number.to_integral_value():
        return _decimal(number, exponent_form=False)
    whole, index = int(number), 0
    while whole % 1024 == 0 and index < len(_BINARY_SUFFIXES) - 1:
        whole //= 1024
        index += 1
    return f"{whole}{_BINARY_SUFFIXES[index]}"


def _decimal(number: Decimal, *, exponent_form: bool) -> str:
    if number == 0:
        return "0"
    exponent = 0
    # Fractions: milli, micro, nano; anything finer rounds up (away from zero) to a nano.
    while number != number.to_integral_value() and exponent > -9:
        number = number.scaleb(3)
        exponent -= 3
    if number != number.to_integral_value():
        number = number.to_integral_value(rounding=ROUND_UP)
    whole = int(number)
    while whole % 1000 == 0 and exponent < 18:
        whole //= 1000
        exponent += 3
    if exponent_form:
        return f"{whole}e{exponent}" if exponent else str(whole)
    return f"{whole}{_DECIMAL_SUFFIXES[exponent]}"


# --- state ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LoggedRequest:
    """One request as the stand-in saw it, with its answer."""

    method: str
    path: str  # without the query string
    query: str
    content_type: str | None  # as sent, parameters and all
    identity: str | None  # the authenticated user name; None if authentication failed
    status: int
    body: bytes  # the request body
    response: Any  # the JSON answer (a Node, or a Status for errors)
    error: str | None = None  # why a patch failed, in the library's words (never sent)

    def json(self) -> Any:
        """The request body as JSON."""
        return json.loads(self.body)

    def __str__(self) -> str:
        text = f"{self.method} {self.path} [{self.identity or 'unauthenticated'}] -> {self.status}"
        if self.content_type:
            text += f" ({self.content_type})"
        if self.body:
            text += f" {self.body[:200].decode(errors='replace')}"
        if self.error:
            text += f": {self.error}"
        elif self.status >= 400 and isinstance(self.response, dict):
            text += f": {self.response.get('message')}"
        return text


@dataclass(frozen=True)
class ApiServerView:
    """A copy of the stand-in's state (nodes are deep copies: change them freely)."""

    generation: int  # incremented at every start
    running: bool
    nodes: Mapping[str, dict[str, Any]]
    requests: tuple[LoggedRequest, ...]
    tls_failures: tuple[str, ...]  # handshakes the server saw fail, oldest first

    def annotations(self, node: str) -> dict[str, str]:
        return dict(self.nodes[node]["metadata"].get("annotations") or {})

    def capacity(self, node: str) -> dict[str, str]:
        return dict(self.nodes[node]["status"].get("capacity") or {})

    def allocatable(self, node: str) -> dict[str, str]:
        return dict(self.nodes[node]["status"].get("allocatable") or {})

    def extended(self, node: str, field_name: str = "capacity") -> dict[str, str]:
        """The extended resources in ``status.<field_name>`` only, for terse asserts."""
        resources = self.nodes[node]["status"].get(field_name) or {}
        return {k: v for k, v in resources.items() if is_extended_resource_name(k)}

    def resource_version(self, node: str) -> int:
        return int(self.nodes[node]["metadata"]["resourceVersion"])

    def patches(self, node: str | None = None) -> list[LoggedRequest]:
        """The PATCH requests, of one node's URLs if named."""
        return [
            r
            for r in self.requests
            if r.method == "PATCH" and (node is None or _node_of(r.path) == node)
        ]

    def pretty(self) -> str:
        lines = [f"API server {'running' if self.running else 'stopped'}:"]
        for name, node in self.nodes.items():
            rv = node["metadata"]["resourceVersion"]
            lines.append(
                f"  node {name} (resourceVersion {rv}): capacity {self.capacity(name)}, "
                f"allocatable {self.allocatable(name)}"
            )
        shown = self.requests[-_SHOWN_REQUESTS:]
        lines.append(f"  last {len(shown)} of {len(self.requests)} requests:")
        lines.extend(f"    {request}" for request in shown)
        lines.extend(f"  TLS failure: {failure}" for failure in self.tls_failures[-3:])
        return "\n".join(lines)


@dataclass(frozen=True)
class _Identity:
    user: str
    groups: tuple[str, ...]
    token: str | None = None  # the bearer token it authenticated with


@dataclass(frozen=True)
class _Reply:
    status: int
    body: Mapping[str, Any]
    error: str | None = None  # for the log only


class _Fail(Exception):
    """Answer the request with this Status."""

    def __init__(self, reply: _Reply) -> None:
        super().__init__(reply.body.get("message"))
        self.reply = reply


def status_object(
    code: int, reason: str, message: str, details: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """A ``Status`` as the API server sends it for an error."""
    status: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
    }
    if details is not None:
        status["details"] = dict(details)
    status["code"] = code
    return status


def _fail(
    code: int,
    reason: str,
    message: str,
    details: Mapping[str, Any] | None = None,
    error: str | None = None,
) -> _Fail:
    return _Fail(_Reply(code, status_object(code, reason, message, details), error))


def _not_found(name: str) -> _Fail:
    return _fail(404, "NotFound", f'nodes "{name}" not found', {"name": name, "kind": "nodes"})


def _invalid(name: str, path: str, value: object, detail: str) -> _Fail:
    """What field validation answers (``Node "a" is invalid: ...``)."""
    shown = value if isinstance(value, str) else json.dumps(value)
    cause = f"Invalid value: {json.dumps(shown)}: {detail}"
    return _fail(
        422,
        "Invalid",
        f'Node "{name}" is invalid: {path}: {cause}',
        {
            "name": name,
            "kind": "Node",
            "causes": [{"reason": "FieldValueInvalid", "message": cause, "field": path}],
        },
    )


def _node_of(path: str) -> str | None:
    match = _NODE_PATH.fullmatch(path)
    return unquote(match["name"]) if match else None


def _node_identity(identity: _Identity) -> str | None:
    """The node name of a node identity (user system:node:<name> in group system:nodes)."""
    if identity.user.startswith(NODE_USER_PREFIX) and NODES_GROUP in identity.groups:
        return identity.user[len(NODE_USER_PREFIX) :]
    return None


def _admit_own_node_update(
    name: str, current: Mapping[str, Any], updated: Mapping[str, Any]
) -> None:
    """NodeRestriction's rules for a node updating its own Node (``admitNode``, Update)."""
    if current["spec"].get("taints") != updated["spec"].get("taints"):
        raise _forbidden(name, f'node "{name}" is not allowed to modify taints')
    before = current["metadata"].get("labels") or {}
    after = updated["metadata"].get("labels") or {}
    modified = {key for key in before.keys() | after.keys() if before.get(key) != after.get(key)}
    forbidden = sorted(key for key in modified if _is_forbidden_node_label(key))
    if forbidden:
        raise _forbidden(name, f"is not allowed to modify labels: {', '.join(forbidden)}")


def _is_forbidden_node_label(key: str) -> bool:
    namespace = key.partition("/")[0] if "/" in key else ""

    def within(domain: str) -> bool:
        return namespace == domain or namespace.endswith(f".{domain}")

    if within(_NODE_RESTRICTION_NAMESPACE):
        return True
    kubelet_label = key in _KUBELET_LABELS or any(map(within, _KUBELET_LABEL_NAMESPACES))
    return (within("kubernetes.io") or within("k8s.io")) and not kubelet_label


def _forbidden(name: str, reason: str) -> _Fail:
    """admission.NewForbidden's answer for a Node."""
    return _fail(
        403, "Forbidden", f'nodes "{name}" is forbidden: {reason}', {"name": name, "kind": "nodes"}
    )


def new_node(name: str, capacity: Mapping[str, str] | None = None) -> dict[str, Any]:
    """A Node as a freshly registered kubelet leaves it (allocatable = capacity)."""
    capacity = dict(DEFAULT_CAPACITY if capacity is None else capacity)
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "kind": "Node",
        "apiVersion": "v1",
        "metadata": {
            "name": name,
            "uid": str(uuid.uuid4()),
            "resourceVersion": "0",
            "creationTimestamp": now,
            "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux"},
        },
        "spec": {},
        "status": {"capacity": capacity, "allocatable": dict(capacity)},
    }


# --- the server ----------------------------------------------------------------------------------


class ApiServerStandin:
    """The API server, serving HTTPS on 127.0.0.1 on a port chosen at construction (or
    given) and kept across stop/start: :attr:`url` and kubeconfigs are valid before the
    first start.

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
    ) -> None:
        self.ca = ca or CertificateAuthority()
        self.host = "127.0.0.1"
        # Chosen now, so that kubeconfigs can be written before the first start: a client
        # that starts before the API server gets "connection refused" from the right port.
        self.port = port or _free_port(self.host)
        self._kubelet_sync = kubelet_sync
        self._tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self._tls.minimum_version = ssl.TLSVersion.TLSv1_2
        _load_chain(self._tls, self.ca.server_certificate())
        self._tls.load_verify_locations(cadata=self.ca.cert_pem.decode())
        self._tls.verify_mode = ssl.CERT_OPTIONAL
        self._cond = threading.Condition()
        # Guarded by _cond:
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self._generation = 0
        self._revision = 0  # like etcd's: every change of any node gets the next one
        self._nodes: dict[str, dict[str, Any]] = {}
        self._tokens: dict[str, tuple[str, bool]] = {}
        self._requests: list[LoggedRequest] = []
        self._tls_failures: list[str] = []
        self._failing: tuple[str, str] | None = None  # (method, path) answered with 500
        for name in nodes:
            self.add_node(name)
        for token, allowed in (tokens or {}).items():
            self.add_token(token, allowed=allowed)

    @property
    def url(self) -> str:
        return f"https://{self.host}:{self.port}"

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
                    server = _Server((self.host, self.port), self)
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
        """Stop listening and cut every open connection, as a dying API server does.
        Idempotent; waits for every request thread."""
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

    # --- test hooks ------------------------------------------------------------------------

    def add_node(self, name: str, capacity: Mapping[str, str] | None = None) -> None:
        """Register a Node (or re-create it: a new uid, only the given capacity)."""
        with self._cond:
            self._store(new_node(name, capacity))
            self._changed(f"node {name} created")

    def delete_node(self, name: str) -> None:
        with self._cond:
            del self._nodes[name]
            self._revision += 1
            self._changed(f"node {name} deleted")

    def add_token(self, token: str, *, allowed: bool = True, user: str | None = None) -> None:
        """Accept a bearer token, allowed to get and patch every Node, or nothing at all."""
        with self._cond:
            self._tokens[token] = (user or DEFAULT_TOKEN_USER, allowed)

    def reset_capacity(self, name: str, *, to_zero: bool = False) -> None:
        """Drop (or set to "0") every extended resource in capacity and allocatable, behind
        the agent's back, as a kubelet restart or a re-created Node may."""
        with self._cond:
            node = self._node(name)
            for field_name in ("capacity", "allocatable"):
                resources = node["status"].setdefault(field_name, {})
                for resource in [r for r in resources if is_extended_resource_name(r)]:
                    if to_zero:
                        resources[resource] = "0"
                    else:
                        del resources[resource]
            self._store(node)
            self._changed(f"node {name}: extended resources reset")

    def set_capacity(self, name: str, resource: str, value: str | None) -> None:
        """Set (None: remove) one capacity entry behind the agent's back; allocatable
        follows at the kubelet's sync."""
        with self._cond:
            node = self._node(name)
            capacity = node["status"].setdefault("capacity", {})
            if value is None:
                capacity.pop(resource, None)
            else:
                capacity[resource] = value
            self._store(node)
            self._changed(f"node {name}: capacity {resource} set to {value}")
            if self._kubelet_sync:
                self._sync(name)

    def fail_requests(self, method: str, path: str) -> None:
        """Answer every authenticated ``method`` request for ``path`` with 500, as a server
        whose etcd times out does, until :meth:`stop_failing`: the writes before it stand, as
        when the client crashes right there."""
        with self._cond:
            self._failing = (method, path)

    def stop_failing(self) -> None:
        with self._cond:
            self._failing = None

    def sync(self, name: str | None = None) -> None:
        """The kubelet's node-status sync for one node (every node if None)."""
        with self._cond:
            for node in [name] if name is not None else list(self._nodes):
                self._sync(node)

    # --- observing ---------------------------------------------------------------------------

    def node(self, name: str) -> dict[str, Any]:
        """A deep copy of the Node; KeyError if there is none."""
        with self._cond:
            return copy.deepcopy(self._nodes[name])

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

    # --- client configuration ----------------------------------------------------------------

    def write_kubeconfig(
        self,
        path: Path,
        *,
        identity: KeyPair | None = None,
        token: str | None = None,
        inline: bool = True,
        key_in_cert_file: bool = False,
        relative_paths: bool = False,
        ca: CertificateAuthority | None = None,
        server: str | None = None,
    ) -> Path:
        """Write a kubeconfig, in the format of the kubelet's ``/etc/kubernetes/kubelet.conf``.

        ``identity`` (a client certificate) and/or ``token`` are the credentials. Inline
        (``certificate-authority-data``, ``client-certificate-data``, ``client-key-data``,
        base64 PEM) or, with ``inline=False``, as files next to ``path`` named after it
        (``<stem>-ca.crt``, ``<stem>-client.crt``, ``<stem>-client.key``) under
        ``certificate-authority``, ``client-certificate``, ``client-key``; absolute paths,
        or relative to the kubeconfig's directory with ``relative_paths`` (as kubectl
        resolves them). ``key_in_cert_file`` puts certificate and key in one file that both
        keys name, as kubeadm's kubelet.conf does (``kubelet-client-current.pem``).
        ``ca`` replaces the CA the client trusts; ``server`` the URL.
        """
        path = Path(path)
        ca_pem = (ca or self.ca).cert_pem
        cluster: dict[str, str] = {}
        user: dict[str, str] = {}
        if inline:
            cluster["certificate-authority-data"] = _b64(ca_pem)
            if identity is not None:
                user["client-certificate-data"] = _b64(identity.cert_pem)
                user["client-key-data"] = _b64(identity.key_pem)
        else:

            def named(suffix: str) -> str:
                file = path.with_name(f"{path.stem}-{suffix}")
                return file.name if relative_paths else str(file.absolute())

            cluster["certificate-authority"] = named("ca.crt")
            path.with_name(f"{path.stem}-ca.crt").write_bytes(ca_pem)
            if identity is not None:
                if key_in_cert_file:
                    identity.write(path.with_name(f"{path.stem}-client.pem"))
                    user["client-certificate"] = user["client-key"] = named("client.pem")
                else:
                    identity.write(
                        path.with_name(f"{path.stem}-client.crt"),
                        path.with_name(f"{path.stem}-client.key"),
                    )
                    user["client-certificate"] = named("client.crt")
                    user["client-key"] = named("client.key")
        cluster["server"] = server or self.url
        if token is not None:
            user["token"] = token
        lines = [
            "apiVersion: v1",
            "clusters:",
            "- cluster:",
            *(f"    {key}: {_yaml(value)}" for key, value in cluster.items()),
            "  name: default-cluster",
            "contexts:",
            "- context:",
            "    cluster: default-cluster",
            "    namespace: default",
            "    user: default-auth",
            "  name: default-context",
            "current-context: default-context",
            "kind: Config",
            "preferences: {}",
            "users:",
            "- name: default-auth",
            "  user:" + ("" if user else " {}"),
            *(f"    {key}: {_yaml(value)}" for key, value in user.items()),
        ]
        _write_private(path, "\n".join(lines).encode() + b"\n")
        return path

    def write_service_account(self, directory: Path, token: str) -> dict[str, str]:
        """In-cluster credentials: ``token``, ``ca.crt`` and ``namespace`` in ``directory``
        (as in /var/run/secrets/kubernetes.io/serviceaccount); returns the environment
        variables a pod gets (KUBERNETES_SERVICE_HOST and _PORT)."""
        directory.mkdir(parents=True, exist_ok=True)
        _write_private(directory / "token", token.encode())
        (directory / "ca.crt").write_bytes(self.ca.cert_pem)
        (directory / "namespace").write_text("kube-system")
        return {"KUBERNETES_SERVICE_HOST": self.host, "KUBERNETES_SERVICE_PORT": str(self.port)}

    # --- serving (called from request threads) ----------------------------------------------

    def _handle(
        self,
        method: str,
        target: str,
        headers: Mapping[str, str],
        body: bytes,
        peer_cert: Mapping[str, Any] | None,
    ) -> _Reply:
        url = urlsplit(target)
        content_type = headers.get("content-type")
        identity: _Identity | None = None
        with self._cond:
            try:
                if method == "GET" and url.path == "/version":
                    reply = _Reply(200, dict(VERSION_INFO))
                else:
                    identity = self._authenticate(headers.get("authorization"), peer_cert)
                    if self._failing == (method, url.path):
                        message = "Internal error occurred: etcdserver: request timed out"
                        raise _fail(500, "InternalError", message, {})
                    reply = self._route(method, url.path, content_type, body, identity)
            except _Fail as failure:
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
                )
            )
            self._changed(str(self._requests[-1]))
            return reply

    def _tls_failed(self, error: str) -> None:
        with self._cond:
            self._tls_failures.append(error)
            self._changed(f"TLS handshake failed: {error}")

    def _authenticate(
        self, authorization: str | None, peer_cert: Mapping[str, Any] | None
    ) -> _Identity:
        """x509 first, then the bearer token; anonymous requests are refused."""
        if peer_cert:  # present only if it verified against the CA
            user, groups = "", []
            for rdn in peer_cert.get("subject", ()):
                for key, value in rdn:
                    if key == "commonName":
                        user = value
                    elif key == "organizationName":
                        groups.append(value)
            if user:
                return _Identity(user, tuple(groups))
        parts = (authorization or "").split(" ", 2)
        if len(parts) >= 2 and parts[0].lower() == "bearer":
            known = self._tokens.get(parts[1]) if parts[1] else None
            if known is not None:
                return _Identity(known[0], (), parts[1])
        raise _fail(401, "Unauthorized", "Unauthorized")

    def _authorize(self, identity: _Identity, verb: str, resource: str, name: str) -> None:
        if MASTERS_GROUP in identity.groups:
            return
        if identity.token is not None and self._tokens[identity.token][1]:
            return
        denied = (
            f'nodes "{name}" is forbidden: User "{identity.user}" cannot {verb} resource '
            f'"{resource}" in API group "" at the cluster scope'
        )
        own = _node_identity(identity)
        if own is not None:
            if own == name:
                return
            if verb == "patch":  # NodeRestriction's words
                denied = (
                    f'nodes "{name}" is forbidden: '
                    f'node "{own}" is not allowed to modify node "{name}"'
                )
            else:
                denied += f": node '{own}' cannot read '{name}', only its own Node object"
        raise _fail(403, "Forbidden", denied, {"name": name, "kind": "nodes"})

    def _route(
        self,
        method: str,
        path: str,
        content_type: str | None,
        body: bytes,
        identity: _Identity,
    ) -> _Reply:
        match = _NODE_PATH.fullmatch(path)
        if match is None:
            raise _fail(404, "NotFound", "the server could not find the requested resource", {})
        name, status = unquote(match["name"]), bool(match["status"])
        resource = "nodes/status" if status else "nodes"
        if method not in ("GET", "PATCH"):
            raise _fail(
                405,
                "MethodNotAllowed",
                "the server does not allow this method on the requested resource",
                {},
            )
        self._authorize(identity, method.lower(), resource, name)
        if method == "GET":
            return _Reply(200, copy.deepcopy(self._node(name)))
        patch_type = (content_type or "").partition(";")[0].strip().lower()
        if patch_type not in PATCH_TYPES:
            raise _fail(
                415,
                "UnsupportedMediaType",
                "the body of the request was in an unknown format - accepted media types "
                f"include: {', '.join(PATCH_TYPES)}",
            )
        current = self._node(name)
        patched = _apply_patch(patch_type, current, body)
        updated = copy.deepcopy(current)
        metadata = patched.get("metadata")
        metadata = metadata if isinstance(metadata, dict) else {}
        if status:
            updated["status"] = _validated_status(name, patched.get("status"))
        else:
            for key in ("labels", "annotations"):
                _set_or_drop(updated["metadata"], key, _string_map(name, key, metadata.get(key)))
            updated["spec"] = patched.get("spec") if isinstance(patched.get("spec"), dict) else {}
            if _node_identity(identity) == name:
                _admit_own_node_update(name, current, updated)
        wanted_version = metadata.get("resourceVersion")
        if wanted_version not in (None, current["metadata"]["resourceVersion"]):
            raise _fail(
                409,
                "Conflict",
                f'Operation cannot be fulfilled on nodes "{name}": the object has been '
                "modified; please apply your changes to the latest version and try again",
                {"name": name, "kind": "nodes"},
            )
        if updated == current:  # a no-op: no new resourceVersion, as on the real server
            return _Reply(200, current)
        self._store(updated)
        self._changed(f"node {name}: {resource} patched")
        if status and self._kubelet_sync:
            self._sync(name)
        return _Reply(200, copy.deepcopy(updated))

    # --- state (caller holds the lock) -----------------------------------------------------

    def _node(self, name: str) -> dict[str, Any]:
        """A deep copy of the stored Node; 404 if there is none."""
        try:
            return copy.deepcopy(self._nodes[name])
        except KeyError:
            raise _not_found(name) from None

    def _store(self, node: dict[str, Any]) -> None:
        self._revision += 1
        node["metadata"]["resourceVersion"] = str(self._revision)
        self._nodes[node["metadata"]["name"]] = node

    def _sync(self, name: str) -> None:
        """The kubelet's MachineInfo setter: allocatable follows capacity for extended
        resources; extended resources no longer in capacity leave allocatable."""
        node = self._node(name)
        capacity = node["status"].get("capacity") or {}
        allocatable = node["status"].setdefault("allocatable", {})
        for resource in list(allocatable):
            if resource not in capacity and is_extended_resource_name(resource):
                del allocatable[resource]
        for resource, value in capacity.items():
            if is_extended_resource_name(resource):
                allocatable[resource] = value
        if node != self._nodes[name]:
            self._store(node)
            self._changed(f"node {name}: kubelet synced allocatable {allocatable}")

    def _snapshot(self) -> ApiServerView:
        return ApiServerView(
            self._generation,
            self._server is not None,
            copy.deepcopy(self._nodes),
            tuple(self._requests),
            tuple(self._tls_failures),
        )

    def _changed(self, event: str) -> None:
        self._cond.notify_all()
        LOG.info("%s", event)


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        port: int = probe.getsockname()[1]
        return port


def _apply_patch(patch_type: str, current: dict[str, Any], body: bytes) -> dict[str, Any]:
    """The patched object, with the real server's 400 and 422 answers."""
    try:
        patch = json.loads(body)
    except (ValueError, UnicodeDecodeError) as error:
        if patch_type == JSON_PATCH:
            raise _fail(400, "BadRequest", str(error)) from None
        raise _fail(400, "BadRequest", "Invalid JSON Patch", error=str(error)) from None
    if patch_type == JSON_PATCH:
        result = _json_patch(current, patch)
    else:
        if not isinstance(patch, dict):
            raise _fail(400, "BadRequest", "Invalid JSON Patch", error="not a JSON object")
        if patch_type == STRATEGIC_MERGE_PATCH:
            problem = _strategic_problem(patch)
            if problem:
                raise _cannot_apply(problem)
        result = _merge(current, patch)
    if not isinstance(result, dict):
        raise _cannot_apply("the patched document is not an object")
    return result


def _json_patch(current: dict[str, Any], patch: Any) -> Any:
    """RFC 6902 by the jsonpatch library."""
    # What Go's json.Unmarshal into a jsonpatch.Patch refuses is a 400; null is no patch.
    patch = [] if patch is None else patch
    if not isinstance(patch, list):
        raise _fail(400, "BadRequest", _unmarshal_error(patch, "Patch"))
    for operation in patch:
        if not isinstance(operation, dict):
            raise _fail(400, "BadRequest", _unmarshal_error(operation, "Operation"))
    try:
        return jsonpatch.JsonPatch(patch).apply(current)
    except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as error:
        raise _cannot_apply(str(error)) from None
    except (TypeError, ValueError, KeyError, IndexError, AttributeError) as error:
        raise _cannot_apply(f"{type(error).__name__}: {error}") from None


def _unmarshal_error(value: object, go_type: str) -> str:
    """Go's words for JSON of the wrong type."""
    kinds = ((bool, "bool"), (str, "string"), ((int, float), "number"), (dict, "object"))
    kind = next((k for t, k in kinds if isinstance(value, t)), "array")
    return f"json: cannot unmarshal {kind} into Go value of type jsonpatch.{go_type}"


def _cannot_apply(error: str) -> _Fail:
    """A JSON patch that does not apply: the real server keeps the reason to itself."""
    message = "the server rejected our request due to an error in our request"
    return _fail(422, "Invalid", message, {}, error)


def _merge(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = _merge(result.get(key), value)
    return result


def _strategic_problem(patch: Any, path: str = "") -> str | None:
    """A strategic merge patch is a merge patch for maps; the stand-in refuses the parts
    where they differ (lists, ``$patch`` directives) rather than get them wrong."""
    if isinstance(patch, list):
        return f"the stand-in does not merge lists strategically ({path or '/'})"
    if isinstance(patch, dict):
        for key, value in patch.items():
            if key.startswith("$"):
                return f"the stand-in does not support the directive {key} ({path or '/'})"
            problem = _strategic_problem(value, f"{path}/{key}")
            if problem:
                return problem
    return None


def _validated_status(name: str, status: Any) -> dict[str, Any]:
    """Decode and validate ``status`` as the server would, quantities made canonical."""
    if status is None:
        return {}
    if not isinstance(status, dict):
        raise _invalid(name, "status", status, "must be an object")
    result: dict[str, Any] = copy.deepcopy(status)
    for field_name in ("capacity", "allocatable"):
        resources = result.get(field_name)
        if resources is None:
            result.pop(field_name, None)
            continue
        if not isinstance(resources, dict):
            raise _invalid(name, f"status.{field_name}", resources, "must be a map")
        for resource, value in resources.items():
            where = f"status.{field_name}[{resource}]"
            quantity = canonical_quantity(value)
            if quantity is None:
                raise _invalid(
                    name,
                    where,
                    value,
                    "quantities must match the regular expression "
                    "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'",
                )
            if quantity.startswith("-"):
                raise _invalid(name, where, quantity, "must be greater than or equal to 0")
            if is_extended_resource_name(resource) and not _is_whole(quantity):
                raise _invalid(name, where, quantity, "must be an integer")
            resources[resource] = quantity
    return result


def _is_whole(quantity: str) -> bool:
    """Canonical quantities end in n, u or m exactly when they have a fraction."""
    return not quantity.endswith(("n", "u", "m")) and "e-" not in quantity


def _string_map(name: str, key: str, value: Any) -> dict[str, str] | None:
    if value is None:
        return None
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise _invalid(name, f"metadata.{key}", value, "must be a map of strings")
    return dict(value)


def _set_or_drop(target: dict[str, Any], key: str, value: object) -> None:
    if value is None:
        target.pop(key, None)
    else:
        target[key] = value


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _yaml(value: str) -> str:
    """A YAML scalar: plain if that is safe, else double-quoted (JSON's escapes are YAML's)."""
    if _YAML_PLAIN.fullmatch(value) and not _YAML_NOT_A_STRING.fullmatch(value):
        return value
    return json.dumps(value)


# --- HTTP plumbing -------------------------------------------------------------------------------


class _Server(ThreadingHTTPServer):
    """Accepts TCP connections; each request thread does its own TLS handshake, so a client
    that never finishes one blocks nobody."""

    daemon_threads = False
    block_on_close = True  # server_close() joins every request thread

    def __init__(self, address: tuple[str, int], standin: ApiServerStandin) -> None:
        self.standin = standin
        self._connections: set[ssl.SSLSocket] = set()
        self._connections_lock = threading.Lock()
        super().__init__(address, _Handler)
        self.socket = standin._tls.wrap_socket(
            self.socket, server_side=True, do_handshake_on_connect=False
        )

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._connections_lock:
            self._connections.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self._connections_lock:
            self._connections.discard(request)
        super().shutdown_request(request)

    def close_connections(self) -> None:
        """Cut every open connection; the request threads see EOF and end."""
        with self._connections_lock:
            connections = list(self._connections)
        for connection in connections:
            # The plain socket's shutdown: the SSL object stays its request thread's.
            with contextlib.suppress(OSError):
                socket.socket.shutdown(connection, socket.SHUT_RDWR)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Failed handshakes and cut connections are normal here; no tracebacks on stderr."""
        LOG.debug("connection from %s ended with an error", client_address, exc_info=True)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server
    request: ssl.SSLSocket
    timeout = _IDLE_TIMEOUT

    def setup(self) -> None:
        # Headers and body leave in two writes: without this, each answer waits for the
        # client's delayed ACK (Nagle), 40 ms a request.
        self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.request.settimeout(_HANDSHAKE_TIMEOUT)
        try:
            self.request.do_handshake()
        except (ssl.SSLError, OSError) as error:
            self.server.standin._tls_failed(f"{self.client_address[0]}: {error}")
            raise
        super().setup()

    def do_GET(self) -> None:
        self._serve()

    def do_PATCH(self) -> None:
        self._serve()

    def do_PUT(self) -> None:
        self._serve()

    def do_POST(self) -> None:
        self._serve()

    def do_DELETE(self) -> None:
        self._serve()

    def _serve(self) -> None:
        try:
            body = self._read_body()
        except _Fail as failure:
            self.close_connection = True
            self._send(failure.reply)
            return
        headers = {key.lower(): value for key, value in self.headers.items()}
        reply = self.server.standin._handle(
            self.command, self.path, headers, body, self.request.getpeercert()
        )
        self._send(reply)

    def _read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks: list[bytes] = []
            total = 0
            while True:
                size = int(self.rfile.readline().split(b";")[0], 16)
                total += size
                if total > _MAX_BODY:
                    raise _fail(413, "RequestEntityTooLarge", "Request entity too large")
                if not size:  # the last chunk, then trailers up to an empty line
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size + 2)[:size])  # with its CRLF
        length = int(self.headers.get("Content-Length") or 0)
        if length > _MAX_BODY:
            raise _fail(413, "RequestEntityTooLarge", "Request entity too large")
        return self.rfile.read(length)

    def _send(self, reply: _Reply) -> None:
        data = json.dumps(reply.body).encode()
        self.send_response(reply.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        LOG.debug("%s %s", self.client_address[0], format % args)
