"""The webhook's certificates (deployment.md §7): issued by the controller or read from a
Secret in either key layout.

- `issue(service, namespace, now)`: a CA (10 years) and a serving certificate (1 year) for the
  webhook Service's names; the CA key is kept so that a renewal keeps the `caBundle`.
- `read_secret(data)`: the Secret's `data` (base64) in our layout (`tls.crt`, `tls.key`,
  `ca.crt`, and `ca.key` when we issued it, as cert-manager writes it too) or the reference
  implementation's (`cert`, `key`, `ca`); `CertificateDataError` names the key that is wrong.
- `secret_data(bundle)`: the `data` to write. `renewal_due(bundle, now)`: two thirds of the
  serving certificate's life (or the CA's) have passed. `server_context(bundle)`: an SSL
  context serving the certificate.
"""

from __future__ import annotations

import base64
import binascii
import datetime
import ipaddress
import os
import ssl
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = [
    "CA_VALIDITY",
    "SERVING_VALIDITY",
    "CertificateBundle",
    "CertificateDataError",
    "issue",
    "missing_hosts",
    "read_secret",
    "renewal_due",
    "secret_data",
    "server_context",
    "service_hosts",
    "subject_alternative_names",
]

CA_VALIDITY: Final = datetime.timedelta(days=3650)
SERVING_VALIDITY: Final = datetime.timedelta(days=365)
_BACKDATE: Final = datetime.timedelta(minutes=5)
_LAYOUTS: Final = (("tls.crt", "tls.key", "ca.crt"), ("cert", "key", "ca"))


class CertificateDataError(ValueError):
    """A Secret whose certificate data cannot be used; names the key and the problem."""


@dataclass(frozen=True, slots=True)
class CertificateBundle:
    """The serving certificate and key, the CA (None: left to an injector), and the CA key
    when the controller issued it (so it can renew)."""

    cert_pem: bytes
    key_pem: bytes = field(repr=False)
    ca_pem: bytes | None = None
    ca_key_pem: bytes | None = field(default=None, repr=False)

    @property
    def certificate(self) -> x509.Certificate:
        """The serving certificate."""
        return x509.load_pem_x509_certificate(self.cert_pem)

    @property
    def issued_here(self) -> bool:
        """Whether the controller issued it (it holds the CA key and renews it)."""
        return self.ca_key_pem is not None


def service_hosts(service: str, namespace: str, extra: Sequence[str] = ()) -> list[str]:
    """The names the webhook Service answers to (and `extra`, e.g. 127.0.0.1 in tests)."""
    return [service, f"{service}.{namespace}", f"{service}.{namespace}.svc", *extra]


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )  # fmt: skip


def subject_alternative_names(hosts: Sequence[str]) -> x509.SubjectAlternativeName:
    """IP addresses as IP SANs, every other host as a DNS SAN."""
    names: list[x509.GeneralName] = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    return x509.SubjectAlternativeName(names)


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _serving(
    hosts: Sequence[str], ca_cert: x509.Certificate, ca_key: ec.EllipticCurvePrivateKey,
    now: datetime.datetime,
) -> tuple[bytes, bytes]:  # fmt: skip
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(hosts[0]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _BACKDATE)
        .not_valid_after(now + SERVING_VALIDITY)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(subject_alternative_names(hosts), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.PEM), _pem_key(key)


