"""The controller-side `tf_*` figures of GPUs, nodes, pools and workers, read from the
allocator's memory (metrics.md): one implementation for the controller's recorder and the
simulator's."""

from __future__ import annotations

from collections.abc import Mapping

from tensorfusion.domain.allocator.allocator import Allocator
from tensorfusion.domain.allocator.capacity_figures import (
    CapacityTotals,
    node_capacity,
    pool_capacities,
)
from tensorfusion.domain.allocator.records import AllocationRecord
from tensorfusion.domain.metrics.recorders import (
    GPUFigures,
    NodeFigures,
    PoolFigures,
    WorkerFigures,
)

__all__ = ["gpu_figures", "node_and_pool_figures", "worker_figures"]


def gpu_figures(allocator: Allocator) -> list[GPUFigures]:
    """One `tf_gpu_metrics` row's figures per GPU the allocator knows."""
    return [
        GPUFigures(
            name=g.name, node=g.node, pool=g.pool, model=g.model, phase=g.phase.value,
            capacity_tflops_milli=g.capacity_tflops, capacity_vram=g.capacity_vram,
            available_tflops_milli=g.available_tflops, available_vram=g.available_vram,
        )
        for g in allocator.gpus.values()
    ]  # fmt: skip


def node_and_pool_figures(
    allocator: Allocator, phases: Mapping[str, str] | None = None
) -> tuple[list[NodeFigures], list[PoolFigures]]:
    """`tf_node_metrics` and `tf_pool_metrics` figures; `phases` of GPUNodes and GPUPools by
    name (default Running)."""
    phases = phases or {}
    capacities = [node_capacity(allocator, n) for n in allocator.nodes.values() if n.gpus]
    nodes = [
        NodeFigures(
            name=node.name, pool=node.pool, phase=phases.get(node.name, "Running"),
            gpu_count=len(node.gpus), **_figures(node.totals),
        )
        for node in capacities
    ]  # fmt: skip
    pools = [
        PoolFigures(
            name=name, phase=phases.get(name, "Running"), gpu_count=pool.gpus,
            **_figures(pool.totals),
        )
        for name, pool in pool_capacities(allocator, capacities).items()
    ]  # fmt: skip
    return nodes, pools


def _figures(totals: CapacityTotals) -> dict[str, int]:
    return {
        "total_tflops_milli": totals.total_tflops,
        "available_tflops_milli": totals.available_tflops,
        "total_vram": totals.total_vram,
        "available_vram": totals.available_vram,
        "virtual_tflops_milli": totals.virtual_tflops,
        "virtual_available_tflops_milli": totals.virtual_available_tflops,
        "virtual_vram": totals.virtual_vram,
        "virtual_available_vram": totals.virtual_available_vram,
    }


def worker_figures(
    allocator: Allocator, record: AllocationRecord, *, ready: bool, workload: str = ""
) -> WorkerFigures:
    """`tf_worker_metrics` figures of one allocation (`workload` when the pod has none)."""
    request = record.request
    members = [allocator.gpus[name] for name in record.gpus if name in allocator.gpus]
    capacity = members[0].capacity_tflops if members else 0
    return WorkerFigures(
        pod=request.pod_name, namespace=request.namespace, pool=request.pool, node=record.node,
        pod_uid=request.pod_uid, workload=request.workload or workload, qos=request.qos.value,
        gpu_count=request.count,
        tflops_request=request.request.tflops_on(capacity) / 1000,
        tflops_limit=request.limit.tflops_on(capacity) / 1000,
        vram_request=float(request.request.vram_bytes),
        vram_limit=float(request.limit.vram_bytes or request.request.vram_bytes),
        ready=ready,
        gpus=tuple((g.name, g.model, g.index) for g in members),
        gpu_ids_annotation=",".join(record.gpus),
    )  # fmt: skip
