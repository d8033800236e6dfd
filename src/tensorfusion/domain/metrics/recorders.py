"""Controller-side recorders (metrics.md §3.3-§3.8) and usage rows, as pure functions.

The caller (controller leader, simulator) builds a `ClusterSnapshot` from the allocator each
recording cycle; `snapshot_rows` turns it into the rows of one cycle, all sharing the cycle's
timestamp, and `record_interval` hands them to a store. Units follow the allocator: TFLOPs in
milli-TFLOPs, VRAM in bytes; rows carry TFLOPs and percentages (0-100) as floats.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from tensorfusion.domain.metrics.rows import MetricRow

__all__ = [
    "ClusterSnapshot",
    "GPUFigures",
    "GPUUsageSample",
    "NodeFigures",
    "PoolCounters",
    "PoolFigures",
    "RowSink",
    "WorkerFigures",
    "WorkerUsageSample",
    "record_interval",
    "snapshot_rows",
]


def _percent(part: float, whole: float) -> float:
    return part / whole * 100.0 if whole > 0 else 0.0


def _tflops(milli: int) -> float:
    return milli / 1000.0


@dataclass(frozen=True, slots=True)
class GPUFigures:
    """One GPU object (tf_gpu_metrics): capacity as reported, available as the allocator holds."""

    name: str
    node: str
    pool: str
    model: str
    phase: str
    capacity_tflops_milli: int
    capacity_vram: int
    available_tflops_milli: int
    available_vram: int


@dataclass(frozen=True, slots=True)
class NodeFigures:
    """One GPUNode (tf_node_metrics); the virtual figures include oversubscription."""

    name: str
    pool: str
    phase: str
    gpu_count: int
    total_tflops_milli: int
    available_tflops_milli: int
    total_vram: int
    available_vram: int
    virtual_tflops_milli: int
    virtual_available_tflops_milli: int
    virtual_vram: int
    virtual_available_vram: int
    raw_cost: float = 0.0


@dataclass(frozen=True, slots=True)
class PoolFigures:
    """One GPUPool (tf_pool_metrics), figures summed over the pool."""

    name: str
    phase: str
    gpu_count: int
    total_tflops_milli: int
    available_tflops_milli: int
    total_vram: int
    available_vram: int
    virtual_tflops_milli: int
    virtual_available_tflops_milli: int
    virtual_vram: int
    virtual_available_vram: int


@dataclass(frozen=True, slots=True)
class WorkerFigures:
    """One worker pod holding GPUs (tf_worker_resources, tf_gpu_allocation).

    `tflops_*` and `vram_*` are per GPU (TFLOPs, bytes). `gpus` are (GPU name, model, index)
    of the allocated GPUs; `extra_tags` are the metricsExtraPodLabels tags already resolved.
    """

    pod: str
    namespace: str
    pool: str
    node: str
    pod_uid: str
    workload: str
    qos: str
    gpu_count: int
    tflops_request: float
    tflops_limit: float
    vram_request: float
    vram_limit: float
    ready: bool
    gpus: tuple[tuple[str, str, int | None], ...] = ()
    gpu_ids_annotation: str = ""
    raw_cost: float = 0.0
    extra_tags: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class PoolCounters:
    """tf_system_metrics of one pool: gauges and cumulative counters (never reset)."""

    pool: str
    workers: int
    nodes: int
    allocation_success: int = 0
    allocation_fail: int = 0
    topo_satisfied: int = 0
    topo_unsatisfied: int = 0
    topo_fallback: int = 0
    topo_search_degraded: int = 0
    scale_up: int = 0
    scale_down: int = 0


@dataclass(frozen=True, slots=True)
class GPUUsageSample:
    """One tf_gpu_usage sample (node agent, or the simulated provider)."""

    node: str
    pool: str
    uuid: str
    compute_percentage: float
    capacity_tflops: float
    memory_bytes: int
    memory_total_bytes: int
    temperature: float
    power_usage: float = 0.0
    rx: float = 0.0
    tx: float = 0.0
    graphics_clock_mhz: float = 0.0
    sm_clock_mhz: float = 0.0
    memory_clock_mhz: float = 0.0
    video_clock_mhz: float = 0.0
    nvlink_rx: float = 0.0
    nvlink_tx: float = 0.0
    mps_daemon_up: bool = False
    """The node's MPS control daemon serves this GPU (isolation enforced)."""
    mps_daemon_restarts: int = 0


