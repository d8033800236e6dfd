"""Schema DDL, the embedded DuckDB store, the write buffer and TTL parsing."""

from __future__ import annotations

from pathlib import Path

import pytest

from tensorfusion.adapters.tsdb.duckdb_store import DuckDBMetricsStore
from tensorfusion.adapters.tsdb.write_buffer import WriteBuffer
from tensorfusion.domain.metrics.retention import RetentionError, parse_ttl
from tensorfusion.domain.metrics.rows import MetricRow
from tensorfusion.domain.metrics.schema import TABLE_NAMES, greptime_create_table, table


def test_nine_tables_and_greptime_ddl() -> None:
    assert len(TABLE_NAMES) == 9
    ddl = greptime_create_table(table("tf_worker_usage"), "30d")
    assert "worker STRING SKIPPING INDEX" in ddl and "node STRING INVERTED INDEX" in ddl
    assert "memory_bytes BIGINT" in ddl and "ts TIMESTAMP(9) NOT NULL TIME INDEX" in ddl
    assert "PRIMARY KEY (workload, worker, pod_name, namespace, pool, node, uuid)" in ddl
    assert ddl.endswith("WITH (ttl = '30d', merge_mode = 'last_non_null')")
    log = greptime_create_table(table("tf_system_log"), "7d")
    assert "greptime_timestamp TIMESTAMP(9) NOT NULL TIME INDEX" in log
    assert "message STRING FULLTEXT INDEX WITH (analyzer = 'English'" in log


@pytest.mark.parametrize(
    ("text", "ms"), [("30d", 30 * 86_400_000), ("1d12h", 129_600_000), ("1w", 604_800_000)]
)
def test_ttl(text: str, ms: int) -> None:
    assert parse_ttl(text) == ms


@pytest.mark.parametrize("text", ["30 days", "1.5d", "", "0d", None, "30d\n", "\u0663d", "\uff13d"])
def test_bad_ttl(text: object) -> None:
    with pytest.raises(RetentionError):
        parse_ttl(text)


def test_duckdb_store_insert_query_new_columns_and_retention(tmp_path: Path) -> None:
    store = DuckDBMetricsStore(tmp_path / "metrics.duckdb", threads=1)
    try:
        rows = [
            MetricRow(
                "tf_gpu_usage",
                2_000,
                {"node": "n", "pool": "p", "uuid": "u"},
                {"temperature": 50.0, "memory_bytes": 7, "vendor_x": 1.5},
            ),
            MetricRow(
                "tf_gpu_usage",
                1_000,
                {"node": "n", "pool": "p", "uuid": "u", "rack": "r1"},
                {"temperature": 40.0},
            ),
            MetricRow("custom_table", 1_000, {"a": "b"}, {"ok": True}),
        ]
        assert store.insert_rows(rows) == 3
        result = store.query(
            "SELECT ts, temperature, memory_bytes, vendor_x, rack FROM tf_gpu_usage ORDER BY ts"
        )
        assert result.columns == ("ts", "temperature", "memory_bytes", "vendor_x", "rack")
        assert [row[1:] for row in result.rows] == [(40.0, None, None, "r1"), (50.0, 7, 1.5, None)]
        assert result.rows[0][0].isoformat() == "1970-01-01T00:00:01"
        assert store.query("SELECT ok FROM custom_table").rows == [(True,)]
        assert store.ingest_lines("tf_gpu_usage,node=n temperature=60 3") == 1
        assert store.delete_older_than(2_000) == 3
        assert store.query("SELECT count(*) FROM tf_gpu_usage").rows == [(1,)]
    finally:
        store.close()


def test_write_buffer_drops_oldest_logs_first() -> None:
    buffer = WriteBuffer(max_rows=3, max_bytes=10_000)
    buffer.add("tf_gpu_usage", "m1", 0.0)
    buffer.add("tf_system_log", "l1", 0.0)
    buffer.add("tf_gpu_usage", "m2", 0.0)
    dropped = buffer.add("tf_gpu_usage", "m3", 0.0)
    assert dropped == {"tf_system_log": 1}
    dropped = buffer.add("tf_gpu_usage", "m4", 0.0)
    assert dropped == {"tf_gpu_usage": 1}
    batch = buffer.peek_batch(2, 10_000)
    assert [entry.line for entry in batch] == ["m2", "m3"]
    buffer.acknowledge(batch)
    assert [entry.line for entry in buffer.peek_batch(10, 10_000)] == ["m4"]
    assert buffer.bytes == 3
