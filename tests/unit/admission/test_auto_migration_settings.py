"""Auto-migration follows the dynamic configuration without restart, and the controller warns
while it is on but the webhook configuration still selects pods by label."""

from __future__ import annotations

import datetime
import logging
from typing import Any

import pytest
from lightkube.models.admissionregistration_v1 import MutatingWebhook, WebhookClientConfig
from lightkube.models.meta_v1 import LabelSelector

from tensorfusion.adapters.tls.webhook_secret import WebhookCertificates
from tensorfusion.admission.admitter import ClusterAdmitter
from tensorfusion.admission.facts_gathering import AdmissionSettings
from tensorfusion.admission.webhook_app import WebhookMetrics
from tensorfusion.app.controller_webhook import WebhookWork
from tensorfusion.domain.alerting.dynamic_config import parse_dynamic_config

START = datetime.datetime(2026, 12, 1, tzinfo=datetime.UTC)


class Clock:
    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> datetime.datetime:
        return self.now


def certificates(clock: Clock) -> WebhookCertificates:
    client: Any = None
    return WebhookCertificates(
        client, namespace="tf", secret_name="s", service_name="svc",
        webhook_configuration="tf-mutating-webhook", clock=clock,
    )  # fmt: skip


def webhook(selector: LabelSelector | None) -> MutatingWebhook:
    return MutatingWebhook(
        name="mutate.tensor-fusion.ai", admissionReviewVersions=["v1"], sideEffects="None",
        clientConfig=WebhookClientConfig(url="https://x"), objectSelector=selector,
    )  # fmt: skip


def work(clock: Clock) -> WebhookWork:
    client: Any = None
    sources: Any = None
    admitter = ClusterAdmitter(client, sources, AdmissionSettings())
    return WebhookWork(certificates(clock), admitter, WebhookMetrics(None), ":9443")


SELECTING = webhook(LabelSelector(matchLabels={"tensor-fusion.ai/enabled": "true"}))


def test_auto_migration_follows_each_new_configuration() -> None:
    replica = work(Clock())
    assert not replica.admitter.settings.auto_migration.enable
    on = parse_dynamic_config("autoMigration:\n  enable: true\n", "config.yaml")
    replica.apply_config(on)
    assert replica.admitter.settings.auto_migration.enable
    assert replica.certificates.auto_migration
    replica.apply_config(parse_dynamic_config("metricsTTL: 7d\n", "config.yaml"))
    assert not replica.admitter.settings.auto_migration.enable
    assert not replica.certificates.auto_migration


def test_a_bad_auto_migration_is_logged_and_migrates_nothing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    replica = work(Clock())
    bad = parse_dynamic_config("autoMigration:\n  enable: 'yes'\n", "config.yaml")
    with caplog.at_level(logging.WARNING):
        replica.apply_config(bad)
    assert not replica.admitter.settings.auto_migration.enable
    assert 'autoMigration.enable: invalid value "yes"' in caplog.text


def test_warns_while_auto_migration_meets_an_object_selector(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = Clock()
    certs = certificates(clock)
    with caplog.at_level(logging.WARNING):
        certs._check_object_selector([SELECTING])
        assert not caplog.records, "auto-migration is off: nothing to warn about"
        certs.auto_migration = True
        certs._check_object_selector([webhook(None), webhook(LabelSelector())])
        assert not caplog.records, "no label selection: every pod reaches the webhook"
        certs._check_object_selector([SELECTING])
        assert len(caplog.records) == 1
        assert "still has an objectSelector on mutate.tensor-fusion.ai" in caplog.text
        clock.now += datetime.timedelta(minutes=5)
        certs._check_object_selector([SELECTING])
        assert len(caplog.records) == 1, "warned again within 10 minutes"
        clock.now += datetime.timedelta(minutes=6)
        certs._check_object_selector([SELECTING])
        assert len(caplog.records) == 2
