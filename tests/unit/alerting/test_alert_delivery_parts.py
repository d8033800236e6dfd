"""Alertmanager targets and outbox, the file state store, and `alerts test`."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from tensorfusion.adapters.alertmanager.outbox import Outbox
from tensorfusion.adapters.alertmanager.targets import (
    AlertmanagerAddressError,
    parse_alertmanager_addresses,
)
from tensorfusion.alerting.state_store import FileStateStore, StateStoreError
from tensorfusion.cli.alerts import app
from tensorfusion.domain.alerting.alerts import AlertNotice


def test_addresses() -> None:
    assert parse_alertmanager_addresses(" http://am:9093 , https://am2/alertmanager/") == [
        "http://am:9093/api/v2/alerts",
        "https://am2/alertmanager/api/v2/alerts",
    ]
    with pytest.raises(AlertmanagerAddressError, match="--alert-manager-addr: 'am:9093'"):
        parse_alertmanager_addresses("am:9093")
    with pytest.raises(AlertmanagerAddressError, match="no address"):
        parse_alertmanager_addresses(" , ")


def _notice(fingerprint: str, *, resolved: bool = False, ends: int = 10_000) -> AlertNotice:
    return AlertNotice("R", fingerprint, {"a": fingerprint}, {}, 0, ends, resolved)


def test_outbox_replaces_evicts_and_expires() -> None:
    box = Outbox(capacity=2)
    box.put(_notice("r", resolved=True), 0)
    box.put(_notice("f1"), 0)
    assert box.put(_notice("f2"), 0) == 1  # the oldest firing entry goes first
    assert [e.notice.fingerprint for e in box.peek_batch(10)] == ["r", "f2"]
    batch = box.peek_batch(10)
    box.put(_notice("f2", ends=20_000), 1)  # newer message while the batch is in flight
    box.acknowledge(batch)
    assert [e.notice.ends_at_ms for e in box.peek_batch(10)] == [20_000]
    box.put(_notice("old", ends=5), 0)
    assert box.expire(10) == 1
    box.put(_notice("res", resolved=True), 0)
    assert box.expire(3_600_001) == 2  # the resolved entry and f2, now past its endsAt


def test_file_state_store_round_trip_and_caps(tmp_path: Path) -> None:
    store = FileStateStore(tmp_path / "sub" / "state.json")
    assert store.load() == []
    records = [
        {
            "rule": "R",
            "fingerprint": str(i),
            "labels": {"x": "y" * 400},
            "annotations": {},
            "startsAt": i,
            "lastSentAt": None,
        }
        for i in range(2500)
    ]
    store.save(records)
    loaded = store.load()
    assert len(loaded) <= 2000
    assert (tmp_path / "sub" / "state.json").stat().st_size <= 900 * 1024
    assert loaded[0]["startsAt"] == 2499  # most recently started kept
    assert list((tmp_path / "sub").iterdir()) == [tmp_path / "sub" / "state.json"]
    (tmp_path / "sub" / "state.json").write_text("{not json")
    with pytest.raises(StateStoreError, match="not valid JSON"):
        store.load()


def test_alerts_test_command(tmp_path: Path) -> None:
    rules = tmp_path / "rules.yaml"
    rules.write_text(
        yaml.safe_dump(
            {
                "alertRules": [
                    {
                        "name": "Hot",
                        "query": "SELECT node, avg(temperature) AS t FROM tf_gpu_usage "
                        "WHERE temperature > {{ .Threshold }} AND {{ .Conditions }} GROUP BY node",
                        "threshold": 90,
                        "evaluationInterval": "30s",
                        "consecutiveCount": 2,
                        "severity": "P1",
                        "summary": '{{ .node }} at {{ printf "%.1f" .t }}',
                        "alertTargetInstance": "{{ .node }}",
                    }
                ]
            }
        )
    )
    fixture = tmp_path / "data.yaml"
    fixture.write_text(
        yaml.safe_dump(
            {
                "start": "2026-08-20T10:00:00Z",
                "duration": "5m",
                "series": [
                    {
                        "table": "tf_gpu_usage",
                        "tags": {"node": "node-a", "pool": "p", "uuid": "u"},
                        "fields": {"temperature": 95},
                        "to": "2m",
                    }
                ],
            }
        )
    )
    result = CliRunner().invoke(app, ["test", str(rules), "--fixture", str(fixture)])
    assert result.exit_code == 0, result.output
    assert "+1m00s FIRING Hot instance=node-a: node-a at 95.0" in result.output
    assert "+3m00s RESOLVED Hot" in result.output
    as_json = CliRunner().invoke(app, ["test", str(rules), "--fixture", str(fixture), "--json"])
    assert '"kind": "firing"' in as_json.output
    bad = tmp_path / "bad.yaml"
    bad.write_text("series: [{tags: {}}]")
    failed = CliRunner().invoke(app, ["test", str(rules), "--fixture", str(bad)])
    assert failed.exit_code == 2 and "series #1" in failed.output
