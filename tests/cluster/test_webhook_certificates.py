"""The webhook certificate against the real API server: two replicas racing to create the
Secret serve the same certificate, the MutatingWebhookConfiguration's caBundle follows the
Secret's CA, a renewal keeps the CA, and a Secret from elsewhere is only read."""

from __future__ import annotations

import asyncio
import base64
import datetime
import secrets

import pytest
from lightkube import AsyncClient
from lightkube.models.admissionregistration_v1 import (
    MutatingWebhook,
    WebhookClientConfig,
)
from lightkube.models.meta_v1 import LabelSelector, ObjectMeta
from lightkube.resources.admissionregistration_v1 import MutatingWebhookConfiguration
from lightkube.resources.core_v1 import Secret

from tensorfusion.adapters.tls.webhook_certificates import issue
from tensorfusion.adapters.tls.webhook_secret import WebhookCertificates

from .conftest import DeleteLater

pytestmark = pytest.mark.cluster

NOW = datetime.datetime.now(datetime.UTC)


async def webhook_configuration(kube: AsyncClient, name: str) -> None:
    """A configuration that selects no pod (it must not disturb other tests)."""
    await kube.create(MutatingWebhookConfiguration(
        metadata=ObjectMeta(name=name),
        webhooks=[MutatingWebhook(
            name="mutate.tensor-fusion.ai", admissionReviewVersions=["v1"],
            sideEffects="NoneOnDryRun", failurePolicy="Ignore",
            clientConfig=WebhookClientConfig(url="https://127.0.0.1:1/mutate-v1-pod"),
            objectSelector=LabelSelector(matchLabels={"tf-test": "never"}),
        )],
    ))  # fmt: skip


def replica(kube: AsyncClient, namespace: str, configuration: str,
            now: datetime.datetime = NOW) -> WebhookCertificates:  # fmt: skip
    return WebhookCertificates(
        kube, namespace=namespace, secret_name="tensor-fusion-webhook-secret",
        service_name="tensor-fusion-sys-webhook", webhook_configuration=configuration,
        extra_hosts=["127.0.0.1"], clock=lambda: now,
    )  # fmt: skip


async def ca_bundle(kube: AsyncClient, name: str) -> str | None:
    found = await kube.get(MutatingWebhookConfiguration, name)
    return (found.webhooks or [])[0].clientConfig.caBundle


async def test_two_replicas_race_and_serve_one_certificate_and_renew_it(
    kube: AsyncClient, namespace: str, cluster_objects: DeleteLater
) -> None:
    name = f"tf-test-{secrets.token_hex(3)}"
    await webhook_configuration(kube, name)
    cluster_objects(MutatingWebhookConfiguration, name)
    first, second = replica(kube, namespace, name), replica(kube, namespace, name)
    assert not first.ready
    assert list(await asyncio.gather(first.refresh(), second.refresh())) == [True, True]
    assert first.bundle == second.bundle and first.ready and second.ready
    bundle = first.bundle
    assert bundle is not None and bundle.ca_pem is not None
    assert await ca_bundle(kube, name) == base64.b64encode(bundle.ca_pem).decode()

    later = replica(kube, namespace, name, NOW + datetime.timedelta(days=250))
    assert await later.refresh()
    renewed = later.bundle
    assert renewed is not None and renewed.cert_pem != bundle.cert_pem
    assert renewed.ca_pem == bundle.ca_pem, "a renewal keeps the caBundle"
    assert await first.refresh() and first.bundle == renewed, "a changed Secret is reloaded"


async def test_a_secret_from_elsewhere_is_only_read(
    kube: AsyncClient, namespace: str, cluster_objects: DeleteLater
) -> None:
    name = f"tf-test-{secrets.token_hex(3)}"
    await webhook_configuration(kube, name)
    cluster_objects(MutatingWebhookConfiguration, name)
    foreign = issue("tensor-fusion-sys-webhook", namespace, NOW)
    data = {"cert": base64.b64encode(foreign.cert_pem).decode(),
            "key": base64.b64encode(foreign.key_pem).decode()}  # fmt: skip
    await kube.create(Secret(metadata=ObjectMeta(name="tensor-fusion-webhook-secret",
                                                 namespace=namespace), data=data))  # fmt: skip
    late = replica(kube, namespace, name, NOW + datetime.timedelta(days=300))
    assert await late.refresh()
    assert late.bundle is not None and late.bundle.cert_pem == foreign.cert_pem
    stored = await kube.get(Secret, "tensor-fusion-webhook-secret", namespace=namespace)
    assert stored.data == data, "nothing renewed or rewritten"
    assert await ca_bundle(kube, name) is None, "no CA: left to an injector"


async def test_bad_secret_data_is_reported_and_nothing_is_served(
    kube: AsyncClient, namespace: str
) -> None:
    bad = {"tls.crt": "bm90IGEgY2VydA==", "tls.key": "bm9wZQ=="}
    meta = ObjectMeta(name="tensor-fusion-webhook-secret", namespace=namespace)
    await kube.create(Secret(metadata=meta, data=bad))
    certificates = replica(kube, namespace, "absent-configuration")
    assert await certificates.refresh() is False
    assert not certificates.ready and "not a PEM certificate" in certificates.last_error
