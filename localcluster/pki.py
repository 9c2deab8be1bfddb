"""A throw-away PKI for the local control plane: serving CA, client CA, service-account keys.

Every run makes a fresh PKI, so nothing here is a secret worth keeping; the files live in the
cluster's state directory and vanish with it.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from .node_layout import NODE_IP, NODE_NAME

_VALIDITY = dt.timedelta(days=7)


@dataclass(frozen=True)
class Pki:
    """Paths of the PEM files the components are started with."""

    directory: Path
    serving_ca: Path
    serving_cert: Path
    serving_key: Path
    client_ca: Path
    admin_cert: Path
    admin_key: Path
    controller_manager_cert: Path
    controller_manager_key: Path
    service_account_key: Path
    service_account_public_key: Path
    # The local node's identities (``python -m localcluster up --node``)
    node_cert: Path
    node_key: Path
    scheduler_cert: Path
    scheduler_key: Path
    proxy_cert: Path
    proxy_key: Path
    kubelet_serving_cert: Path
    kubelet_serving_key: Path


def _name(common_name: str, organization: str | None = None) -> x509.Name:
    attributes = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if organization:
        attributes.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    return x509.Name(attributes)


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)


def _write_cert(path: Path, cert: x509.Certificate) -> None:
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))


class _Authority:
    """A self-signed CA that issues leaf certificates."""

    def __init__(self, common_name: str) -> None:
        self.key = ec.generate_private_key(ec.SECP256R1())
        now = dt.datetime.now(dt.UTC)
        self.cert = (
            x509.CertificateBuilder()
            .subject_name(_name(common_name, "hikyo-dev"))
            .issuer_name(_name(common_name, "hikyo-dev"))
            .public_key(self.key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + _VALIDITY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    key_cert_sign=True,
                    crl_sign=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .sign(self.key, hashes.SHA256())
        )

    def issue(
        self,
        common_name: str,
        *,
        organization: str | None = None,
        server: bool = False,
    ) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
        key = ec.generate_private_key(ec.SECP256R1())
        now = dt.datetime.now(dt.UTC)
        usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(common_name, organization))
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + _VALIDITY)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        )
        if server:
            builder = builder.add_extension(
                x509.SubjectAlternativeName(
                    [
                        x509.DNSName("localhost"),
                        x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                        # In-cluster names, so tokens and kubeconfigs that name them still verify.
                        x509.DNSName("kubernetes.default.svc"),
                        x509.IPAddress(ipaddress.ip_address("10.0.0.1")),
                        # The local node's address, where its pods reach the apiserver.
                        x509.IPAddress(ipaddress.ip_address(NODE_IP)),
                    ]
                ),
                critical=False,
            )
        return builder.sign(self.key, hashes.SHA256()), key


def create_pki(directory: Path) -> Pki:
    """Writes a fresh PKI into ``directory`` and returns where each file went."""
    directory.mkdir(parents=True, exist_ok=True)
    pki = Pki(
        directory=directory,
        serving_ca=directory / "serving-ca.crt",
        serving_cert=directory / "apiserver.crt",
        serving_key=directory / "apiserver.key",
        client_ca=directory / "client-ca.crt",
        admin_cert=directory / "admin.crt",
        admin_key=directory / "admin.key",
        controller_manager_cert=directory / "kcm.crt",
        controller_manager_key=directory / "kcm.key",
        service_account_key=directory / "sa.key",
        service_account_public_key=directory / "sa.pub",
        node_cert=directory / "node.crt",
        node_key=directory / "node.key",
        scheduler_cert=directory / "scheduler.crt",
        scheduler_key=directory / "scheduler.key",
        proxy_cert=directory / "proxy.crt",
        proxy_key=directory / "proxy.key",
        kubelet_serving_cert=directory / "kubelet.crt",
        kubelet_serving_key=directory / "kubelet.key",
    )

    serving_authority = _Authority("hikyo-dev-serving-ca")
    _write_cert(pki.serving_ca, serving_authority.cert)
    cert, key = serving_authority.issue("kube-apiserver", server=True)
    _write_cert(pki.serving_cert, cert)
    _write_key(pki.serving_key, key)

    client_authority = _Authority("hikyo-dev-client-ca")
    _write_cert(pki.client_ca, client_authority.cert)
    cert, key = client_authority.issue("admin", organization="system:masters")
    _write_cert(pki.admin_cert, cert)
    _write_key(pki.admin_key, key)
    cert, key = client_authority.issue(
        "system:kube-controller-manager", organization="system:masters"
    )
    _write_cert(pki.controller_manager_cert, cert)
    _write_key(pki.controller_manager_key, key)

    cert, key = serving_authority.issue("kubelet", server=True)
    _write_cert(pki.kubelet_serving_cert, cert)
    _write_key(pki.kubelet_serving_key, key)
    # The Node authorizer and RBAC's default bindings know these names.
    for common_name, organization, cert_path, key_path in (
        (f"system:node:{NODE_NAME}", "system:nodes", pki.node_cert, pki.node_key),
        ("system:kube-scheduler", None, pki.scheduler_cert, pki.scheduler_key),
        ("system:kube-proxy", None, pki.proxy_cert, pki.proxy_key),
    ):
        cert, key = client_authority.issue(common_name, organization=organization)
        _write_cert(cert_path, cert)
        _write_key(key_path, key)

    # RSA: the service-account issuer's JWKS is what external verifiers expect most widely.
    sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    _write_key(pki.service_account_key, sa_key)
    pki.service_account_public_key.write_bytes(
        sa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return pki
