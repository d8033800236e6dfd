"""The one query of an autoscaler round (docs/autoscaling.md): per workload, the sample count
and the lower, target and upper percentiles of its per-GPU TFLOPS and VRAM in
`tf_worker_usage` over the history window; and its answer read back, bounded.

The store computes the percentiles (DuckDB `quantile_cont` over a list of fractions, GreptimeDB
`approx_percentile_cont`), so a round reads one row per workload, never the samples.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from tensorfusion.domain.autoscaling.recommendation import UsagePercentiles
from tensorfusion.domain.metrics.conditions import Dialect, wall_conditions

__all__ = ["MAX_WORKLOAD_ROWS", "PercentileSet", "WorkloadUsage", "parse_usage", "usage_query"]

MAX_WORKLOAD_ROWS: Final = 100_000
"""Rows read back at most (one per workload)."""


@dataclass(frozen=True, slots=True)
class PercentileSet:
    """The percentiles asked (fractions), per resource: lower, target, upper."""

    compute: tuple[float, float, float]
    vram: tuple[float, float, float]


@dataclass(frozen=True, slots=True)
class WorkloadUsage:
    """One workload's usage over the window: TFLOPS in milli, VRAM in bytes."""

    compute: UsagePercentiles
    vram: UsagePercentiles


def usage_query(dialect: Dialect, window_s: int, percentiles: PercentileSet) -> str:
    """The SQL of one round for workloads sharing `window_s` and `percentiles`: columns
    `namespace, workload, samples, c0..c2` (TFLOPS) and `v0..v2` (bytes)."""
    # Only rows whose usage the provider attributed to the worker: a provider that cannot
    # (NVML today) writes zeros, which must never read as "uses nothing".
    where = f"usage_known = 1 AND {wall_conditions(dialect, f'{window_s}s', window_s * 1000)}"
    if dialect is Dialect.GREPTIME:
        columns = [f"approx_percentile_cont(compute_tflops, {p!r}) AS c{i}"
                   for i, p in enumerate(percentiles.compute)]  # fmt: skip
        columns += [f"approx_percentile_cont(memory_bytes, {p!r}) AS v{i}"
                    for i, p in enumerate(percentiles.vram)]  # fmt: skip
        return (
            "SELECT namespace, workload, count(*) AS samples, " + ", ".join(columns)
            + f" FROM tf_worker_usage WHERE {where} GROUP BY namespace, workload"
            + f" LIMIT {MAX_WORKLOAD_ROWS}"
        )  # fmt: skip
    # DuckDB: one quantile_cont per column over a list of fractions sorts each group once.
    compute = ", ".join(repr(p) for p in percentiles.compute)
    vram = ", ".join(repr(p) for p in percentiles.vram)
    picked = ", ".join([f"c[{i + 1}] AS c{i}" for i in range(3)]
                       + [f"v[{i + 1}] AS v{i}" for i in range(3)])  # fmt: skip
    return (
        f"SELECT namespace, workload, samples, {picked} FROM (SELECT namespace, workload, "
        f"count(*) AS samples, quantile_cont(compute_tflops, [{compute}]) AS c, "
        f"quantile_cont(memory_bytes, [{vram}]) AS v FROM tf_worker_usage WHERE {where} "
        f"GROUP BY namespace, workload) LIMIT {MAX_WORKLOAD_ROWS}"
    )


def _number(value: Any) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return 0.0
    return number if math.isfinite(number) and number > 0 else 0.0


def parse_usage(rows: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str], WorkloadUsage]:
    """The answer by (namespace, workload); a row with a bad value counts that value as 0."""
    found: dict[tuple[str, str], WorkloadUsage] = {}
    for row in rows:
        key = (str(row.get("namespace") or ""), str(row.get("workload") or ""))
        samples = int(_number(row.get("samples")))
        c = [_number(row.get(f"c{i}")) * 1000 for i in range(3)]  # TFLOPS -> milli
        v = [_number(row.get(f"v{i}")) for i in range(3)]
        found[key] = WorkloadUsage(UsagePercentiles(samples, c[0], c[1], c[2]),
                                   UsagePercentiles(samples, v[0], v[1], v[2]))  # fmt: skip
    return found
