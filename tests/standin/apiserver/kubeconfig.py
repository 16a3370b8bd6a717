"""Client configuration for the stand-in: kubeconfigs (as the kubelet's) and in-cluster
service-account files. A mixin of :class:`~tests.standin.apiserver.server.ApiServerStandin`."""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path

from tests.standin.apiserver.certificates import CertificateAuthority, KeyPair, write_private

# Kubeconfig values written as plain YAML scalars: those that cannot be mistaken for anything.
_YAML_PLAIN = re.compile(r"[A-Za-z0-9_./+=][A-Za-z0-9_./+=:-]*")
_YAML_NOT_A_STRING = re.compile(r"[-+0-9._:eE]+|true|false|null|yes|no|on|off|y|n", re.I)


class ClientConfigMixin:
    """Writes what a client needs to reach the stand-in."""

    ca: CertificateAuthority
    host: str
    port: int

    @property
    def url(self) -> str:
        return f"https://{self.host}:{self.port}"

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
        namespace: str | None = "default",
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
        ``ca`` replaces the CA the client trusts; ``server`` the URL. ``namespace`` is the
        context's (None: the context names none, as kubeadm's kubelet.conf).
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
            *([f"    namespace: {_yaml(namespace)}"] if namespace is not None else []),
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
        write_private(path, "\n".join(lines).encode() + b"\n")
        return path

    def write_service_account(self, directory: Path, token: str) -> dict[str, str]:
        """In-cluster credentials: ``token``, ``ca.crt`` and ``namespace`` in ``directory``
        (as in /var/run/secrets/kubernetes.io/serviceaccount); returns the environment
        variables a pod gets (KUBERNETES_SERVICE_HOST and _PORT)."""
        directory.mkdir(parents=True, exist_ok=True)
        write_private(directory / "token", token.encode())
        (directory / "ca.crt").write_bytes(self.ca.cert_pem)
        (directory / "namespace").write_text("kube-system")
        return {"KUBERNETES_SERVICE_HOST": self.host, "KUBERNETES_SERVICE_PORT": str(self.port)}


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _yaml(value: str) -> str:
    """A YAML scalar: plain if that is safe, else double-quoted (JSON's escapes are YAML's)."""
    if _YAML_PLAIN.fullmatch(value) and not _YAML_NOT_A_STRING.fullmatch(value):
        return value
    return json.dumps(value)
