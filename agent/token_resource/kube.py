"""Kubernetes API access for node-status resources: credentials, TLS, the Node calls.

The standard library does the HTTP (``http.client`` over an ``ssl`` context that always
verifies the server against the kubeconfig's CA); PyYAML reads kubeconfig files and is only
imported when one is needed, so device-plugin-only installs never load it. Every call is
blocking: the agent runs them in a worker thread.
"""

from __future__ import annotations

import base64
import http.client
import json
import os
import re
import socket
import ssl
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

from token_resource.config import KubernetesSettings, resource_name_problem

REQUEST_TIMEOUT = 10.0
UNPROCESSABLE = 422  # among others, a JSON patch whose "test" op failed
JSON_PATCH = "application/json-patch+json"
SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
# The extended resources the agent put on its Node, as node-feature-discovery keeps its own in
# nfd.node.kubernetes.io/extended-resources: comma-separated, sorted. An annotation because
# NodeRestriction lets a node identity change its own Node's annotations freely (it restricts
# only labels under kubernetes.io, k8s.io and node-restriction.kubernetes.io, and taints:
# plugin/pkg/admission/noderestriction/admission.go, admitNode), so the kubelet's credentials
# suffice.
OWNED_ANNOTATION = "token-resource/extended-resources"


class KubeError(Exception):
    """The API server could not be used: no credentials, unreachable, or it said no."""


