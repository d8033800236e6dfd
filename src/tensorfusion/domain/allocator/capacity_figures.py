"""GPUNode and GPUPool capacity figures from the allocator's memory (api.md §2.2, §2.3).

Physical totals skip GPUs marked missing, `available` is request-based from the committed
allocations, and the virtual figures follow the pool's oversubscription (scheduling.md §6).
The controller writes them into GPUNode and GPUPool status; the metrics recorders and the
simulator's report read the same records.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from tensorfusion.domain.allocator.allocator import Allocator
from tensorfusion.domain.allocator.oversubscription import (
    OversubscriptionSettings,
    virtual_capacity,
)
from tensorfusion.domain.allocator.records import NodeState
from tensorfusion.domain.model.capacity import CapacityFigures
from tensorfusion.domain.model.node import PodGPUInfo
from tensorfusion.domain.quantities import format_bytes, format_milli

__all__ = [
    "CapacityTotals",
    "NodeCapacity",
    "PoolCapacityFigures",
    "node_capacity",
    "pool_capacities",
]


@dataclass(frozen=True, slots=True)
class CapacityTotals:
    """TFLOPs (milli) and VRAM (bytes): physical, request-based available, and virtual."""

    total_tflops: int = 0
    total_vram: int = 0
    available_tflops: int = 0
    available_vram: int = 0
    virtual_tflops: int = 0
    virtual_vram: int = 0
    virtual_available_tflops: int = 0
    virtual_available_vram: int = 0

    def __add__(self, other: CapacityTotals) -> CapacityTotals:
        return CapacityTotals(
            *(getattr(self, name) + getattr(other, name) for name in self.__slots__)
        )

    def to_status(self) -> CapacityFigures:
        """The status fields (`totalTFlops` … `virtualAvailableVRAM`) as canonical quantities."""
        milli, size = format_milli, format_bytes
        return CapacityFigures.model_validate({
            "totalTFlops": milli(self.total_tflops),
            "totalVRAM": size(self.total_vram),
            "availableTFlops": milli(self.available_tflops),
            "availableVRAM": size(self.available_vram),
            "virtualTFlops": milli(self.virtual_tflops),
            "virtualVRAM": size(self.virtual_vram),
            "virtualAvailableTFlops": milli(self.virtual_available_tflops),
            "virtualAvailableVRAM": size(self.virtual_available_vram),
        })  # fmt: skip


@dataclass(frozen=True, slots=True)
class NodeCapacity:
    """A GPUNode's figures: totals, GPUs, and the pods holding them."""

    name: str
    pool: str
    gpus: tuple[str, ...]
    totals: CapacityTotals
    pods: tuple[str, ...]
    """UIDs of the distinct committed pods over the node's GPUs, missing ones included
    (`totalGPUPods`)."""
    allocated_pods: dict[str, list[PodGPUInfo]] = field(default_factory=dict)
    """`allocatedPods`: per GPU name (missing ones included), its committed pods."""


@dataclass(frozen=True, slots=True)
class PoolCapacityFigures:
    """A GPUPool's figures: sums over its nodes."""

    name: str
    nodes: int
    gpus: int
    running_apps: int
    """Sum of the nodes' `totalGPUPods` (`runningAppsCnt`)."""
    totals: CapacityTotals


def _oversubscription(allocator: Allocator, node: NodeState) -> OversubscriptionSettings | None:
    for gpu in node.gpus:
        settings = allocator.pools.get(gpu.pool)
        if settings is not None and settings.oversubscription is not None:
            return settings.oversubscription
    return None


def node_capacity(
    allocator: Allocator, node: NodeState, *, allocated_pods: bool = False
) -> NodeCapacity:
    """The figures of one node from the allocator's memory (missing GPUs left out); with
    `allocated_pods`, also the pods on each GPU as GPUNode status shows them."""
    gpus = node.gpus
    total_tflops = sum(g.capacity_tflops for g in gpus)
    total_vram = sum(g.capacity_vram for g in gpus)
    virtual_tflops, virtual_vram = virtual_capacity(
        total_tflops, total_vram, node.ram_bytes, node.disk_bytes,
        _oversubscription(allocator, node),
    )  # fmt: skip
    totals = CapacityTotals(
        total_tflops=total_tflops,
        total_vram=total_vram,
        available_tflops=sum(g.available_tflops for g in gpus),
        available_vram=sum(g.available_vram for g in gpus),
        virtual_tflops=virtual_tflops,
        virtual_vram=virtual_vram,
        virtual_available_tflops=virtual_tflops - node.committed_limit_tflops,
        virtual_available_vram=virtual_vram - node.committed_limit_vram,
    )
    pods: dict[str, None] = {}
    allocated: dict[str, list[PodGPUInfo]] = {}
    for gpu in (*gpus, *node.missing_gpus):
        infos = []
        for app in gpu.running_apps.values():
            for uid, pod in app.pods.items():
                pods[uid] = None
                if allocated_pods:
                    infos.append(PodGPUInfo.model_validate(pod.to_json()))
        if infos:
            allocated[gpu.name] = sorted(infos, key=lambda i: (i.namespace or "", i.name or ""))
    return NodeCapacity(
        name=node.name,
        pool=gpus[0].pool if gpus else "",
        gpus=tuple(g.name for g in gpus),
        totals=totals,
        pods=tuple(sorted(pods)),
        allocated_pods=allocated,
    )


def pool_capacities(
    allocator: Allocator, nodes: Iterable[NodeCapacity] | None = None
) -> dict[str, PoolCapacityFigures]:
    """Per pool, the sums over its nodes (every node with GPUs, unless `nodes` is given)."""
    if nodes is None:
        nodes = [node_capacity(allocator, n) for n in allocator.nodes.values() if n.gpus]
    pools: dict[str, PoolCapacityFigures] = {}
    for node in nodes:
        known = pools.get(node.pool)
        if known is None:
            pools[node.pool] = PoolCapacityFigures(
                node.pool, 1, len(node.gpus), len(node.pods), node.totals
            )
        else:
            pools[node.pool] = PoolCapacityFigures(
                node.pool,
                known.nodes + 1,
                known.gpus + len(node.gpus),
                known.running_apps + len(node.pods),
                known.totals + node.totals,
            )
    return dict(sorted(pools.items()))
