"""A throw-away PKI for the devserver: one CA and one serving certificate per start.

Nothing here is worth keeping: a fresh CA is made every time, the key files exist only
long enough for ``ssl`` to load them, and only the CA certificate stays on disk (clients
need a path for ``verify=``).
"""

from __future__ import annotations

import base64
import datetime as dt
import ipaddress
import ssl
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_VALIDITY = dt.timedelta(days=2)
#: Names the serving certificate is valid for (the devserver binds loopback only).
SERVING_DNS_NAMES = ("localhost",)
SERVING_IPS = ("127.0.0.1",)


@dataclass(frozen=True)
class ServingPki:
    """PEM bytes of the CA certificate and of the serving certificate and key."""

    ca_pem: bytes
    cert_pem: bytes
    key_pem: bytes

    @property
    def ca_bundle_b64(self) -> str:
        """The CA as a HikyoInstance ``caBundle``: standard base64 of the PEM, one line."""
        return base64.b64encode(self.ca_pem).decode("ascii")


def _name(common_name: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "hikyo-devserver"),
        ]
    )


def generate(host: str = "127.0.0.1") -> ServingPki:
    """A new CA (EC P-256) and a serving certificate for 127.0.0.1, localhost and ``host``."""
    now = dt.datetime.now(dt.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(_name("hikyo-devserver CA"))
        .issuer_name(_name("hikyo-devserver CA"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + _VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
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
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    san = [x509.DNSName(name) for name in SERVING_DNS_NAMES] + [
        x509.IPAddress(ipaddress.ip_address(ip)) for ip in dict.fromkeys((*SERVING_IPS, host))
    ]
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name("hikyo-devserver"))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + _VALIDITY)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectAlternativeName(san), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), False
        )
        .sign(ca_key, hashes.SHA256())
    )
    return ServingPki(
        ca_pem=ca_cert.public_bytes(serialization.Encoding.PEM),
        cert_pem=cert.public_bytes(serialization.Encoding.PEM),
        key_pem=key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ),
    )


def server_context(pki: ServingPki, directory: Path) -> ssl.SSLContext:
    """A server-side context with TLS >= 1.2 (S3.2); key files are removed once loaded."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.set_alpn_protocols(["http/1.1"])
    cert_path = directory / "serving.crt"
    key_path = directory / "serving.key"
    key_path.touch(mode=0o600)
    key_path.write_bytes(pki.key_pem)
    cert_path.write_bytes(pki.cert_pem)
    try:
        context.load_cert_chain(cert_path, key_path)
    finally:
        key_path.unlink(missing_ok=True)
        cert_path.unlink(missing_ok=True)
    return context
