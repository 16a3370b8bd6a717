"""Who the agent is to the API server: a kubeconfig (the kubelet's by default) or the pod's
service account, and the name of its Node.

PyYAML reads kubeconfig files and is only imported when one is needed, so device-plugin-only
installs never load it.
"""

from __future__ import annotations

import base64
import os
import socket
import ssl
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from token_resource.apiserver.connection.client import Credentials, KubeError
from token_resource.config.model import KubernetesSettings

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
# In a pod the host name is the pod's: the manifest passes the Node's name in this variable
# (the downward API's spec.nodeName).
NODE_NAME_VARIABLE = "NODE_NAME"


def default_node_name() -> str:
    """The host name, lower-cased: the name the kubelet gives its Node by default."""
    return socket.gethostname().lower()


def node_name(settings: KubernetesSettings, environ: Mapping[str, str] = os.environ) -> str:
    """The configured node_name; in a pod (in_cluster), else $NODE_NAME; else the host name."""
    if settings.node_name:
        return settings.node_name
    if settings.in_cluster and environ.get(NODE_NAME_VARIABLE):
        return environ[NODE_NAME_VARIABLE]
    return default_node_name()


def load_credentials(settings: KubernetesSettings) -> Credentials:
    """Read the credentials afresh (the kubelet rotates its client certificate)."""
    if settings.in_cluster:
        return _in_cluster_credentials()
    return _kubeconfig_credentials(settings.kubeconfig)


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


def kubeconfig_namespace(path: Path) -> str | None:
    """The namespace of the kubeconfig's current context, as kubectl and client-go take it;
    None when the context names none."""
    return _read_kubeconfig(path).namespace()


def _kubeconfig_credentials(path: Path) -> Credentials:
    return _read_kubeconfig(path).credentials()


def _read_kubeconfig(path: Path) -> _Kubeconfig:
    try:
        import yaml  # noqa: PLC0415 (optional: only node-status and DRA resources need it)
    except ImportError:
        raise KubeError(
            "reading a kubeconfig needs PyYAML: install python3-yaml (Debian), "
            "python3-pyyaml (Fedora/RHEL) or token-resource[kubernetes]"
        ) from None
    try:
        document = yaml.safe_load(path.read_text())
    except OSError as error:
        raise KubeError(f"cannot read kubeconfig {path}: {error.strerror}") from None
    except yaml.YAMLError as error:
        raise KubeError(f"kubeconfig {path} is not valid YAML: {error}") from None
    return _Kubeconfig(path, document)


class _Kubeconfig:
    """The parts of a kubeconfig a node agent uses: current context, cluster, user."""

    def __init__(self, path: Path, document: object) -> None:
        self._path = path
        self._document = document if isinstance(document, dict) else {}

    def namespace(self) -> str | None:
        namespace = self._context().get("namespace")
        if namespace is None or namespace == "":
            return None
        if not isinstance(namespace, str):
            raise self._error(
                f"the current context's namespace must be a string, got {namespace!r}"
            )
        return namespace

    def _context(self) -> dict[str, Any]:
        return self._named("contexts", self._document.get("current-context"), "context")

    def credentials(self) -> Credentials:
        context = self._context()
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
            # ssl loads certificates from files only: hand it one in memory, which no disk
            # holds and no killed process leaves behind (a temporary file did, key and all).
            fd = os.memfd_create("token-resource-client.pem", os.MFD_CLOEXEC)
            try:
                with open(fd, "w", closefd=False) as file:
                    file.write(certificate_data or Path(certificate or "").read_text())
                    file.write("\n")
                    file.write(key_data or Path(key or "").read_text())
                tls.load_cert_chain(f"/proc/self/fd/{fd}")
            finally:
                os.close(fd)
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