class ApiError(KubeError):
    """The API server answered with an error status."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status = status


@dataclass(frozen=True)
class Credentials:
    server: str  # https://host:port[/prefix]
    tls: ssl.SSLContext
    token: str | None


def default_node_name() -> str:
    """The host name, lower-cased: the name the kubelet gives its Node by default."""
    return socket.gethostname().lower()


def node_name(settings: KubernetesSettings) -> str:
    return settings.node_name or default_node_name()


def load_credentials(settings: KubernetesSettings) -> Credentials:
    """Read the credentials afresh (the kubelet rotates its client certificate)."""
    if settings.in_cluster:
        return _in_cluster_credentials()
    return _kubeconfig_credentials(settings.kubeconfig)


_QUANTITY = re.compile(r"([+-]?(?:\d+\.?\d*|\.\d+))(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?\d+)?")
_SUFFIXES = {
    **{
        suffix: Decimal(1024) ** power
        for power, suffix in enumerate(("", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"))
    },
    **{"n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3")},
    **{suffix: Decimal(1000) ** power for power, suffix in enumerate("kMGTPE", start=1)},
}


def quantity_value(text: object) -> Decimal | None:
    """A Kubernetes quantity's value ("1k" and "1000" are equal), or None if it is not one.

    The API server stores quantities in canonical form, so "1000" written comes back as "1k":
    comparing strings would make the agent patch the same value forever.
    """
    match = _QUANTITY.fullmatch(text) if isinstance(text, str) else None
    if match is None:
        return None
    number, suffix = Decimal(match[1]), match[2] or ""
    if suffix[:1] in ("e", "E"):
        return number.scaleb(int(suffix[1:]))
    return number * _SUFFIXES[suffix]


def escape_json_pointer(name: str) -> str:
    """RFC 6901: "example.com/dongle" -> "example.com~1dongle"."""
    return name.replace("~", "~0").replace("/", "~1")


def capacity_path(name: str) -> str:
    return f"/status/capacity/{escape_json_pointer(name)}"


_OWNED_PATH = f"/metadata/annotations/{escape_json_pointer(OWNED_ANNOTATION)}"


@dataclass(frozen=True)
class Ownership:
    """The agent's annotation on a Node as read: which extended resources are the agent's.

    The annotation lives in the Node's metadata and the capacity in its status, two requests
    apart, so the agent orders them to never lose track of a resource: a name is added to the
    annotation before its capacity, and its capacity removed before the name. A crash between
    the two leaves a listed name without capacity, which the next sync adds or forgets.
    """

    names: frozenset[str]
    value: str | None  # the annotation as read; None if the Node has none
    has_annotations: bool  # whether metadata.annotations exists at all
    resource_version: str

    @classmethod
    def of(cls, node: Mapping[str, Any]) -> Ownership:
        metadata = node.get("metadata") or {}
        annotations = metadata.get("annotations")
        value = annotations.get(OWNED_ANNOTATION) if isinstance(annotations, dict) else None
        listed = value.split(",") if isinstance(value, str) else []
        # Only extended resource names: a hand-edited "cpu" here must never cost the Node its CPUs.
        names = frozenset(
            name for name in (n.strip() for n in listed) if resource_name_problem(name) is None
        )
        return cls(
            names,
            value if isinstance(value, str) else None,
            isinstance(annotations, dict),
            str(metadata.get("resourceVersion", "")),
        )

    def change_to(self, names: frozenset[str]) -> list[dict[str, Any]]:
        """A JSON patch of the Node (not its status) that lists exactly ``names``, or [].

        It applies only to the annotation as read (a "test" op; the resourceVersion where there
        was none), so a concurrent writer's list is never overwritten unseen: the API server
        refuses the patch and the next sync starts over from a fresh read.
        """
        value = ",".join(sorted(names))
        if self.value is not None:
            guard = {"op": "test", "path": _OWNED_PATH, "value": self.value}
            if not names:
                return [guard, {"op": "remove", "path": _OWNED_PATH}]
            return [guard, {"op": "replace", "path": _OWNED_PATH, "value": value}]
        if not names:
            return []
        guard = {"op": "test", "path": "/metadata/resourceVersion", "value": self.resource_version}
        if self.has_annotations:
            return [guard, {"op": "add", "path": _OWNED_PATH, "value": value}]
        return [
            guard,
            {"op": "add", "path": "/metadata/annotations", "value": {OWNED_ANNOTATION: value}},
        ]


class NodeClient:
    def __init__(self, credentials: Credentials, timeout: float = REQUEST_TIMEOUT) -> None:
        self._credentials = credentials
        self._timeout = timeout

    def get_node(self, name: str) -> dict[str, Any]:
        return self._request("GET", f"/api/v1/nodes/{quote(name, safe='')}")

    def patch_node(self, name: str, operations: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """Apply an RFC 6902 JSON patch to the Node: metadata and spec (status is ignored)."""
        return self._patch(f"/api/v1/nodes/{quote(name, safe='')}", operations)

    def list_as_owned(
        self, name: str, ownership: Ownership, names: frozenset[str]
    ) -> dict[str, Any]:
        """Make the Node's annotation list ``names``, if it is still as read; the Node now."""
        try:
            return self.patch_node(name, ownership.change_to(names))
        except ApiError as error:
            if error.status != UNPROCESSABLE:
                raise
            # The API server keeps its reason for a failed "test" op to itself.
            raise KubeError(
                f"{OWNED_ANNOTATION} changed after it was read (another writer?): {error}"
            ) from None

    def patch_node_status(
        self, name: str, operations: Sequence[Mapping[str, Any]]
    ) -> dict[str, Any]:
        """Apply an RFC 6902 JSON patch to the Node's status subresource."""
        return self._patch(f"/api/v1/nodes/{quote(name, safe='')}/status", operations)

    def _patch(self, path: str, operations: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        body = json.dumps(list(operations)).encode()
        return self._request("PATCH", path, body=body, content_type=JSON_PATCH)

    def _request(
        self, method: str, path: str, body: bytes | None = None, content_type: str | None = None
    ) -> dict[str, Any]:
        url = urlsplit(self._credentials.server)
        headers = {"Accept": "application/json", "User-Agent": "token-resource"}
        if content_type:
            headers["Content-Type"] = content_type
        if self._credentials.token:
            headers["Authorization"] = f"Bearer {self._credentials.token}"
        connection = http.client.HTTPSConnection(
            url.hostname or "",
            url.port or 443,
            timeout=self._timeout,
            context=self._credentials.tls,
        )
        try:
            connection.request(method, url.path.rstrip("/") + path, body=body, headers=headers)
            response = connection.getresponse()
            data = response.read()
        except ssl.SSLError as error:
            raise KubeError(f"TLS with {self._credentials.server} failed: {error}") from None
        except OSError as error:
            raise KubeError(f"API server {self._credentials.server} unreachable: {error}") from None
        finally:
            connection.close()
        if response.status >= 300:
            raise ApiError(response.status, response.reason, _status_message(data))
        try:
            answer: dict[str, Any] = json.loads(data)
        except ValueError:
            raise KubeError(f"API server answered {method} {path} with no JSON") from None
        return answer


def _status_message(data: bytes) -> str:
    """The message of a Kubernetes Status body, or the start of whatever came instead."""
    try:
        status = json.loads(data)
        return str(status.get("message") or status)
    except (ValueError, AttributeError):
        return data[:200].decode(errors="replace")


def _in_cluster_credentials() -> Credentials:
    host, port = (
        os.environ.get("KUBERNETES_SERVICE_HOST"),
        os.environ.get("KUBERNETES_SERVICE_PORT"),
    )
    if not host or not port:
        raise KubeError("in_cluster: KUBERNETES_SERVICE_HOST/PORT are not set (not in a pod?)")
    try:
        token = (SERVICE_ACCOUNT_DIR / "token").read_text().strip()
        tls = ssl.create_default_context(cafile=str(SERVICE_ACCOUNT_DIR / "ca.crt"))
    except OSError as error:
        raise KubeError(f"in_cluster: cannot read the service account: {error}") from None
    server_host = f"[{host}]" if ":" in host else host
    return Credentials(f"https://{server_host}:{port}", tls, token)


def _kubeconfig_credentials(path: Path) -> Credentials:
    try:
        import yaml  # noqa: PLC0415 (optional: only node-status resources need it)
    except ImportError:
        raise KubeError(
            "reading a kubeconfig needs PyYAML: install python3-yaml (Debian), "
            "python3-pyyaml (Fedora/RHEL) or token-resource[node-status]"
        ) from None
    try:
        document = yaml.safe_load(path.read_text())
    except OSError as error:
        raise KubeError(f"cannot read kubeconfig {path}: {error.strerror}") from None
    except yaml.YAMLError as error:
        raise KubeError(f"kubeconfig {path} is not valid YAML: {error}") from None
    return _Kubeconfig(path, document).credentials()


class _Kubeconfig:
    """The parts of a kubeconfig a node agent uses: current context, cluster, user."""

    def __init__(self, path: Path, document: object) -> None:
        self._path = path
        self._document = document if isinstance(document, dict) else {}

    def credentials(self) -> Credentials:
        context = self._named("contexts", self._document.get("current-context"), "context")
        cluster = self._named("clusters", context.get("cluster"), "cluster")
        user = self._named("users", context.get("user"), "user")
        server = cluster.get("server")
        if not isinstance(server, str) or not server.startswith("https://"):
            raise self._error(f"the cluster's server must be an https:// URL, got {server!r}")
        if cluster.get("insecure-skip-tls-verify"):
            raise self._error("insecure-skip-tls-verify is refused: give the cluster's CA")
        for unsupported in ("exec", "auth-provider", "username"):
            if unsupported in user:
                raise self._error(f"user credentials by {unsupported!r} are not supported")
        tls = ssl.create_default_context(
            cafile=self._file(cluster, "certificate-authority"),
            cadata=self._data(cluster, "certificate-authority-data"),
        )
        self._load_client_certificate(tls, user)
        return Credentials(server, tls, self._token(user))

    def _named(self, section: str, name: object, field: str) -> dict[str, Any]:
        for entry in self._document.get(section) or []:
            if isinstance(entry, dict) and entry.get("name") == name:
                value = entry.get(field)
                if isinstance(value, dict):
                    return value
        raise self._error(f"no {section[:-1]} named {name!r} (from current-context)")

    def _file(self, table: Mapping[str, Any], key: str) -> str | None:
        value = table.get(key)
        if value is None:
            return None
        # Relative paths in a kubeconfig are relative to the kubeconfig's directory.
        return str(self._path.parent / str(value))

    def _data(self, table: Mapping[str, Any], key: str) -> str | None:
        value = table.get(key)
        if value is None:
            return None
        try:
            return base64.b64decode(str(value), validate=True).decode()
        except ValueError:
            raise self._error(f"{key} is not base64-encoded PEM") from None

    def _load_client_certificate(self, tls: ssl.SSLContext, user: Mapping[str, Any]) -> None:
        certificate = self._file(user, "client-certificate")
        key = self._file(user, "client-key")
        certificate_data = self._data(user, "client-certificate-data")
        key_data = self._data(user, "client-key-data")
        if certificate is None and certificate_data is None:
            return
        try:
            if certificate_data is None and key_data is None:
                tls.load_cert_chain(certificate or "", key)
                return
            # ssl loads certificates from files only: hand it private, short-lived copies.
            with tempfile.TemporaryDirectory(prefix="token-resource-") as scratch:
                chain = Path(scratch) / "client.pem"
                fd = os.open(chain, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(fd, "w") as file:
                    file.write(certificate_data or Path(certificate or "").read_text())
                    file.write("\n")
                    file.write(key_data or Path(key or "").read_text())
                tls.load_cert_chain(str(chain))
        except (OSError, ssl.SSLError) as error:
            raise self._error(f"cannot load the client certificate: {error}") from None

    def _token(self, user: Mapping[str, Any]) -> str | None:
        if "token" in user:
            return str(user["token"])
        token_file = self._file(user, "tokenFile")
        if token_file is None:
            return None
        try:
            return Path(token_file).read_text().strip()
        except OSError as error:
            raise self._error(f"cannot read tokenFile: {error.strerror}") from None

    def _error(self, reason: str) -> KubeError:
        return KubeError(f"kubeconfig {self._path}: {reason}")
