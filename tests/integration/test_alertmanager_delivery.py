"""The evaluator against a real Alertmanager whose webhook receiver is a loopback server."""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path

import pytest

from tensorfusion.adapters.alertmanager.client import AlertmanagerClient
from tensorfusion.adapters.alertmanager.targets import alerts_url
from tensorfusion.adapters.tsdb.duckdb_store import DuckDBMetricsStore, EmbeddedMetricsStore
from tensorfusion.alerting.evaluator import AlertEvaluator
from tensorfusion.alerting.event_sink import RecordingEventSink
from tensorfusion.alerting.state_store import FileStateStore
from tensorfusion.domain.alerting.alerts import AlertNotice
from tensorfusion.domain.alerting.rules import load_rules
from tensorfusion.domain.backoff import Backoff
from tensorfusion.domain.metrics.rows import MetricRow

from .loopback_peers import Alertmanager, WebhookReceiver, eventually

pytestmark = pytest.mark.integration

HOT_RULE = {
    "name": "GPUTemperatureAlways",
    "query": (
        "SELECT node, pool, uuid, avg(temperature) AS avg_temperature FROM tf_gpu_usage "
        "WHERE temperature > {{ .Threshold }} AND {{ .Conditions }} GROUP BY node, pool, uuid"
    ),
    "threshold": -1,
    "evaluationInterval": "1m",
    "consecutiveCount": 2,
    "severity": "P1",
    "summary": 'GPU {{ .uuid }} on {{ .node }} at {{ printf "%.1f" .avg_temperature }}°C',
    "description": "threshold {{ .Threshold }} over {{ .EvaluationInterval }}",
    "alertTargetInstance": "{{ .uuid }}",
    "runbookURL": "https://example.invalid/runbook",
}


def _rows(now_ms: int) -> list[MetricRow]:
    return [
        MetricRow(
            "tf_gpu_usage",
            now_ms - offset,
            {"node": "node-a", "pool": "pool-a", "uuid": "gpu-7c1e"},
            {"temperature": 71.25, "memory_percentage": 10.0, "compute_percentage": 5.0},
        )
        for offset in (0, 10_000, 20_000)
    ]


def _fast_backoff() -> Backoff:
    return Backoff(initial=0.2, maximum=1.0)


async def test_fires_after_consecutive_count_and_resolves(
    tmp_path: Path, alertmanager: Alertmanager, receiver: WebhookReceiver
) -> None:
    database = DuckDBMetricsStore()
    database.insert_rows(_rows(int(time.time() * 1000)))
    store = EmbeddedMetricsStore(database)
    client = AlertmanagerClient([alerts_url(alertmanager.url)], backoff=_fast_backoff())
    await client.start()
    evaluator = AlertEvaluator(
        store,
        client,
        state_store=FileStateStore(tmp_path / "state.json"),
        events=RecordingEventSink(),
    )
    await evaluator.start(load_rules([HOT_RULE]), timers=False)
    try:
        await evaluator.evaluate("GPUTemperatureAlways")
        assert evaluator.firing() == []  # pending: count 1 of 2
        assert client.status()[0]["delivered"] == 0
        await evaluator.evaluate("GPUTemperatureAlways")
        assert len(evaluator.firing()) == 1
        await eventually(lambda: receiver.alerts("firing") != [], 20, "the firing notification")
        alert = receiver.alerts("firing")[0]
        assert alert["annotations"]["summary"] == "GPU gpu-7c1e on node-a at 71.2°C"
        assert alert["annotations"]["description"] == "threshold -1 over 1m"
        assert alert["annotations"]["runbook_url"] == "https://example.invalid/runbook"
        assert alert["labels"] == {
            "alertname": "GPUTemperatureAlways",
            "severity": "P1",
            "job": "tensor-fusion",
            "instance": "gpu-7c1e",
            "node": "node-a",
            "pool": "pool-a",
            "uuid": "gpu-7c1e",
        }
        database.execute("DELETE FROM tf_gpu_usage")
        await evaluator.evaluate("GPUTemperatureAlways")
        assert evaluator.firing() == []
        await eventually(lambda: receiver.alerts("resolved") != [], 20, "the resolved notification")
        assert receiver.alerts("resolved")[0]["labels"]["instance"] == "gpu-7c1e"
    finally:
        await evaluator.stop()
        await client.stop()
        database.close()