@dataclass(frozen=True, slots=True)
class WorkerUsageSample:
    """One tf_worker_usage sample: a worker on one allocated GPU (written even when idle)."""

    worker: str
    namespace: str
    pool: str
    node: str
    uuid: str
    workload: str
    compute_percentage: float
    capacity_tflops: float
    memory_bytes: int
    memory_limit_bytes: int
    compute_throttled_cnt: int = 0
    vram_freezed_cnt: int = 0
    vram_resumed_cnt: int = 0
    enforced_vram_limit_bytes: int = 0
    """The device-memory limit MPS holds the worker to on this GPU; 0: none."""
    enforced_compute_percent: float = 0.0
    """The share of the GPU's SMs MPS holds the worker to; 0: none."""
    usage_known: bool = False
    """The provider attributed this worker's usage (its share and VRAM are measured, not 0 for
    want of a figure): the autoscaler reads only such rows."""
    extra_tags: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ClusterSnapshot:
    """What one recording cycle sees."""

    gpus: Sequence[GPUFigures] = ()
    nodes: Sequence[NodeFigures] = ()
    pools: Sequence[PoolFigures] = ()
    workers: Sequence[WorkerFigures] = ()
    counters: Sequence[PoolCounters] = ()
    gpu_usage: Sequence[GPUUsageSample] = ()
    worker_usage: Sequence[WorkerUsageSample] = ()


def _allocation_fields(
    total_tflops: int,
    available_tflops: int,
    total_vram: int,
    available_vram: int,
    virtual_tflops: int,
    virtual_vram: int,
) -> dict[str, float]:
    allocated_tflops = total_tflops - available_tflops
    allocated_vram = total_vram - available_vram
    return {
        "allocated_tflops": _tflops(allocated_tflops),
        "allocated_tflops_percent": _percent(allocated_tflops, total_tflops),
        "allocated_tflops_percent_virtual": _percent(allocated_tflops, virtual_tflops),
        "allocated_vram_bytes": float(allocated_vram),
        "allocated_vram_percent": _percent(allocated_vram, total_vram),
        "allocated_vram_percent_virtual": _percent(allocated_vram, virtual_vram),
    }


def _with_extra(tags: dict[str, str], extra: Mapping[str, str]) -> dict[str, str]:
    for key, value in extra.items():
        if key not in tags:  # a built-in tag wins (metrics.md §1)
            tags[key] = value
    return tags


def gpu_metrics_rows(gpus: Sequence[GPUFigures], ts_ms: int) -> list[MetricRow]:
    """tf_gpu_metrics, one row per GPU object."""
    rows: list[MetricRow] = []
    for gpu in gpus:
        allocated_tflops = gpu.capacity_tflops_milli - gpu.available_tflops_milli
        allocated_vram = gpu.capacity_vram - gpu.available_vram
        rows.append(
            MetricRow(
                "tf_gpu_metrics",
                ts_ms,
                {
                    "gpu": gpu.name,
                    "node": gpu.node,
                    "pool": gpu.pool,
                    "gpu_model": gpu.model,
                    "phase": gpu.phase,
                },
                {
                    "capacity_tflops": _tflops(gpu.capacity_tflops_milli),
                    "available_tflops": _tflops(gpu.available_tflops_milli),
                    "allocated_tflops": _tflops(allocated_tflops),
                    "allocated_tflops_percent": _percent(
                        allocated_tflops, gpu.capacity_tflops_milli
                    ),
                    "capacity_vram_bytes": float(gpu.capacity_vram),
                    "available_vram_bytes": float(gpu.available_vram),
                    "allocated_vram_bytes": float(allocated_vram),
                    "allocated_vram_percent": _percent(allocated_vram, gpu.capacity_vram),
                },
            )
        )
    return rows


