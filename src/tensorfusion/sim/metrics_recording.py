"""Each simulated interval: the controller-side recorders plus simulated usage into DuckDB.

The recorders are the controller's own (`domain.metrics.recorders`); this module only turns
the virtual cluster into their inputs and invents plausible usage for simulated GPUs and
workers (a deterministic function of the pod and the time, so runs are reproducible).
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field

from tensorfusion.domain.cluster_metrics import gpu_figures, node_and_pool_figures, worker_figures
from tensorfusion.domain.metrics.recorders import (
    ClusterSnapshot,
    GPUUsageSample,
    PoolCounters,
    RowSink,
    WorkerFigures,
    WorkerUsageSample,
    snapshot_rows,
)
from tensorfusion.domain.metrics.rows import MetricRow
from tensorfusion.sim.engine import PodOutcome, SimPod
from tensorfusion.sim.virtual_cluster import VirtualCluster

__all__ = ["SIM_EPOCH_MS", "MetricsRecorder"]

SIM_EPOCH_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z: simulated time 0.
IDLE_TEMPERATURE = 35.0


def _wave(key: str, t: float) -> float:
    """A reproducible 0..1 load level of a pod at time t (seconds)."""
    phase = zlib.crc32(key.encode()) % 600
    return ((int(t) + phase) % 600) / 600


@dataclass(slots=True)
class MetricsRecorder:
    """Writes the tf_* rows of each interval into a row sink (the simulator's DuckDB store),
    in batches: one insert per table per batch instead of per interval."""

    sink: RowSink
    batch_rows: int = 50_000
    rows_written: int = 0
    _pending: list[MetricRow] = field(default_factory=list)

    def record(self, t: float, cluster: VirtualCluster, pods: Sequence[SimPod]) -> None:
        """Record the cluster at simulated time `t` (seconds)."""
        snapshot = build_snapshot(t, cluster, pods)
        self._pending.extend(snapshot_rows(snapshot, SIM_EPOCH_MS + int(t * 1000)))
        if len(self._pending) >= self.batch_rows:
            self.flush()

    def flush(self) -> None:
        """Write what is pending."""
        if self._pending:
            self.rows_written += self.sink.insert_rows(self._pending)
            self._pending = []


def build_snapshot(t: float, cluster: VirtualCluster, pods: Sequence[SimPod]) -> ClusterSnapshot:
    """The recorders' view of the virtual cluster, with simulated usage."""
    allocator = cluster.allocator
    gpus = gpu_figures(allocator)
    nodes, pools = node_and_pool_figures(allocator)
    workers: list[WorkerFigures] = []
    worker_usage: list[WorkerUsageSample] = []
    used_percent: dict[str, float] = {}
    used_memory: dict[str, int] = {}
    per_pool_workers: dict[str, int] = {}
    for pod in pods:
        request = pod.request
        if pod.outcome is not PodOutcome.RUNNING or request is None or pod.node is None:
            continue
        per_pool_workers[request.pool] = per_pool_workers.get(request.pool, 0) + 1
        members = [allocator.gpus[name] for name in pod.gpus if name in allocator.gpus]
        workers.append(
            worker_figures(allocator, allocator.records[pod.uid], ready=True, workload=pod.entry)
        )
        load = _wave(pod.key, t)
        for gpu in members:
            share = request.request.tflops_on(gpu.capacity_tflops) / gpu.capacity_tflops
            percent = min(100.0, 100 * share * (0.3 + 0.7 * load))
            memory = int(
                (request.request.vram_bytes or gpu.capacity_vram // 8) * (0.5 + 0.5 * load)
            )
            used_percent[gpu.name] = min(100.0, used_percent.get(gpu.name, 0.0) + percent)
            used_memory[gpu.name] = used_memory.get(gpu.name, 0) + memory
            worker_usage.append(
                WorkerUsageSample(
                    worker=pod.name, namespace=pod.namespace, pool=request.pool, node=pod.node,
                    uuid=gpu.uuid, workload=request.workload or pod.entry,
                    compute_percentage=percent, capacity_tflops=gpu.capacity_tflops / 1000,
                    memory_bytes=memory,
                    memory_limit_bytes=request.limit.vram_bytes or request.request.vram_bytes,
                )
            )  # fmt: skip
    gpu_usage = [
        GPUUsageSample(
            node=g.node, pool=g.pool, uuid=g.uuid,
            compute_percentage=used_percent.get(g.name, 0.0),
            capacity_tflops=g.capacity_tflops / 1000,
            memory_bytes=min(used_memory.get(g.name, 0), g.capacity_vram),
            memory_total_bytes=g.capacity_vram,
            temperature=IDLE_TEMPERATURE + 0.45 * used_percent.get(g.name, 0.0),
            power_usage=60 + 3 * used_percent.get(g.name, 0.0),
        )
        for g in allocator.gpus.values()
    ]  # fmt: skip
    counters = [
        PoolCounters(pool=p.name, workers=per_pool_workers.get(p.name, 0),
                     nodes=sum(1 for n in nodes if n.pool == p.name))
        for p in pools
    ]  # fmt: skip
    return ClusterSnapshot(
        gpus=gpus, nodes=nodes, pools=pools, workers=workers, counters=counters,
        gpu_usage=gpu_usage, worker_usage=worker_usage,
    )  # fmt: skip
