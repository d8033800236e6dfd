"""Periodic samples of the virtual cluster: allocation, utilisation and fragmentation."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from tensorfusion.domain.allocator.capacity_figures import node_capacity
from tensorfusion.sim.virtual_cluster import VirtualCluster

__all__ = ["PoolSample", "Sample", "take_sample"]


@dataclass(frozen=True, slots=True)
class PoolSample:
    """One pool at one instant (TFLOPs in milli, VRAM in bytes)."""

    pool: str
    capacity_tflops: int
    capacity_vram: int
    allocated_tflops: int
    allocated_vram: int
    virtual_tflops: int
    virtual_vram: int
    limits_tflops: int
    limits_vram: int


@dataclass(frozen=True, slots=True)
class Sample:
    """The cluster at simulated time `t` (seconds), and for how long it stayed so.

    Sample times are not measured again while nothing changes: `repeats` counts the sample
    times this one stands for (itself included), the last of them at `held_until`.
    """

    t: float
    running: int
    waiting: int
    gpus_in_use: int
    gpus_total: int
    nodes_in_use: int
    nodes_total: int
    vram_allocated_percent: float
    tflops_allocated_percent: float
    fragmentation_percent: float
    pools: tuple[PoolSample, ...]
    repeats: int = 1
    held_until: float | None = None

    def held(self, t: float, times: int = 1) -> Sample:
        """This sample standing for `times` more sample times, the last at `t`."""
        return dataclasses.replace(self, repeats=self.repeats + times, held_until=t)

    @property
    def last_t(self) -> float:
        """The last sample time this one stands for."""
        return self.t if self.held_until is None else self.held_until


def _percent(part: int, whole: int) -> float:
    return 100.0 * part / whole if whole else 0.0


def take_sample(t: float, cluster: VirtualCluster, waiting: int, running: int) -> Sample:
    """Measure allocation per pool, GPUs and nodes in use, and VRAM fragmentation.

    Fragmentation is the share of free VRAM that sits on partly allocated GPUs: free memory
    that a whole-GPU or large request cannot use.
    """
    allocator = cluster.allocator
    per_pool: dict[str, list[int]] = {}
    gpus_in_use = 0
    free_total = free_on_partial = 0
    cap_tflops = cap_vram = used_tflops = used_vram = 0
    for gpu in allocator.gpus.values():
        figures = per_pool.setdefault(gpu.pool, [0, 0, 0, 0])
        used_t = gpu.capacity_tflops - gpu.available_tflops
        used_v = gpu.capacity_vram - gpu.available_vram
        figures[0] += gpu.capacity_tflops
        figures[1] += gpu.capacity_vram
        figures[2] += used_t
        figures[3] += used_v
        cap_tflops += gpu.capacity_tflops
        cap_vram += gpu.capacity_vram
        used_tflops += used_t
        used_vram += used_v
        free_total += gpu.available_vram
        if used_v > 0 or used_t > 0:
            gpus_in_use += 1
            free_on_partial += gpu.available_vram
    nodes_in_use = 0
    virtual: dict[str, list[int]] = {}
    for node in allocator.nodes.values():
        if node.committed_workers:
            nodes_in_use += 1
        if not node.gpus:
            continue
        totals = node_capacity(allocator, node).totals
        figures = virtual.setdefault(node.gpus[0].pool, [0, 0, 0, 0])
        figures[0] += totals.virtual_tflops
        figures[1] += totals.virtual_vram
        figures[2] += node.limit_tflops
        figures[3] += node.limit_vram
    pools = tuple(
        PoolSample(
            pool=name,
            capacity_tflops=f[0],
            capacity_vram=f[1],
            allocated_tflops=f[2],
            allocated_vram=f[3],
            virtual_tflops=virtual.get(name, [0, 0, 0, 0])[0],
            virtual_vram=virtual.get(name, [0, 0, 0, 0])[1],
            limits_tflops=virtual.get(name, [0, 0, 0, 0])[2],
            limits_vram=virtual.get(name, [0, 0, 0, 0])[3],
        )
        for name, f in sorted(per_pool.items())
    )
    return Sample(
        t=t,
        running=running,
        waiting=waiting,
        gpus_in_use=gpus_in_use,
        gpus_total=len(allocator.gpus),
        nodes_in_use=nodes_in_use,
        nodes_total=len(allocator.nodes),
        vram_allocated_percent=_percent(used_vram, cap_vram),
        tflops_allocated_percent=_percent(used_tflops, cap_tflops),
        fragmentation_percent=_percent(free_on_partial, free_total),
        pools=pools,
    )
