"""The autoscaler round's query on the real embedded store (DuckDB): per workload the sample
count and the percentiles of its per-GPU TFLOPS and VRAM over the window, older rows left
out; the GreptimeDB form; a malformed answer read as zeros."""

from __future__ import annotations

import time
from dataclasses import replace

from tensorfusion.adapters.tsdb.duckdb_store import DuckDBMetricsStore
from tensorfusion.domain.autoscaling.recommendation import percentile
from tensorfusion.domain.autoscaling.usage_query import PercentileSet, parse_usage, usage_query
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
