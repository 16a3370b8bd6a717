"""The flags the control plane's programs run with (tests/kube/controlplane.py), and the
files they name."""

from __future__ import annotations

import socket
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from tests.standin.apiserver.certificates import CertificateAuthority, write_private

HOST = "127.0.0.1"
ISSUER = "https://kubernetes.default.svc.cluster.local"


def free_port() -> int:
    """A port free now (the kernel's pick); the program binds it a moment later."""
    with socket.socket() as probe:
        probe.bind((HOST, 0))
        port: int = probe.getsockname()[1]
        return port


def audit_log(directory: Path) -> Path:
    return directory / "audit.log"


def apiserver_flags(
    directory: Path,
    ca: CertificateAuthority,
    port: int,
    etcd_url: str,
    audit_policy: str,
    server_names: tuple[str, ...],
) -> list[str]:
    """kube-apiserver's flags, and the files they name written into ``directory``: its serving
    certificate (for HOST, localhost and ``server_names``), the CA, its client certificate
    for kubelets, the service-account key pair, the audit policy."""
    (directory / "audit-policy.yaml").write_text(audit_policy)
    ca.server_certificate((HOST, "localhost", *server_names)).write(
        directory / "apiserver.crt", directory / "apiserver.key"
    )
    (directory / "ca.crt").write_bytes(ca.cert_pem)
    # What it shows a kubelet (logs, exec, port-forward): a client the kubelet's webhook
    # authorization allows.
    kubelet_client = ca.client_certificate("kube-apiserver-kubelet-client", ("system:masters",))
    kubelet_client.write(directory / "kubelet-client.crt", directory / "kubelet-client.key")
    # The service-account signing key; the API server verifies with the public half (it
    # reads no PKCS#8 private key as a public one).
    key = ec.generate_private_key(ec.SECP256R1())
    write_private(
        directory / "sa.key",
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ),
    )
    (directory / "sa.pub").write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return [
        f"--etcd-servers={etcd_url}",
        f"--bind-address={HOST}",
        f"--advertise-address={HOST}",
        f"--secure-port={port}",
        f"--cert-dir={directory / 'apiserver-certs'}",
        f"--tls-cert-file={directory / 'apiserver.crt'}",
        f"--tls-private-key-file={directory / 'apiserver.key'}",
        f"--client-ca-file={directory / 'ca.crt'}",
        f"--kubelet-certificate-authority={directory / 'ca.crt'}",
        f"--kubelet-client-certificate={directory / 'kubelet-client.crt'}",
        f"--kubelet-client-key={directory / 'kubelet-client.key'}",
        "--kubelet-preferred-address-types=InternalIP",
        "--authorization-mode=Node,RBAC",
        "--enable-admission-plugins=NodeRestriction",
        f"--service-account-issuer={ISSUER}",
        f"--service-account-key-file={directory / 'sa.pub'}",
        f"--service-account-signing-key-file={directory / 'sa.key'}",
        "--service-cluster-ip-range=10.96.0.0/16",
        # resource.k8s.io/v1 is GA and served by default; said anyway, as the one group
        # these tests are about.
        "--runtime-config=resource.k8s.io/v1=true",
        # The "kubernetes" Service's endpoints would name the advertised address, which
        # may not be a loopback one; nothing here reaches the API server through it.
        "--endpoint-reconciler-type=none",
        "--profiling=false",
        f"--audit-policy-file={directory / 'audit-policy.yaml'}",
        f"--audit-log-path={audit_log(directory)}",
        "--audit-log-format=json",
        "--audit-log-mode=blocking",  # written before the answer: a test reads it then
    ]


def component_flags(
    component: str, kubeconfig: Path, directory: Path, controllers: str
) -> list[str]:
    """kube-scheduler's or kube-controller-manager's flags (``controllers``: the latter's)."""
    common = [
        f"--kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        "--leader-elect=false",
        f"--bind-address={HOST}",
        f"--secure-port={free_port()}",
        "--profiling=false",
    ]
    if component == "kube-scheduler":
        return common
    return [
        *common,
        f"--controllers={controllers}",
        f"--service-account-private-key-file={directory / 'sa.key'}",
        f"--root-ca-file={directory / 'ca.crt'}",
        # Each controller under its own service account with its bootstrap role (as kubeadm
        # runs it): the controller manager's own user may do little.
        "--use-service-account-credentials=true",
    ]
