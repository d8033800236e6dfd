"""The autoscaler's queries. The exact one on the real embedded store (DuckDB): per workload the
sample count and the percentiles of its per-GPU TFLOPS and VRAM over the window, older rows
left out; the GreptimeDB form; a malformed answer read as zeros. The fill and the new rows: one
read statement in each dialect, their time bounds, the workloads named only when safe."""

from __future__ import annotations

import time
from dataclasses import replace

from tensorfusion.adapters.tsdb.duckdb_store import DuckDBMetricsStore
from tensorfusion.domain.alerting.read_query import check_read_query
from tensorfusion.domain.autoscaling.recommendation import percentile
from tensorfusion.domain.autoscaling.usage_query import (
    MAX_NAMED_WORKLOADS,
    MAX_RECENT_ROWS,
    PercentileSet,
    fill_query,
    parse_usage,
    recent_query,
    usage_query,
)
from tensorfusion.domain.metrics.conditions import Dialect
from tensorfusion.domain.metrics.recorders import WorkerUsageSample, worker_usage_rows

GIB = 1 << 30
SET = PercentileSet(compute=(0.5, 0.95, 0.99), vram=(0.5, 0.9, 0.99))


def _samples(workload: str, tflops: list[float], vram: list[int]) -> list[WorkerUsageSample]:
    return [WorkerUsageSample(worker=f"{workload}-0", namespace="ml", pool="p", node="n",
                              uuid="gpu-a", workload=workload, compute_percentage=t,
                              capacity_tflops=100.0, memory_bytes=v, memory_limit_bytes=GIB,
                              usage_known=True)
            for t, v in zip(tflops, vram, strict=True)]  # fmt: skip


def test_percentiles_per_workload_over_the_window() -> None:
    store = DuckDBMetricsStore()
    now_ms = int(time.time() * 1000)
    tflops = [float(i % 50) for i in range(200)]  # compute_percentage of a 100-TFLOPS card
    vram = [(i % 20) * GIB for i in range(200)]
    rows = []
    for i, sample in enumerate(_samples("infer", tflops, vram)):
        rows += worker_usage_rows([sample], now_ms - i * 1000)
    rows += worker_usage_rows(_samples("old", [90.0], [GIB]), now_ms - 7_200_000)  # 2 h ago
    unknown = [replace(sample, usage_known=False) for sample in _samples("nvml", [0.0], [0])]
    rows += worker_usage_rows(unknown, now_ms)  # zeros for want of a figure: never read
    store.insert_rows(rows)
    answer = store.query(usage_query(Dialect.DUCKDB, 3600, SET))
    usage = parse_usage(answer.mappings())
    assert set(usage) == {("ml", "infer")}
    found = usage[("ml", "infer")]
    assert found.compute.samples == 200
    assert abs(found.compute.target - percentile(tflops, 0.95) * 1000) < 1e-6
    assert abs(found.vram.upper - percentile([float(v) for v in vram], 0.99)) < 1
    assert found.compute.lower == percentile(tflops, 0.5) * 1000


def test_the_greptime_form_uses_its_percentile_function_and_interval() -> None:
    sql = usage_query(Dialect.GREPTIME, 86_400, SET)
    assert "approx_percentile_cont(compute_tflops, 0.95)" in sql
    assert "ts >= now() - '86400s'::INTERVAL" in sql and sql.endswith("LIMIT 100000")


def test_a_malformed_answer_reads_as_zeros() -> None:
    usage = parse_usage([{"namespace": "ml", "workload": "w", "samples": "x", "c1": "NaN",
                          "v2": -5, "c0": None}])  # fmt: skip
    found = usage[("ml", "w")]
    assert (found.compute.samples, found.compute.target, found.vram.upper) == (0, 0.0, 0.0)


def test_the_fill_and_the_new_rows_in_both_dialects_are_one_read_statement() -> None:
    for dialect in Dialect:
        fill = fill_query(dialect, start_ms=0, end_ms=3_600_000, cut_ms=1_000,
                          keys=[("ml", "a"), ("ml", "b"), ("ops", "c")])  # fmt: skip
        check_read_query(fill)
        assert "ts >= TIMESTAMP '1970-01-01 00:00:00.000'" in fill
        assert "ts <= TIMESTAMP '1970-01-01 00:00:01.000'" in fill
        assert ("((namespace = 'ml' AND workload IN ('a', 'b')) OR (namespace = 'ops' AND "
                "workload IN ('c')))") in fill  # fmt: skip
        recent = recent_query(dialect, 1_000)
        check_read_query(recent)
        assert "ts > TIMESTAMP '1970-01-01 00:00:01.000'" in recent
        assert recent.endswith(f"LIMIT {MAX_RECENT_ROWS + 1}")
    assert "CAST(ts AS BIGINT) / 1000000 AS ts_ms" in recent_query(Dialect.GREPTIME, 0)
    assert "epoch_ms(ts) AS ts_ms" in recent_query(Dialect.DUCKDB, 0)


def test_a_name_that_is_not_a_kubernetes_name_is_never_quoted_into_sql() -> None:
    sql = fill_query(Dialect.DUCKDB, start_ms=0, end_ms=1, cut_ms=1,
                     keys=[("ml", "a'); DROP TABLE x; --")])  # fmt: skip
    assert "DROP" not in sql and "workload IN" not in sql
    many = [("ml", f"w{i}") for i in range(MAX_NAMED_WORKLOADS + 1)]
    assert "workload IN" not in fill_query(Dialect.DUCKDB, start_ms=0, end_ms=1, cut_ms=1,
                                           keys=many)  # fmt: skip