def node_metrics_rows(nodes: Sequence[NodeFigures], ts_ms: int) -> list[MetricRow]:
    """tf_node_metrics, one row per GPUNode."""
    return [
        MetricRow(
            "tf_node_metrics",
            ts_ms,
            {"node": node.name, "pool": node.pool, "phase": node.phase},
            {
                **_allocation_fields(
                    node.total_tflops_milli,
                    node.available_tflops_milli,
                    node.total_vram,
                    node.available_vram,
                    node.virtual_tflops_milli,
                    node.virtual_vram,
                ),
                "raw_cost": node.raw_cost,
                "gpu_count": node.gpu_count,
            },
        )
        for node in nodes
    ]


def pool_metrics_rows(pools: Sequence[PoolFigures], ts_ms: int) -> list[MetricRow]:
    """tf_pool_metrics, one row per GPUPool."""
    rows: list[MetricRow] = []
    for pool in pools:
        limited_tflops = pool.virtual_tflops_milli - pool.virtual_available_tflops_milli
        limited_vram = pool.virtual_vram - pool.virtual_available_vram
        fields: dict[str, float | int] = {
            **_allocation_fields(
                pool.total_tflops_milli,
                pool.available_tflops_milli,
                pool.total_vram,
                pool.available_vram,
                pool.virtual_tflops_milli,
                pool.virtual_vram,
            ),
            "limited_tflops": _tflops(limited_tflops),
            "limited_vram_bytes": float(limited_vram),
            "limited_tflops_percent_virtual": _percent(limited_tflops, pool.virtual_tflops_milli),
            "limited_vram_percent_virtual": _percent(limited_vram, pool.virtual_vram),
            "gpu_count": pool.gpu_count,
        }
        rows.append(
            MetricRow("tf_pool_metrics", ts_ms, {"pool": pool.name, "phase": pool.phase}, fields)
        )
    return rows


def worker_resources_rows(workers: Sequence[WorkerFigures], ts_ms: int) -> list[MetricRow]:
    """tf_worker_resources, one row per worker pod."""
    return [
        MetricRow(
            "tf_worker_resources",
            ts_ms,
            _with_extra(
                {
                    "namespace": worker.namespace,
                    "pool": worker.pool,
                    "qos": worker.qos or "medium",
                    "worker": worker.pod,
                    "workload": worker.workload,
                },
                worker.extra_tags,
            ),
            {
                "gpu_count": worker.gpu_count if worker.gpu_count > 0 else 1,
                "tflops_request": float(worker.tflops_request),
                "tflops_limit": float(worker.tflops_limit),
                "vram_bytes_request": float(worker.vram_request),
                "vram_bytes_limit": float(worker.vram_limit),
                "raw_cost": float(worker.raw_cost),
                "ready": worker.ready,
            },
        )
        for worker in workers
    ]


def gpu_allocation_rows(workers: Sequence[WorkerFigures], ts_ms: int) -> list[MetricRow]:
    """tf_gpu_allocation, one row per worker pod holding GPUs."""
    rows: list[MetricRow] = []
    for worker in workers:
        if not worker.gpus:
            continue
        model_index = ",".join(
            f"{model}:{'' if index is None else index}" for _, model, index in worker.gpus
        )
        gpu_name = worker.gpu_ids_annotation or ",".join(name for name, _, _ in worker.gpus)
        tags = _with_extra(
            {
                "pod": worker.pod,
                "namespace": worker.namespace,
                "pod_uuid": worker.pod_uid,
                "node": worker.node,
                "gpu_model_index": model_index,
                "gpu_name": gpu_name,
            },
            worker.extra_tags,
        )
        rows.append(MetricRow("tf_gpu_allocation", ts_ms, tags, {"gpu_count": len(worker.gpus)}))
    return rows


def system_metrics_rows(counters: Sequence[PoolCounters], ts_ms: int) -> list[MetricRow]:
    """tf_system_metrics, one row per known pool."""
    return [
        MetricRow(
            "tf_system_metrics",
            ts_ms,
            {"pool": pool.pool},
            {
                "total_workers_cnt": pool.workers,
                "total_nodes_cnt": pool.nodes,
                "total_allocation_success_cnt": pool.allocation_success,
                "total_allocation_fail_cnt": pool.allocation_fail,
                "total_scale_up_cnt": pool.scale_up,
                "total_scale_down_cnt": pool.scale_down,
                "total_topo_satisfied_cnt": pool.topo_satisfied,
                "total_topo_unsatisfied_cnt": pool.topo_unsatisfied,
                "total_topo_fallback_cnt": pool.topo_fallback,
                "total_topo_search_degraded_cnt": pool.topo_search_degraded,
            },
        )
        for pool in counters
    ]


