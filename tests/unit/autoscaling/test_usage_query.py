"""The autoscaler's queries. On the real embedded store (DuckDB): the fill reads the attributed
rows of its span up to the cut, the new rows those after it; never a row the provider could not
attribute (`usage_known = 0`) or one outside the span. In both dialects: one read statement
each, their time bounds, the workloads named only when safe."""

from __future__ import annotations

import time
from dataclasses import replace

from tensorfusion.adapters.tsdb.duckdb_store import DuckDBMetricsStore
from tensorfusion.domain.alerting.read_query import check_read_query
from tensorfusion.domain.autoscaling.usage_query import (
    MAX_NAMED_WORKLOADS,
    MAX_RECENT_ROWS,
    PercentileSet,
    fill_query,
    recent_query,
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


def test_the_fill_and_the_new_rows_read_attributed_rows_of_their_span_only() -> None:
    store = DuckDBMetricsStore()
    now_ms = int(time.time() * 1000)
    rows = []
    for i, sample in enumerate(_samples("infer", [10.0, 20.0, 30.0], [GIB, 2 * GIB, 3 * GIB])):
        rows += worker_usage_rows([sample], now_ms - 60_000 + i * 30_000)  # -60 s, -30 s, now
    rows += worker_usage_rows(_samples("old", [90.0], [GIB]), now_ms - 7_200_000)  # 2 h ago
    unknown = [replace(sample, usage_known=False) for sample in _samples("nvml", [0.0], [0])]
    rows += worker_usage_rows(unknown, now_ms - 45_000)  # zeros for want of a figure: never read
    store.insert_rows(rows)
    cut = now_ms - 15_000
    filled = store.query(fill_query(Dialect.DUCKDB, start_ms=now_ms - 3_600_000, end_ms=now_ms,
                                    cut_ms=cut)).mappings()  # fmt: skip
    # Before the cut: two samples of infer, per resource; nothing of nvml or of 2 h ago.
    assert {(r["workload"], r["resource"]) for r in filled} == {("infer", 0), ("infer", 1)}
    assert sum(r["samples"] for r in filled if r["resource"] == 0) == 2
    assert {r["high"] for r in filled if r["resource"] == 0} == {10.0, 20.0}
    recent = store.query(recent_query(Dialect.DUCKDB, cut)).mappings()
    assert [(r["workload"], r["compute_tflops"]) for r in recent] == [("infer", 30.0)]


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