async def test_alerts_are_delivered_after_alertmanager_comes_back(
    tmp_path: Path, alertmanager: Alertmanager, receiver: WebhookReceiver
) -> None:
    database = DuckDBMetricsStore()
    database.insert_rows(_rows(int(time.time() * 1000)))
    client = AlertmanagerClient([alerts_url(alertmanager.url)], backoff=_fast_backoff())
    await client.start()
    evaluator = AlertEvaluator(
        EmbeddedMetricsStore(database),
        client,
        state_store=FileStateStore(tmp_path / "state.json"),
        events=RecordingEventSink(),
    )
    rule = dict(HOT_RULE, consecutiveCount=1)
    await evaluator.start(load_rules([rule]), timers=False)
    alertmanager.stop()
    try:
        await evaluator.evaluate("GPUTemperatureAlways")
        await eventually(
            lambda: client.status()[0]["consecutiveFailures"] >= 2, 20, "failed delivery attempts"
        )
        assert client.queued() == 1
        assert receiver.alerts() == []
        alertmanager.start()
        await eventually(lambda: receiver.alerts("firing") != [], 30, "delivery after restart")
        assert client.queued() == 0
        assert receiver.alerts("firing")[0]["labels"]["uuid"] == "gpu-7c1e"
    finally:
        await evaluator.stop()
        await client.stop()
        database.close()


class _Sent:
    """The notifier the evaluators see: records every notice, then hands it to the client."""

    def __init__(self, client: AlertmanagerClient) -> None:
        self.client = client
        self.notices: list[AlertNotice] = []

    def submit(self, notices: Sequence[AlertNotice]) -> None:
        self.notices.extend(notices)
        self.client.submit(notices)


async def test_firing_state_survives_an_evaluator_restart(
    tmp_path: Path, alertmanager: Alertmanager, receiver: WebhookReceiver
) -> None:
    database = DuckDBMetricsStore()
    database.insert_rows(_rows(int(time.time() * 1000)))
    state = FileStateStore(tmp_path / "state.json")
    rules = load_rules([dict(HOT_RULE, consecutiveCount=1)])
    client = AlertmanagerClient([alerts_url(alertmanager.url)], backoff=_fast_backoff())
    await client.start()
    sent = _Sent(client)
    first = AlertEvaluator(
        EmbeddedMetricsStore(database), sent, state_store=state, events=RecordingEventSink()
    )
    await first.start(rules, timers=False)
    await first.evaluate("GPUTemperatureAlways")
    starts_at = first.firing()[0].starts_at_ms
    await eventually(lambda: receiver.alerts("firing") != [], 20, "the firing notification")
    sent_before_restart = len(sent.notices)
    assert sent_before_restart == 1
    await first.stop()  # like losing leadership: state persisted, nothing more sent
    assert [record["rule"] for record in state.load()] == ["GPUTemperatureAlways"]

    second = AlertEvaluator(
        EmbeddedMetricsStore(database), sent, state_store=state, events=RecordingEventSink()
    )
    await second.start(rules, timers=False)
    try:
        # Neither the stop nor the restore sent anything.
        assert len(sent.notices) == sent_before_restart
        restored = second.firing()
        assert len(restored) == 1 and restored[0].starts_at_ms == starts_at
        # The next evaluation re-sends the same alert, not a new one: same startsAt.
        await second.evaluate("GPUTemperatureAlways")
        again = sent.notices[sent_before_restart:]
        assert [(n.resolved, n.starts_at_ms) for n in again] == [(False, starts_at)]
        deleted_at_ms = int(time.time() * 1000)
        database.execute("DELETE FROM tf_gpu_usage")
        await second.evaluate("GPUTemperatureAlways")
        assert [n.resolved for n in sent.notices[sent_before_restart + 1 :]] == [True]
        assert second.firing() == []
        await eventually(
            lambda: any(
                _ms(alert["endsAt"]) >= deleted_at_ms for alert in receiver.alerts("resolved")
            ),
            20,
            "the resolution sent by the new evaluator",
        )
    finally:
        await second.stop()
        await client.stop()
        database.close()
    assert state.load() == []


def _ms(rfc3339: str) -> int:
    """Milliseconds of an RFC 3339 time as Alertmanager prints it."""
    return int(datetime.fromisoformat(rfc3339.replace("Z", "+00:00")).timestamp() * 1000)


async def test_an_unencodable_notice_never_blocks_the_others(
    alertmanager: Alertmanager, receiver: WebhookReceiver
) -> None:
    """Regression: a lone surrogate in one notice ended the sender; nothing was sent again."""
    now_ms = int(time.time() * 1000)

    def notice(instance: str, summary: str) -> AlertNotice:
        labels = {"alertname": "Surrogate", "severity": "P2", "instance": instance}
        annotations = {"summary": summary}
        return AlertNotice("S", instance, labels, annotations, now_ms, now_ms + 3_600_000, False)

    client = AlertmanagerClient([alerts_url(alertmanager.url)], backoff=_fast_backoff())
    await client.start()
    try:
        client.submit([notice("bad", "bad \ud800 text")])
        client.submit([notice("first", "ok")])
        await eventually(lambda: receiver.alerts("firing") != [], 20, "the first good alert")
        client.submit([notice("second", "ok")])
        await eventually(
            lambda: (
                {a["labels"]["instance"] for a in receiver.alerts("firing")} == {"first", "second"}
            ),
            20,
            "the second good alert",
        )
        status = client.status()[0]
        assert (status["unencodable"], status["delivered"], status["queued"]) == (1, 2, 0)
        assert status["senderRunning"] and status["senderErrors"] == 0
    finally:
        await client.stop()
