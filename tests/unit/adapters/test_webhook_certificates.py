"""The webhook's certificates: issued for the Service's names, read back from either Secret
layout, renewed after two thirds of their life with the same CA, and served over TLS."""

from __future__ import annotations

import asyncio
import base64
import datetime
import ssl
import tempfile
from pathlib import Path

import pytest
from cryptography import x509

from tensorfusion.adapters.tls.webhook_certificates import (
    CA_VALIDITY,
    CertificateBundle,
    CertificateDataError,
    issue,
    load_into,
    read_secret,
    renewal_due,
    secret_data,
    server_context,
)

NOW = datetime.datetime(2026, 12, 2, tzinfo=datetime.UTC)
SERVICE, NAMESPACE = "tensor-fusion-sys-webhook", "tensor-fusion-sys"


@pytest.fixture(scope="module")
def bundle() -> CertificateBundle:
    return issue(SERVICE, NAMESPACE, NOW, extra_hosts=["127.0.0.1"])


def test_the_serving_certificate_names_the_service_and_chains_to_the_ca(
    bundle: CertificateBundle,
) -> None:
    cert = bundle.certificate
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.DNSName) == [
        SERVICE, f"{SERVICE}.{NAMESPACE}", f"{SERVICE}.{NAMESPACE}.svc"]  # fmt: skip
    assert [str(ip) for ip in names.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    assert bundle.ca_pem is not None
    ca = x509.load_pem_x509_certificate(bundle.ca_pem)
    cert.verify_directly_issued_by(ca)
    assert (cert.not_valid_after_utc - NOW).days == 365
    assert ca.not_valid_after_utc - NOW == CA_VALIDITY


def test_our_layout_round_trips_and_the_reference_layout_is_read(bundle: CertificateBundle) -> None:
    assert read_secret(secret_data(bundle)) == bundle
    theirs = {"cert": base64.b64encode(bundle.cert_pem).decode(),
              "key": base64.b64encode(bundle.key_pem).decode(),
              "ca": base64.b64encode(bundle.ca_pem or b"").decode()}  # fmt: skip
    read = read_secret(theirs)
    assert read is not None and read.ca_pem == bundle.ca_pem and not read.issued_here
    assert read_secret({}) is None and read_secret(None) is None


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"tls.key": None}, "tls.key: missing"),
        ({"tls.crt": "not base64!"}, "tls.crt: not base64"),
        ({"tls.crt": base64.b64encode(b"garbage").decode()}, "not a PEM certificate and key"),
    ],
    ids=["no-key", "not-base64", "not-pem"],
)
def test_bad_secret_data_names_the_key(
    bundle: CertificateBundle, change: dict[str, str | None], message: str
) -> None:
    data: dict[str, str] = dict(secret_data(bundle))
    for key, value in change.items():
        if value is None:
            del data[key]
        else:
            data[key] = value
    with pytest.raises(CertificateDataError, match=message):
        read_secret(data)


def test_a_key_of_another_certificate_is_refused(bundle: CertificateBundle) -> None:
    other = issue(SERVICE, NAMESPACE, NOW)
    data = secret_data(bundle) | {"tls.key": secret_data(other)["tls.key"]}
    with pytest.raises(CertificateDataError, match="does not match"):
        read_secret(data)


def test_renewal_after_two_thirds_keeps_the_ca(bundle: CertificateBundle) -> None:
    assert not renewal_due(bundle, NOW + datetime.timedelta(days=243))
    later = NOW + datetime.timedelta(days=244)
    assert renewal_due(bundle, later)
    renewed = issue(SERVICE, NAMESPACE, later, ca=bundle)
    assert renewed.ca_pem == bundle.ca_pem and renewed.cert_pem != bundle.cert_pem
    assert not renewal_due(renewed, later)
    foreign = CertificateBundle(bundle.cert_pem, bundle.key_pem, bundle.ca_pem)
    assert not renewal_due(foreign, later), "a certificate from elsewhere is only read"


def test_a_ca_near_its_end_is_replaced_with_the_certificate(bundle: CertificateBundle) -> None:
    late = NOW + datetime.timedelta(days=3650 - 200)
    assert renewal_due(bundle, late)
    renewed = issue(SERVICE, NAMESPACE, late, ca=bundle)
    assert renewed.ca_pem != bundle.ca_pem


async def test_the_context_serves_it_and_takes_a_new_one_without_restart(
    bundle: CertificateBundle,
) -> None:
    context = server_context(bundle)
    server = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0, ssl=context)
    port = server.sockets[0].getsockname()[1]

    async def served_serial(ca_pem: bytes) -> int:
        with tempfile.TemporaryDirectory() as directory:
            ca_file = Path(directory) / "ca.crt"
            ca_file.write_bytes(ca_pem)
            client = ssl.create_default_context(cafile=str(ca_file))
            _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client,
                                                      server_hostname="127.0.0.1")  # fmt: skip
            der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
            writer.close()
            return x509.load_der_x509_certificate(der).serial_number

    try:
        assert bundle.ca_pem is not None
        assert await served_serial(bundle.ca_pem) == bundle.certificate.serial_number
        renewed = issue(SERVICE, NAMESPACE, NOW, extra_hosts=["127.0.0.1"], ca=bundle)
        load_into(context, renewed)
        assert await served_serial(bundle.ca_pem) == renewed.certificate.serial_number
    finally:
        server.close()
        await server.wait_closed()
