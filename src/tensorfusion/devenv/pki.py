"""Certificates for the test control plane, made in-process with `cryptography`.

One test CA signs everything: the kube-apiserver serving certificate, the admin client
certificate (group ``system:masters``) and the serving certificates of webhooks and other
loopback servers under test, so a single ``caBundle`` trusts them all.
"""

from __future__ import annotations

import base64
import datetime
import ssl
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from tensorfusion.adapters.tls.webhook_certificates import subject_alternative_names

_VALIDITY = datetime.timedelta(days=2)
_CLOCK_SKEW = datetime.timedelta(minutes=5)


def _key_pem(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _name(common_name: str, organizations: Sequence[str] = ()) -> x509.Name:
    attributes = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, org) for org in organizations]
    attributes.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
    return x509.Name(attributes)


@dataclass(frozen=True)
class Issued:
    """A certificate and its private key, PEM-encoded."""

    cert_pem: bytes
    key_pem: bytes = field(repr=False)

    def write(self, directory: Path, name: str) -> tuple[Path, Path]:
        """Writes ``<name>.crt`` and ``<name>.key`` (mode 0600) and returns their paths."""
        directory.mkdir(parents=True, exist_ok=True)
        cert_path = directory / f"{name}.crt"
        key_path = directory / f"{name}.key"
        cert_path.write_bytes(self.cert_pem)
        key_path.touch(mode=0o600)
        key_path.write_bytes(self.key_pem)
        return cert_path, key_path

    def server_context(self, directory: Path, name: str) -> ssl.SSLContext:
        """An SSL context that serves this certificate (files are written to ``directory``)."""
        cert_path, key_path = self.write(directory, name)
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(cert_path, key_path)
        return context


class CertificateAuthority:
    """A throwaway CA (ECDSA P-256) that lives as long as the test session."""

    def __init__(self, common_name: str = "tensor-fusion-testenv-ca") -> None:
        self._key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        name = _name(common_name)
        self._cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - _CLOCK_SKEW)
            .not_valid_after(now + _VALIDITY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(
                x509.SubjectKeyIdentifier.from_public_key(self._key.public_key()), critical=False
            )
            .sign(self._key, hashes.SHA256())
        )
        self.cert_pem = self._cert.public_bytes(serialization.Encoding.PEM)
        self.key_pem = _key_pem(self._key)

    @property
    def bundle_base64(self) -> str:
        """The CA certificate as a ``caBundle`` / ``certificate-authority-data`` value."""
        return base64.b64encode(self.cert_pem).decode()

    def issue(
        self,
        common_name: str,
        *,
        organizations: Sequence[str] = (),
        hosts: Sequence[str] = (),
        server: bool = False,
        client: bool = False,
    ) -> Issued:
        """Issues a leaf certificate; ``hosts`` become DNS or IP subject alternative names."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        usages = [ExtendedKeyUsageOID.SERVER_AUTH] if server else []
        if client:
            usages.append(ExtendedKeyUsageOID.CLIENT_AUTH)
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(common_name, organizations))
            .issuer_name(self._cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - _CLOCK_SKEW)
            .not_valid_after(now + _VALIDITY)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=False,
                    crl_sign=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self._key.public_key()),
                critical=False,
            )
        )
        if usages:
            builder = builder.add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        if hosts:
            builder = builder.add_extension(subject_alternative_names(hosts), critical=False)
        cert = builder.sign(self._key, hashes.SHA256())
        return Issued(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))

    def issue_server(self, hosts: Sequence[str] = ("127.0.0.1", "localhost")) -> Issued:
        """A serving certificate for a loopback server (a webhook, an extender, ...)."""
        return self.issue(hosts[0], hosts=hosts, server=True)


@dataclass(frozen=True)
class ServiceAccountKeys:
    """The key pair kube-apiserver signs service-account tokens with."""

    private_pem: bytes
    public_pem: bytes

    @classmethod
    def generate(cls) -> ServiceAccountKeys:
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        public = key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        return cls(_key_pem(key), public)
