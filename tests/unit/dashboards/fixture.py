"""The rows every dashboard query is tested on, made by the project's recorders.

Two pools: `pool-a` (node-1 with gpu-1a and gpu-1b, node-2 with gpu-2a, 100 TFLOPS and 80 GB
each, oversold 2x) and `pool-b` (node-3 with gpu-3a, 30 TFLOPS and 24 GB, no oversubscription).
Workers: `w-train` (team-a/train, both GPUs of node-1), `w-dev` (team-a/dev, gpu-1a, so gpu-1a's
limits exceed its capacity) and `w-infer` (team-b/infer, nearly all of gpu-2a). node-3 runs
nothing; gpu-1b runs hot and full; gpu-3a idles.

Three recording cycles fall in the dashboard's range (T0, T0+60 s, T0+120 s). One cycle an
hour before and one ten minutes after the range carry other figures (gpu counts of 7, a 99 °C
gpu-2a, a throttle counter of 1000, 50 allocation failures in pool-b, nothing allocated): a
query that leaks outside the range, or takes a cycle other than the newest in range as "now",
returns other rows.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any, Final

from tensorfusion.domain.metrics.recorders import (
    ClusterSnapshot,
    GPUFigures,
    GPUUsageSample,
    NodeFigures,
    PoolCounters,
    PoolFigures,
    WorkerFigures,
    WorkerUsageSample,
    snapshot_rows,
)
from tensorfusion.domain.metrics.rows import MetricRow

from .grafana_sql import TimeRange

__all__ = ["ALL", "CYCLES_MS", "GB", "OUTSIDE_MS", "T0_MS", "TIME_RANGE", "all_rows", "normalize"]

T0_MS: Final = 1_767_225_600_000  # 2026-01-01 00:00:00 UTC
CYCLES_MS: Final = (T0_MS, T0_MS + 60_000, T0_MS + 120_000)
OUTSIDE_MS: Final = (T0_MS - 3_600_000, T0_MS + 600_000)
ALL: Final = {
    "pool": ("pool-a", "pool-b"),
    "node": ("node-1", "node-2", "node-3"),
    "namespace": ("team-a", "team-b"),
    "workload": ("dev", "infer", "train"),
}
"""Every variable at All (Grafana sends all of its values)."""
TIME_RANGE: Final = TimeRange(T0_MS // 1000 - 600, T0_MS // 1000 + 180, ALL)

GB: Final = 1_000_000_000
_H100: Final = 100_000  # milli-TFLOPs
_L4: Final = 30_000


def _gpus() -> list[GPUFigures]:
    def gpu(name: str, node: str, pool: str, model: str, tflops: int, vram: int,
            requested_tflops: int, requested_vram: int) -> GPUFigures:  # fmt: skip
        return GPUFigures(name, node, pool, model, "Running", tflops, vram,
                          tflops - requested_tflops, vram - requested_vram)  # fmt: skip

    return [
        gpu("gpu-1a", "node-1", "pool-a", "H100", _H100, 80 * GB, 50_000, 24 * GB),
        gpu("gpu-1b", "node-1", "pool-a", "H100", _H100, 80 * GB, 40_000, 20 * GB),
        gpu("gpu-2a", "node-2", "pool-a", "H100", _H100, 80 * GB, 96_000, 75 * GB),
        gpu("gpu-3a", "node-3", "pool-b", "L4", _L4, 24 * GB, 0, 0),
    ]


def _nodes() -> list[NodeFigures]:
    # node-1: requests 90 TFLOPS / 44 GB, limits 220 / 88 GB; node-2: 96 / 75 GB, 100 / 78 GB.
    return [
        NodeFigures("node-1", "pool-a", "Running", 2, 2 * _H100, 110_000, 160 * GB, 116 * GB,
                    4 * _H100, 180_000, 320 * GB, 232 * GB, raw_cost=2.5),
        NodeFigures("node-2", "pool-a", "Running", 1, _H100, 4_000, 80 * GB, 5 * GB,
                    2 * _H100, 100_000, 160 * GB, 82 * GB, raw_cost=1.25),
        NodeFigures("node-3", "pool-b", "Running", 1, _L4, _L4, 24 * GB, 24 * GB,
                    _L4, _L4, 24 * GB, 24 * GB, raw_cost=0.5),
    ]  # fmt: skip


def _pools() -> list[PoolFigures]:
    return [
        PoolFigures("pool-a", "Running", 3, 3 * _H100, 114_000, 240 * GB, 121 * GB,
                    6 * _H100, 280_000, 480 * GB, 314 * GB),
        PoolFigures("pool-b", "Running", 1, _L4, _L4, 24 * GB, 24 * GB,
                    _L4, _L4, 24 * GB, 24 * GB),
    ]  # fmt: skip


def _workers(cycle: int) -> list[WorkerFigures]:
    return [
        WorkerFigures("w-train", "team-a", "pool-a", "node-1", "uid-train", "train", "high", 2,
                      40.0, 80.0, 20.0 * GB, 40.0 * GB, ready=cycle > 0,
                      gpus=(("gpu-1a", "H100", 0), ("gpu-1b", "H100", 1))),
        WorkerFigures("w-dev", "team-a", "pool-a", "node-1", "uid-dev", "dev", "low", 1,
                      10.0, 60.0, 4.0 * GB, 8.0 * GB, ready=True, gpus=(("gpu-1a", "H100", 0),)),
        WorkerFigures("w-infer", "team-b", "pool-a", "node-2", "uid-infer", "infer", "medium", 1,
                      96.0, 100.0, 75.0 * GB, 78.0 * GB, ready=True,
                      gpus=(("gpu-2a", "H100", 0),)),
    ]  # fmt: skip


def _counters(cycle: int) -> list[PoolCounters]:
    return [
        PoolCounters("pool-a", workers=3, nodes=2, allocation_success=10 + cycle,
                     allocation_fail=(2, 2, 5)[cycle]),
        PoolCounters("pool-b", workers=0, nodes=1),
    ]  # fmt: skip


def _gpu_usage(cycle: int) -> list[GPUUsageSample]:
    def sample(uuid: str, node: str, pool: str, compute: float, tflops: float, memory: int,
               total: int, temperature: float, power: float) -> GPUUsageSample:  # fmt: skip
        return GPUUsageSample(node, pool, uuid, compute, tflops, memory, total, temperature,
                              power_usage=power)  # fmt: skip

    return [
        sample("GPU-1A", "node-1", "pool-a", 60.0 + 10 * cycle, 100.0, 40 * GB, 80 * GB,
               70.0 + cycle, 300.0),
        sample("GPU-1B", "node-1", "pool-a", (98.0, 99.0, 99.5)[cycle], 100.0, 79 * GB, 80 * GB,
               92.0 + cycle, 650.0),
        sample("gpu-2a", "node-2", "pool-a", 30.0, 100.0, 20 * GB, 80 * GB, 65.0, 200.0),
        sample("gpu-3a", "node-3", "pool-b", 0.5, 30.0, 240_000_000, 24 * GB, 40.0, 30.0),
    ]  # fmt: skip


def _worker_usage(cycle: int) -> list[WorkerUsageSample]:
    def sample(worker: str, namespace: str, workload: str, node: str, uuid: str,
               compute: float, memory: int, limit: int, throttled: int = 0,
               switched: int = 0) -> WorkerUsageSample:  # fmt: skip
        return WorkerUsageSample(
            worker, namespace, "pool-a", node, uuid, workload, compute, 100.0, memory, limit,
            compute_throttled_cnt=throttled, vram_freezed_cnt=switched, vram_resumed_cnt=switched,
            usage_known=True,
        )  # fmt: skip

    return [
        sample("w-train", "team-a", "train", "node-1", "gpu-1a", 30.0 + 5 * cycle, 18 * GB,
               40 * GB),
        sample("w-train", "team-a", "train", "node-1", "gpu-1b", 78.0 + cycle,
               (18 + cycle) * GB, 40 * GB, throttled=(10, 15, 25)[cycle]),
        sample("w-dev", "team-a", "dev", "node-1", "gpu-1a", 5.0, 2 * GB, 8 * GB,
               switched=(1, 1, 3)[cycle]),
        sample("w-infer", "team-b", "infer", "node-2", "gpu-2a", 30.0, 20 * GB, 78 * GB),
    ]  # fmt: skip


def _snapshot(cycle: int) -> ClusterSnapshot:
    return ClusterSnapshot(
        gpus=_gpus(),
        nodes=_nodes(),
        pools=_pools(),
        workers=_workers(cycle),
        counters=_counters(cycle),
        gpu_usage=_gpu_usage(cycle),
        worker_usage=_worker_usage(cycle),
    )


def _outside() -> ClusterSnapshot:
    """What a cycle outside the range holds: other figures everywhere a query could see."""
    inside = _snapshot(2)
    return dataclasses.replace(
        inside,
        gpus=[
            dataclasses.replace(
                g, available_tflops_milli=g.capacity_tflops_milli, available_vram=g.capacity_vram
            )
            for g in inside.gpus
        ],
        nodes=[
            dataclasses.replace(n, gpu_count=7, available_tflops_milli=n.total_tflops_milli)
            for n in inside.nodes
        ],
        pools=[dataclasses.replace(p, gpu_count=7) for p in inside.pools],
        workers=[dataclasses.replace(w, tflops_limit=1.0) for w in inside.workers],
        counters=[dataclasses.replace(c, workers=9, allocation_fail=50) for c in inside.counters],
        gpu_usage=[
            dataclasses.replace(s, temperature=99.0, compute_percentage=100.0)
            for s in inside.gpu_usage
        ],
        worker_usage=[
            dataclasses.replace(s, compute_throttled_cnt=1000) for s in inside.worker_usage
        ],
    )


def all_rows() -> list[MetricRow]:
    """Every row of the fixture: three cycles in the range, two outside."""
    rows: list[MetricRow] = []
    for cycle, ts_ms in enumerate(CYCLES_MS):
        rows += snapshot_rows(_snapshot(cycle), ts_ms)
    for ts_ms in OUTSIDE_MS:
        rows += snapshot_rows(_outside(), ts_ms)
    return rows


def _value(value: Any) -> Any:
    if isinstance(value, datetime):
        moment = value if value.tzinfo else value.replace(tzinfo=UTC)
        return round(moment.timestamp() * 1000)
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, int | float | Decimal):
        number = float(value)
        return round(number, 3) if math.isfinite(number) else number
    return value


def normalize(rows: Iterable[Sequence[Any]]) -> list[tuple[Any, ...]]:
    """Rows in a form both stores agree on: times as Unix ms, numbers as floats rounded to
    3 decimals (MariaDB answers sums of BIGINT as DECIMAL, DuckDB as HUGEINT), NULL as None."""
    return [tuple(_value(value) for value in row) for row in rows]