def gpu_usage_rows(samples: Sequence[GPUUsageSample], ts_ms: int) -> list[MetricRow]:
    """tf_gpu_usage, one row per GPU sample."""
    return [
        MetricRow(
            "tf_gpu_usage",
            ts_ms,
            {"node": s.node, "pool": s.pool, "uuid": s.uuid.lower()},
            {
                "compute_percentage": float(s.compute_percentage),
                "compute_tflops": s.compute_percentage / 100.0 * s.capacity_tflops,
                "memory_bytes": int(s.memory_bytes),
                "memory_percentage": _percent(s.memory_bytes, s.memory_total_bytes),
                "temperature": float(s.temperature),
                "power_usage": float(s.power_usage),
                "rx": float(s.rx),
                "tx": float(s.tx),
                "graphics_clock_mhz": float(s.graphics_clock_mhz),
                "sm_clock_mhz": float(s.sm_clock_mhz),
                "memory_clock_mhz": float(s.memory_clock_mhz),
                "video_clock_mhz": float(s.video_clock_mhz),
                "nvlink_rx": float(s.nvlink_rx),
                "nvlink_tx": float(s.nvlink_tx),
                "mps_daemon_up": int(s.mps_daemon_up),
                "mps_daemon_restarts": int(s.mps_daemon_restarts),
            },
        )
        for s in samples
    ]


def worker_usage_rows(samples: Sequence[WorkerUsageSample], ts_ms: int) -> list[MetricRow]:
    """tf_worker_usage, one row per (worker, allocated GPU)."""
    return [
        MetricRow(
            "tf_worker_usage",
            ts_ms,
            _with_extra(
                {
                    "workload": s.workload or "unknown",
                    "worker": s.worker,
                    "pod_name": s.worker,
                    "namespace": s.namespace,
                    "pool": s.pool,
                    "node": s.node,
                    "uuid": s.uuid.lower(),
                },
                s.extra_tags,
            ),
            {
                "compute_percentage": float(s.compute_percentage),
                "compute_tflops": s.compute_percentage / 100.0 * s.capacity_tflops,
                "memory_bytes": int(s.memory_bytes),
                "memory_percentage": _percent(s.memory_bytes, s.memory_limit_bytes),
                "compute_throttled_cnt": int(s.compute_throttled_cnt),
                "vram_freezed_cnt": int(s.vram_freezed_cnt),
                "vram_resumed_cnt": int(s.vram_resumed_cnt),
                "enforced_vram_limit_bytes": int(s.enforced_vram_limit_bytes),
                "enforced_compute_percent": float(s.enforced_compute_percent),
                "usage_known": int(s.usage_known),
            },
        )
        for s in samples
    ]


def snapshot_rows(snapshot: ClusterSnapshot, ts_ms: int) -> list[MetricRow]:
    """Every row of one recording cycle, all stamped `ts_ms`."""
    return [
        *gpu_allocation_rows(snapshot.workers, ts_ms),
        *gpu_metrics_rows(snapshot.gpus, ts_ms),
        *node_metrics_rows(snapshot.nodes, ts_ms),
        *pool_metrics_rows(snapshot.pools, ts_ms),
        *worker_resources_rows(snapshot.workers, ts_ms),
        *system_metrics_rows(snapshot.counters, ts_ms),
        *gpu_usage_rows(snapshot.gpu_usage, ts_ms),
        *worker_usage_rows(snapshot.worker_usage, ts_ms),
    ]


class RowSink(Protocol):
    """A synchronous store, e.g. `DuckDBMetricsStore`."""

    def insert_rows(self, rows: Sequence[MetricRow]) -> int:
        """Store rows; return how many."""


def record_interval(sink: RowSink, snapshot: ClusterSnapshot, now_ms: int) -> int:
    """Write one cycle's rows into `sink` (the simulator calls this every interval)."""
    return sink.insert_rows(snapshot_rows(snapshot, now_ms))
