"""The Alertmanager sender never dies silently: unencodable notices are dropped alone and any
unexpected error is logged, counted and retried (no HTTP peer needed: the target is closed)."""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections.abc import Callable

import pytest

from tensorfusion.adapters.alertmanager.client import AlertmanagerClient, DeliveryMetrics
from tensorfusion.domain.alerting.alerts import AlertNotice
from tensorfusion.domain.backoff import Backoff

_FAR_FUTURE_MS = 4_000_000_000_000


def _closed_url() -> str:
    """An Alertmanager URL on a loopback port nothing listens on (every post fails)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}/api/v2/alerts"


def _notice(fingerprint: str, summary: str = "ok") -> AlertNotice:
    return AlertNotice(
        "R", fingerprint, {"alertname": "R"}, {"summary": summary}, 0, _FAR_FUTURE_MS, False
    )


def _fast() -> Backoff:
    return Backoff(initial=0.01, maximum=0.05)


async def _eventually(check: Callable[[], bool], what: str, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


def _sample(metrics: DeliveryMetrics, name: str, **labels: str) -> float:
    for metric in (metrics.unencodable, metrics.sender_errors, metrics.notifications):
        for family in metric.collect():
            for sample in family.samples:
                if sample.name == name and sample.labels == labels:
                    return float(sample.value)
    return 0.0


async def test_an_unencodable_notice_is_dropped_alone_and_the_sender_goes_on() -> None:
    metrics = DeliveryMetrics()
    url = _closed_url()
    client = AlertmanagerClient([url], metrics=metrics, backoff=_fast())
    await client.start()
    try:
        client.submit([_notice("bad", "bad \ud800 text")])
        await _eventually(lambda: client.status()[0]["unencodable"] == 1, "the drop")
        status = client.status()[0]
        assert (status["queued"], status["dropped"], status["consecutiveFailures"]) == (0, 1, 0)
        assert status["senderRunning"] and status["senderErrors"] == 0
        assert _sample(metrics, "tf_alert_notices_unencodable_total", target=url) == 1
        assert _sample(metrics, "tf_alert_notifications_total", target=url, result="dropped") == 1
        # Later notices are still posted (and retried: the target is closed).
        client.submit([_notice("good")])
        await _eventually(lambda: client.status()[0]["consecutiveFailures"] >= 2, "retries")
        assert client.queued() == 1 and client.status()[0]["unencodable"] == 1
    finally:
        await client.stop()


async def test_an_unencodable_notice_in_a_batch_leaves_the_others_queued() -> None:
    client = AlertmanagerClient([_closed_url()], backoff=_fast())
    await client.start()
    try:
        client.submit([_notice("a"), _notice("bad", "\udc80"), _notice("b")])
        await _eventually(lambda: client.status()[0]["consecutiveFailures"] >= 2, "retries")
        status = client.status()[0]
        assert (status["unencodable"], status["queued"], client.queued()) == (1, 2, 2)
    finally:
        await client.stop()


async def test_an_unexpected_sender_error_is_logged_counted_and_retried(
    caplog: pytest.LogCaptureFixture,
) -> None:
    calls = 0

    def clock_ms() -> int:
        nonlocal calls
        calls += 1
        if calls == 2:  # the sender's first look at the outbox
            raise RuntimeError("clock broke once")
        return 1_000

    metrics = DeliveryMetrics()
    url = _closed_url()
    client = AlertmanagerClient([url], metrics=metrics, clock_ms=clock_ms, backoff=_fast())
    await client.start()
    try:
        with caplog.at_level(logging.ERROR, "tensorfusion.adapters.alertmanager.client"):
            client.submit([_notice("n")])
            await _eventually(lambda: client.status()[0]["consecutiveFailures"] >= 1, "a post")
        status = client.status()[0]
        assert status["senderErrors"] == 1 and status["senderRunning"]
        assert _sample(metrics, "tf_alert_sender_errors_total", target=url) == 1
        assert "unexpected sender error" in caplog.text and "clock broke once" in caplog.text
    finally:
        await client.stop()


@pytest.mark.parametrize(
    ("end", "last_error", "logged"),
    [
        (None, "sender stopped", "sender stopped unexpectedly"),
        (RuntimeError("boom"), "sender stopped: RuntimeError('boom')", "stopped by an exception"),
    ],
)
async def test_a_sender_that_ends_is_logged_and_shown_in_status(
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    end: Exception | None,
    last_error: str,
    logged: str,
) -> None:
    async def ends(target: object) -> None:
        if end is not None:
            raise end

    client = AlertmanagerClient([_closed_url()])
    monkeypatch.setattr(client, "_sender", ends)  # a sender loop that ends (it never should)
    with caplog.at_level(logging.ERROR, "tensorfusion.adapters.alertmanager.client"):
        await client.start()
        await _eventually(lambda: not client.status()[0]["senderRunning"], "the end")
    assert client.status()[0]["lastError"] == last_error
    assert logged in caplog.text
    await client.stop()
