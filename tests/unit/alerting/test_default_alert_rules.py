"""The 15 default rules: shape, chart copy, and each firing on the embedded store."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import yaml

from tensorfusion.adapters.package_data import (
    default_alert_rule_definitions,
    default_alert_rule_set,
)
from tensorfusion.adapters.tsdb.duckdb_store import DuckDBMetricsStore
from tensorfusion.domain.alerting.replay import replay_alerts
from tensorfusion.domain.alerting.rules import load_rules
from tensorfusion.domain.metrics.rows import MetricRow
from tensorfusion.domain.metrics.schema import table

REPO = Path(__file__).resolve().parents[3]
START = 1787220000000  # 2026-08-20T10:00:00Z


def test_fifteen_valid_rules_with_the_spec_severities() -> None:
    rules = default_alert_rule_set()
    assert not rules.problems and not rules.warnings
    assert len(rules.rules) == 15
    assert Counter(rule.severity for rule in rules.rules) == {"P0": 2, "P1": 11, "P2": 2}
    for rule in rules.rules:
        assert "{{ .Conditions }}" in rule.query.source
        assert not rule.calls_now


def test_the_chart_ships_the_same_rules() -> None:
    values = yaml.safe_load((REPO / "charts/tensor-fusion/values.yaml").read_text())
    assert values["dynamicConfig"]["alertRules"] == default_alert_rule_definitions()
    assert values["dynamicConfig"]["metricsTTL"] == "30d"


def test_columns_read_by_the_rules_exist() -> None:
    read = {
        "tf_worker_usage": [
            "workload",
            "worker",
            "uuid",
            "node",
            "compute_throttled_cnt",
            "vram_resumed_cnt",
        ],
        "tf_system_metrics": ["pool", "total_allocation_fail_cnt"],
        "tf_gpu_usage": [
            "node",
            "pool",
            "uuid",
            "memory_percentage",
            "compute_percentage",
            "temperature",
        ],
        "tf_node_metrics": ["node", "pool", "allocated_tflops_percent", "allocated_vram_percent"],
    }
    for name, columns in read.items():
        for column in columns:
            assert table(name).column_type(column) is not None, (name, column)


def _data(end_ms: int) -> list[MetricRow]:
    rows: list[MetricRow] = []
    for ts in range(START, end_ms + 1, 10_000):
        step = (ts - START) // 10_000
        for gpu in range(4):
            node = f"node-{gpu // 2}"
            rows.append(
                MetricRow(
                    "tf_gpu_usage",
                    ts,
                    {"node": node, "pool": "pool-a", "uuid": f"gpu-{gpu}"},
                    {
                        "compute_percentage": [0.2, 99.0, 50.0, 50.0][gpu],
                        "memory_percentage": [1.0, 98.5, 50.0, 50.0][gpu],
                        "temperature": [40.0, 60.0, 93.0, 60.0][gpu],
                        "memory_bytes": 1,
                    },
                )
            )
            if gpu < 3:
                rows.append(
                    MetricRow(
                        "tf_worker_usage",
                        ts,
                        {
                            "workload": "w",
                            "worker": f"worker-{gpu}",
                            "pod_name": f"worker-{gpu}",
                            "namespace": "ns",
                            "pool": "pool-a",
                            "node": node,
                            "uuid": f"gpu-{gpu}",
                        },
                        {
                            "compute_throttled_cnt": step if gpu == 1 else 0,
                            "vram_resumed_cnt": step // 3 if gpu == 2 else 0,
                            "compute_percentage": 1.0,
                            "memory_bytes": 1,
                        },
                    )
                )
        for node, pool, tflops, vram in (
            ("node-0", "pool-a", 97.0, 97.0),
            ("node-1", "pool-a", 95.5, 92.0),
            ("node-9", "pool-idle", 0.0, 0.0),
        ):
            rows.append(
                MetricRow(
                    "tf_node_metrics",
                    ts,
                    {"node": node, "pool": pool, "phase": "Running"},
                    {
                        "allocated_tflops_percent": tflops,
                        "allocated_vram_percent": vram,
                        "gpu_count": 2,
                    },
                )
            )
        rows.append(
            MetricRow(
                "tf_system_metrics",
                ts,
                {"pool": "pool-a"},
                {"total_allocation_fail_cnt": step, "total_workers_cnt": 3},
            )
        )
    return rows


def test_every_default_rule_fires_on_duckdb() -> None:
    end = START + 40 * 60_000
    store = DuckDBMetricsStore(threads=1)
    try:
        store.insert_rows(_data(end))
        report = replay_alerts(default_alert_rule_set().rules, store, START, end)
    finally:
        store.close()
    assert report.errors == []
    fired = {event.rule for event in report.events if event.kind == "firing"}
    assert fired == {rule.name for rule in default_alert_rule_set().rules}
    by_rule = {event.rule: event for event in report.events if event.kind == "firing"}
    assert by_rule["GPUTemperatureHigh"].instance == "gpu-2"
    assert by_rule["GPUTemperatureHigh"].summary == "GPU gpu-2 is overheating on node node-1"
    assert "averaged 93.0°C (threshold 90°C) in the last 30s, 3 evaluations" in (
        by_rule["GPUTemperatureHigh"].description
    )
    assert by_rule["EmptyGPU"].instance == "node-9"
    assert by_rule["IdleGPU"].instance == "gpu-0"
    assert by_rule["WorkerTFlopsThrottled"].instance == "worker-1-gpu-1"
    assert "in the last 2m" in by_rule["WorkerVRAMSwitchCountIncreasing"].description


def test_the_guide_example_rule_renders_as_documented() -> None:
    guide = {
        "name": "GPUTemperatureWarning",
        "query": "SELECT node, pool, uuid, avg(temperature) AS avg_temperature\nFROM tf_gpu_usage\n"
        "WHERE temperature > {{ .Threshold }} AND {{ .Conditions }}\n"
        "GROUP BY node, pool, uuid\n",
        "threshold": 80,
        "evaluationInterval": "30s",
        "consecutiveCount": 3,
        "severity": "P2",
        "summary": "GPU temperature above {{ .Threshold }}°C on {{ .node }} {{ .uuid }}",
        "description": "GPU {{ .uuid }} on node {{ .node }} in pool {{ .pool }} averages "
        "{{ .avg_temperature }}°C",
        "alertTargetInstance": "{{ .uuid }}",
        "runbookURL": "https://runbook",
    }
    rule = load_rules([guide]).rules[0]
    data = rule.text_data(
        {"node": "node-a", "uuid": "gpu-7c1e", "pool": "p", "avg_temperature": 85.5}
    )
    assert rule.summary.render(data) == "GPU temperature above 80°C on node-a gpu-7c1e"
    assert rule.description.render(data).endswith("averages 85.5°C")
