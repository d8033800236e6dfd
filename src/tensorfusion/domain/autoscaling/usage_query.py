"""The autoscaler's queries of `tf_worker_usage` (docs/autoscaling.md), in both dialects.

- `fill_query`: one slice of the history window, aggregated per workload, resource and
  log bucket (`usage_histogram`): what a new leader fills its histograms from.
- `recent_query`: the rows written after the cut, one per sample: what each round adds.

Only rows with `usage_known = 1` count. The GreptimeDB forms of `fill_query` and
`recent_query` are written to its documented SQL (DataFusion) and have not been run against it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from tensorfusion.domain.autoscaling.recommendation import UsagePercentiles
from tensorfusion.domain.autoscaling.settings import AutoSetSettings
from tensorfusion.domain.autoscaling.usage_histogram import (
    LOG_GROWTH,
    TFLOPS_SCALE,
    VRAM_SCALE,
)
from tensorfusion.domain.metrics.conditions import Dialect
from tensorfusion.domain.timestamps import format_sql_timestamp

__all__ = [
    "FILL_COLUMNS",
    "MAX_FILL_ROWS",
    "MAX_NAMED_WORKLOADS",
    "MAX_RECENT_ROWS",
    "RECENT_COLUMNS",
    "PercentileSet",
    "WorkloadUsage",
    "fill_query",
    "percentile_set",
    "recent_query",
]

MAX_RECENT_ROWS: Final = 250_000
"""Rows of `recent_query` read at most; more means the history is filled again."""
MAX_FILL_ROWS: Final = 1_000_000
"""Rows of one `fill_query` read at most; more fails the fill."""
MAX_NAMED_WORKLOADS: Final = 200
"""A fill for more workloads than this reads every workload's rows (and keeps the ones asked)."""
RECENT_COLUMNS: Final = ("namespace", "workload", "worker", "uuid", "ts_ms", "compute_tflops",
                         "memory_bytes")  # fmt: skip
FILL_COLUMNS: Final = ("namespace", "workload", "resource", "bucket", "samples", "low", "high")
_NAME: Final = re.compile(r"[A-Za-z0-9._-]{1,253}")


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


def percentile_set(settings: AutoSetSettings) -> PercentileSet:
    """The lower, target and upper percentiles `settings` ask, per resource."""
    s = settings
    return PercentileSet(
        (s.lower_bound_compute_percentile, s.target_compute_percentile,
         s.upper_bound_compute_percentile),
        (s.lower_bound_vram_percentile, s.target_vram_percentile,
         s.upper_bound_vram_percentile),
    )  # fmt: skip


def _double(value: float) -> str:
    """A DOUBLE literal both dialects read back as exactly `value`."""
    return f"{value:.17e}"


def _time(ms: int) -> str:
    return f"TIMESTAMP '{format_sql_timestamp(ms)}'"


def _bucket(value: str, floor: float) -> str:
    """`BucketScale.index` in SQL (the same floating-point steps)."""
    return (f"CASE WHEN {value} < {_double(floor)} THEN 0 ELSE 1 + CAST(floor(ln({value} / "
            f"{_double(floor)}) / {_double(LOG_GROWTH)}) AS BIGINT) END")  # fmt: skip


def _names(keys: Sequence[tuple[str, str]] | None) -> str:
    """`AND (...)` keeping the rows of `keys`; empty for all rows (`keys` None, too many, or a
    name that is not a Kubernetes name, which is never quoted into SQL)."""
    if keys is None or len(keys) > MAX_NAMED_WORKLOADS:
        return ""
    if not all(_NAME.fullmatch(part) for key in keys for part in key):
        return ""
    by_namespace: dict[str, list[str]] = {}
    for namespace, workload in keys:
        by_namespace.setdefault(namespace, []).append(workload)
    terms = [f"(namespace = '{namespace}' AND workload IN ("
             + ", ".join(f"'{name}'" for name in sorted(names)) + "))"
             for namespace, names in sorted(by_namespace.items())]  # fmt: skip
    return f" AND ({' OR '.join(terms)})" if terms else ""


def fill_query(
    dialect: Dialect,
    *,
    start_ms: int,
    end_ms: int,
    cut_ms: int,
    keys: Sequence[tuple[str, str]] | None = None,
) -> str:
    """One slice of a fill: the rows with `start_ms <= ts < end_ms` and `ts <= cut_ms`, counted
    per workload, resource (0 TFLOPS, 1 VRAM bytes) and bucket, with each bucket's smallest and
    largest value, in that order: columns `FILL_COLUMNS`. `keys` restricts it to those
    workloads."""
    del dialect  # the same text in both: TIMESTAMP literals, ln, floor, CASE, UNION ALL
    where = (f"usage_known = 1 AND ts >= {_time(start_ms)} AND ts < {_time(end_ms)} "
             f"AND ts <= {_time(cut_ms)}{_names(keys)}")  # fmt: skip
    compute, vram = "compute_tflops", "CAST(memory_bytes AS DOUBLE)"
    return (
        "SELECT namespace, workload, resource, bucket, count(*) AS samples, min(v) AS low, "
        "max(v) AS high FROM ("
        f"SELECT namespace, workload, 0 AS resource, {_bucket(compute, TFLOPS_SCALE.floor)}"
        f" AS bucket, {compute} AS v FROM tf_worker_usage WHERE {where}"
        f" AND compute_tflops >= 0 AND compute_tflops < {_double(1e300)}"
        f" UNION ALL SELECT namespace, workload, 1 AS resource, {_bucket(vram, VRAM_SCALE.floor)}"
        f" AS bucket, {vram} AS v FROM tf_worker_usage WHERE {where} AND memory_bytes >= 0"
        f") AS t GROUP BY namespace, workload, resource, bucket"
        f" ORDER BY namespace, workload, resource, bucket LIMIT {MAX_FILL_ROWS + 1}"
    )


def recent_query(dialect: Dialect, cut_ms: int) -> str:
    """The rows written with `ts > cut_ms`, one per sample: columns `RECENT_COLUMNS` (`ts_ms`
    in milliseconds since the epoch)."""
    # GreptimeDB's ts is TIMESTAMP(9): cast to BIGINT it is in nanoseconds.
    ms = "CAST(ts AS BIGINT) / 1000000" if dialect is Dialect.GREPTIME else "epoch_ms(ts)"
    return (
        f"SELECT namespace, workload, worker, uuid, {ms} AS ts_ms, compute_tflops, memory_bytes"
        f" FROM tf_worker_usage WHERE usage_known = 1 AND ts > {_time(cut_ms)}"
        f" LIMIT {MAX_RECENT_ROWS + 1}"
    )
