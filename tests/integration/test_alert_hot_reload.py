"""Hot reload of config.yaml, the standalone CLI process, and a store outage."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from tensorfusion.adapters.alertmanager.targets import alerts_url
from tensorfusion.adapters.tsdb.greptime_store import GreptimeSettings, GreptimeStore
from tensorfusion.alerting.event_sink import RecordingEventSink
from tensorfusion.alerting.standalone import StandaloneEvaluator, StandaloneOptions

from .loopback_peers import (
    Alertmanager,
    MariaDB,
    WebhookReceiver,
    eventually,
    free_port,
    stop_process,
)

pytestmark = pytest.mark.integration


def _constant_rule(name: str, node: str) -> dict[str, Any]:
    """A rule whose query returns one constant row: no table needed (alerting.md §11)."""
    return {
        "name": name,
        "query": f"SELECT '{node}' AS node",
        "evaluationInterval": "1s",
        "consecutiveCount": 1,
        "severity": "P2",
        "summary": "{{ .Name }} fired for {{ .node }}",
        "alertTargetInstance": "{{ .node }}",
    }


def _write_config(directory: Path, rules: list[dict[str, Any]]) -> None:
    # Like kubelet: write a new file and swap it in, never edit in place.
    temporary = directory / ".config.yaml.tmp"
    temporary.write_text(yaml.safe_dump({"alertRules": rules, "metricsTTL": "30d"}))
    os.replace(temporary, directory / "config.yaml")


def _names(receiver: WebhookReceiver, status: str) -> set[str]:
    return {alert["labels"]["alertname"] for alert in receiver.alerts(status)}


def _evaluations(standalone: StandaloneEvaluator, rule: str) -> float:
    """Successful evaluations of a rule so far (`tf_alert_evaluations_total`)."""
    labels = {"rule": rule, "result": "ok"}
    return standalone.registry.get_sample_value("tf_alert_evaluations_total", labels) or 0.0


def _config_valid(standalone: StandaloneEvaluator) -> float | None:
    return standalone.registry.get_sample_value("tf_dynamic_config_valid")


async def test_rule_change_applies_without_restart_and_broken_file_keeps_rules(
    tmp_path: Path, alertmanager: Alertmanager, receiver: WebhookReceiver
) -> None:
    config_dir = tmp_path / "config"
    config_dir.mkdir()
    _write_config(config_dir, [_constant_rule("FirstRule", "node-a")])
    events = RecordingEventSink()
    standalone = StandaloneEvaluator(
        StandaloneOptions(
            config_dir=config_dir,
            alertmanager_urls=[alerts_url(alertmanager.url)],
            listen_port=None,
            poll_interval_s=0.1,
        ),
        events=events,
        max_first_delay_s=0.1,
    )
    await standalone.start()
    try:
        await eventually(lambda: "FirstRule" in _names(receiver, "firing"), 20, "FirstRule")
        _write_config(config_dir, [_constant_rule("SecondRule", "node-b")])
        await eventually(lambda: "SecondRule" in _names(receiver, "firing"), 20, "SecondRule")
        await eventually(
            lambda: "FirstRule" in _names(receiver, "resolved"), 20, "removed rule resolved"
        )
        assert _config_valid(standalone) == 1
        (config_dir / ".broken").write_text("alertRules: [unclosed\n")
        os.replace(config_dir / ".broken", config_dir / "config.yaml")
        await eventually(
            lambda: any(e.reason == "DynamicConfigInvalid" for e in events.events),
            20,
            "the DynamicConfigInvalid report",
        )
        # Counted from the moment the broken file was seen: the old rule keeps being evaluated.
        seen = _evaluations(standalone, "SecondRule")
        await eventually(
            lambda: _evaluations(standalone, "SecondRule") >= seen + 2,
            20,
            "two more evaluations of SecondRule after the broken file",
        )
        assert _config_valid(standalone) == 0
        status = standalone.status()
        assert [(rule["name"], rule["valid"]) for rule in status["rules"]] == [("SecondRule", True)]
        assert "not valid YAML" in standalone.watcher.status()["error"]
        # One invalid rule among valid ones is rejected alone and reported.
        bad = dict(_constant_rule("BadInterval", "x"), evaluationInterval="1.5h")
        _write_config(config_dir, [_constant_rule("SecondRule", "node-b"), bad])
        await eventually(
            lambda: any(e.reason == "AlertRuleInvalid" for e in events.events),
            20,
            "AlertRuleInvalid",
        )
        rules = standalone.status()["rules"]
        assert {(r["name"], r["valid"]) for r in rules} == {
            ("SecondRule", True),
            ("BadInterval", False),
        }
    finally:
        await standalone.stop()


async def test_standalone_cli_process(
    tmp_path: Path, alertmanager: Alertmanager, receiver: WebhookReceiver
) -> None:
    config_dir = tmp_path / "config"
    config_dir.mkdir()
    _write_config(config_dir, [_constant_rule("CliRule", "node-c")])
    port = free_port()
    log = (tmp_path / "cli.log").open("wb")
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tensorfusion.cli.main",
            "alerts",
            "run",
            "--config-dir",
            str(config_dir),
            "--alert-manager-addr",
            alertmanager.url,
            "--state-file",
            str(tmp_path / "state.json"),
            "--listen",
            f"127.0.0.1:{port}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )

    def status() -> dict[str, Any] | None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/alerts", timeout=1) as r:
                body: dict[str, Any] = json.loads(r.read())
                return body
        except OSError:
            return None

    try:
        await eventually(lambda: "CliRule" in _names(receiver, "firing"), 30, "CliRule delivered")
        body = await asyncio.to_thread(status)
        assert body is not None and any(rule["firing"] for rule in body["rules"])
        assert body is not None and body["store"]["kind"] == "duckdb" and body["store"]["up"]
        os.kill(process.pid, signal.SIGTERM)
        assert process.wait(20) == 0
        state = json.loads((tmp_path / "state.json").read_text())
        assert [entry["rule"] for entry in state["firing"]] == ["CliRule"]
    finally:
        stop_process(process)


def test_cli_rejects_an_address_without_scheme(tmp_path: Path) -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "tensorfusion.cli.main",
            "alerts",
            "run",
            "--config-dir",
            str(tmp_path),
            "--alert-manager-addr",
            "alertmanager:9093",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert "--alert-manager-addr" in result.stderr and "http://" in result.stderr


async def test_store_outage_is_reported_and_evaluation_resumes(
    tmp_path: Path, mariadb: MariaDB, alertmanager: Alertmanager, receiver: WebhookReceiver
) -> None:
    config_dir = tmp_path / "config"
    config_dir.mkdir()
    _write_config(config_dir, [_constant_rule("StoreRule", "node-d")])
    mariadb.stop()
    settings = GreptimeSettings(host="127.0.0.1", port=mariadb.port, db="mysql")
    standalone = StandaloneEvaluator(
        StandaloneOptions(
            config_dir=config_dir,
            alertmanager_urls=[alerts_url(alertmanager.url)],
            listen_port=None,
            poll_interval_s=0.2,
        ),
        store_factory=lambda: GreptimeStore(settings),
        max_first_delay_s=0.1,
    )
    await standalone.start()
    try:
        await eventually(
            lambda: (
                standalone.status()["store"]["up"] is False
                and standalone.status()["rules"][0]["lastError"] != ""
            ),
            20,
            "the store reported down",
        )
        assert standalone.metrics.store_up.labels("read")._value.get() == 0
        assert standalone.evaluator.running
        mariadb.start()
        await eventually(lambda: "StoreRule" in _names(receiver, "firing"), 60, "resumed rule")
        assert standalone.status()["store"]["readUp"] is True
    finally:
        await standalone.stop()
