"""Certificates for the API server stand-in: a test CA, server and client certificates, and the
TLS contexts built from them."""

from __future__ import annotations

import datetime
import ipaddress
import os
import ssl
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

NODES_GROUP = "system:nodes"
NODE_USER_PREFIX = "system:node:"


@dataclass(frozen=True)
class KeyPair:
    """A certificate and its private key, both PEM."""

    cert_pem: bytes
    key_pem: bytes

    def write(self, cert_path: Path, key_path: Path | None = None) -> None:
        """Write the certificate and the key; with no ``key_path`` both go to ``cert_path``
        (certificate first, as in the kubelet's ``kubelet-client-current.pem``)."""
        if key_path is None:
            write_private(cert_path, self.cert_pem + self.key_pem)
        else:
            cert_path.write_bytes(self.cert_pem)
            write_private(key_path, self.key_pem)


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
        load_chain(context, certificate)
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


def write_private(path: Path, data: bytes) -> None:
    """Write a file only its owner can read, as private keys are."""
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "wb") as file:
        file.write(data)


def load_chain(context: ssl.SSLContext, pair: KeyPair) -> None:
    """ssl reads certificates and keys only from files: a private directory, gone at once."""
    with tempfile.TemporaryDirectory(prefix="apiserver-standin-") as directory:
        path = Path(directory, "pair.pem")
        pair.write(path)
        context.load_cert_chain(path)