def issue(
    service: str,
    namespace: str,
    now: datetime.datetime,
    *,
    extra_hosts: Sequence[str] = (),
    ca: CertificateBundle | None = None,
) -> CertificateBundle:
    """A serving certificate for the Service's names, signed by `ca` when it is ours and
    still good for a serving certificate's life, else by a new CA."""
    hosts = service_hosts(service, namespace, extra_hosts)
    if ca is not None and ca.ca_pem is not None and ca.ca_key_pem is not None:
        ca_cert = x509.load_pem_x509_certificate(ca.ca_pem)
        ca_key = serialization.load_pem_private_key(ca.ca_key_pem, password=None)
        if isinstance(ca_key, ec.EllipticCurvePrivateKey) and not _ca_due(ca_cert, now):
            cert_pem, key_pem = _serving(hosts, ca_cert, ca_key, now)
            return CertificateBundle(cert_pem, key_pem, ca.ca_pem, ca.ca_key_pem)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    usage = x509.KeyUsage(
        digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
        key_encipherment=False, data_encipherment=False, key_agreement=False,
        encipher_only=False, decipher_only=False,
    )  # fmt: skip
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(_name(f"{service}-ca"))
        .issuer_name(_name(f"{service}-ca"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _BACKDATE)
        .not_valid_after(now + CA_VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(usage, critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    cert_pem, key_pem = _serving(hosts, ca_cert, ca_key, now)
    return CertificateBundle(
        cert_pem, key_pem, ca_cert.public_bytes(serialization.Encoding.PEM), _pem_key(ca_key)
    )


def _decode(data: Mapping[str, str], key: str) -> bytes:
    try:
        return base64.b64decode(data[key], validate=True)
    except (binascii.Error, ValueError, TypeError) as error:
        raise CertificateDataError(f"{key}: not base64: {error}") from None


def read_secret(data: Mapping[str, str] | None) -> CertificateBundle | None:
    """The bundle in a Secret's `data`, None when it holds neither layout."""
    data = data or {}
    for cert_key, key_key, ca_key in _LAYOUTS:
        if cert_key not in data and key_key not in data:
            continue
        for required in (cert_key, key_key):
            if required not in data:
                raise CertificateDataError(f"{required}: missing (it has {cert_key or key_key})")
        cert_pem, key_pem = _decode(data, cert_key), _decode(data, key_key)
        try:
            cert = x509.load_pem_x509_certificate(cert_pem)
            key = serialization.load_pem_private_key(key_pem, password=None)
        except ValueError as error:
            raise CertificateDataError(f"{cert_key}/{key_key}: not a PEM certificate and key: "
                                       f"{error}") from None  # fmt: skip
        if cert.public_key().public_numbers() != key.public_key().public_numbers():  # type: ignore[union-attr]
            raise CertificateDataError(f"{key_key}: does not match the certificate in {cert_key}")
        ca_pem = _decode(data, ca_key) if data.get(ca_key) else None
        ca_private = _decode(data, "ca.key") if data.get("ca.key") else None
        return CertificateBundle(cert_pem, key_pem, ca_pem, ca_private)
    return None


def secret_data(bundle: CertificateBundle) -> dict[str, str]:
    """The Secret `data` of a bundle, in our layout."""
    values = {"tls.crt": bundle.cert_pem, "tls.key": bundle.key_pem}
    if bundle.ca_pem is not None:
        values["ca.crt"] = bundle.ca_pem
    if bundle.ca_key_pem is not None:
        values["ca.key"] = bundle.ca_key_pem
    return {key: base64.b64encode(value).decode() for key, value in values.items()}


def _two_thirds(cert: x509.Certificate) -> datetime.datetime:
    start, end = cert.not_valid_before_utc, cert.not_valid_after_utc
    return start + (end - start) * 2 / 3


def _ca_due(ca: x509.Certificate, now: datetime.datetime) -> bool:
    # A CA that would expire during the next serving certificate's life is replaced too.
    return now >= _two_thirds(ca) or ca.not_valid_after_utc - now < SERVING_VALIDITY


def missing_hosts(bundle: CertificateBundle, hosts: Sequence[str]) -> list[str]:
    """The `hosts` the serving certificate does not name (IP or DNS SANs, exact match)."""
    try:
        names = bundle.certificate.extensions.get_extension_for_class(
            x509.SubjectAlternativeName).value  # fmt: skip
    except x509.ExtensionNotFound:
        return list(hosts)
    named = {str(ip) for ip in names.get_values_for_type(x509.IPAddress)}
    named.update(names.get_values_for_type(x509.DNSName))
    return [host for host in hosts if host not in named]


def renewal_due(
    bundle: CertificateBundle, now: datetime.datetime, hosts: Sequence[str] = ()
) -> bool:
    """Whether a bundle the controller issued needs renewing (never one from elsewhere):
    two thirds of its life passed, or one of `hosts` missing from it (a name added by an
    upgrade, as the peer port's)."""
    if not bundle.issued_here:
        return False
    if now >= _two_thirds(bundle.certificate) or missing_hosts(bundle, hosts):
        return True
    return bundle.ca_pem is not None and _ca_due(x509.load_pem_x509_certificate(bundle.ca_pem), now)


def server_context(bundle: CertificateBundle) -> ssl.SSLContext:
    """An SSL context that serves the bundle's certificate (TLS 1.2 or later)."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    load_into(context, bundle)
    return context


def load_into(context: ssl.SSLContext, bundle: CertificateBundle) -> None:
    """Replace the context's certificate (new handshakes use it; no restart)."""
    # load_cert_chain reads files only: a private directory, removed right after.
    with tempfile.TemporaryDirectory(prefix="tf-webhook-cert-") as directory:
        cert_path, key_path = os.path.join(directory, "tls.crt"), os.path.join(directory, "tls.key")
        with open(cert_path, "wb") as cert_file:
            cert_file.write(bundle.cert_pem)
        descriptor = os.open(key_path, os.O_WRONLY | os.O_CREAT, 0o600)
        with os.fdopen(descriptor, "wb") as key_file:
            key_file.write(bundle.key_pem)
        context.load_cert_chain(cert_path, key_path)
