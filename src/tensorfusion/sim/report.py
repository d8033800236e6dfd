"""The simulation report as plain data (the `--output` JSON and the source of the other views)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

from tensorfusion.domain.allocator.capacity_figures import (
    CapacityTotals,
    PoolCapacityFigures,
    pool_capacities,
)
from tensorfusion.domain.scheduling.decision import Decision
from tensorfusion.sim.engine import FastPathCheck, PodOutcome, SimulationResult
from tensorfusion.sim.samples import Sample
from tensorfusion.sim.virtual_cluster import VirtualCluster

__all__ = ["build_report"]


def _tflops(milli: int) -> str:
    return f"{milli / 1000:.1f}".removesuffix(".0")


def _vram(count: int) -> str:
    return f"{count / 2**30:.1f}".removesuffix(".0") + "Gi"


def _percentile(values: list[float], fraction: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(fraction * (len(ordered) - 1))))
    return ordered[index]


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def _sample_mean(samples: list[Sample], value: Callable[[Sample], float]) -> float:
    """The mean over every sample time: a sample counts once per time it stands for."""
    times = sum(s.repeats for s in samples)
    return sum(value(s) * s.repeats for s in samples) / times if times else 0.0


def _busy(samples: list[Sample]) -> list[Sample]:
    """Samples taken while something ran or waited (the idle tail does not dilute means)."""
    return [s for s in samples if s.running or s.waiting] or samples


def _timeline(samples: list[Sample]) -> list[dict[str, Any]]:
    """Each sample at its time, and again at the last time it stands for (flat plots)."""
    points = []
    for s in samples:
        point = {
            "t": s.t,
            "running": s.running,
            "waiting": s.waiting,
            "vramAllocatedPercent": round(s.vram_allocated_percent, 2),
            "tflopsAllocatedPercent": round(s.tflops_allocated_percent, 2),
            "gpusInUse": s.gpus_in_use,
            "nodesInUse": s.nodes_in_use,
            "fragmentationPercent": round(s.fragmentation_percent, 2),
        }
        points.append(point)
        if s.repeats > 1:
            points.append({**point, "t": s.last_t})
    return points


def build_report(
    result: SimulationResult,
    cluster: VirtualCluster,
    policy: dict[str, Any],
    alerts: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """Summarise a simulation: outcomes, waits, utilisation, fragmentation, pools, timeline."""
    pods = result.pods
    outcomes = Counter(p.outcome for p in pods)
    placed = [p for p in pods if p.placed_at is not None]
    waits = [p.placed_at - p.arrival for p in placed if p.placed_at is not None]
    still_waiting = [result.end_time - p.arrival for p in pods if p.outcome is PodOutcome.WAITING]
    busy = _busy(result.samples)
    rejected_reasons = Counter(p.message or "" for p in pods if p.outcome is PodOutcome.REJECTED)
    pending = [p for p in pods if p.outcome is PodOutcome.WAITING]
    allocator = cluster.allocator
    capacities = pool_capacities(allocator)
    pools = []
    for name in sorted(cluster.pools):
        capacity = capacities.get(name) or PoolCapacityFigures(name, 0, 0, 0, CapacityTotals())
        totals = capacity.totals
        settings = allocator.pool(name)
        pool_samples = [p for s in result.samples for p in s.pools if p.pool == name]
        pools.append({
            "name": name,
            "placementMode": settings.placement_mode.value,
            "oversubscription": None if settings.oversubscription is None else {
                "tflopsOversellRatio": settings.oversubscription.tflops_oversell_ratio,
                "vramExpandToHostMem": settings.oversubscription.vram_expand_to_host_mem,
                "vramExpandToHostDisk": settings.oversubscription.vram_expand_to_host_disk,
            },
            "nodes": capacity.nodes,
            "gpus": capacity.gpus,
            "physical": {"tflops": _tflops(totals.total_tflops), "vram": _vram(totals.total_vram)},
            "virtual": {
                "tflops": _tflops(totals.virtual_tflops), "vram": _vram(totals.virtual_vram)
            },
            "peakAllocated": None if not pool_samples else {
                "tflops": _tflops(max(p.allocated_tflops for p in pool_samples)),
                "vram": _vram(max(p.allocated_vram for p in pool_samples)),
                "limitsTflops": _tflops(max(p.limits_tflops for p in pool_samples)),
                "limitsVram": _vram(max(p.limits_vram for p in pool_samples)),
            },
        })  # fmt: skip
    report: dict[str, Any] = {
        "policy": policy,
        "cluster": {"nodes": len(allocator.nodes), "gpus": len(allocator.gpus)},
        "summary": {
            "pods": len(pods),
            "placed": len(placed),
            "completed": outcomes[PodOutcome.COMPLETED],
            "running": outcomes[PodOutcome.RUNNING],
            "pending": len(pending),
            "rejected": outcomes[PodOutcome.REJECTED],
            "placedAfterWaiting": sum(1 for w in waits if w > 0),
            "meanWaitSeconds": round(_mean(waits), 3),
            "p95WaitSeconds": round(_percentile(waits, 0.95), 3),
            "longestPendingWaitSeconds": round(max(still_waiting, default=0.0), 3),
            "simulatedSeconds": round(result.end_time, 3),
            "decisions": result.decisions,
            "decisionsPerSecond": round(result.decisions / result.decision_seconds)
            if result.decision_seconds > 0
            else None,
        },
        "utilisation": {
            "meanVramAllocatedPercent": round(
                _sample_mean(busy, lambda s: s.vram_allocated_percent), 2
            ),
            "peakVramAllocatedPercent": round(
                max((s.vram_allocated_percent for s in result.samples), default=0.0), 2
            ),
            "meanTflopsAllocatedPercent": round(
                _sample_mean(busy, lambda s: s.tflops_allocated_percent), 2
            ),
            "meanGpusInUsePercent": round(
                _sample_mean(
                    [s for s in busy if s.gpus_total], lambda s: 100 * s.gpus_in_use / s.gpus_total
                ),
                2,
            ),
            "meanNodesInUsePercent": round(
                _sample_mean(
                    [s for s in busy if s.nodes_total],
                    lambda s: 100 * s.nodes_in_use / s.nodes_total,
                ),
                2,
            ),
        },
        "fragmentation": {
            "meanPercent": round(_sample_mean(busy, lambda s: s.fragmentation_percent), 2),
            "peakPercent": round(max((s.fragmentation_percent for s in busy), default=0.0), 2),
            "definition": "share of free VRAM on partly allocated GPUs",
        },
        "pools": pools,
        "rejected": [
            {"reason": reason, "pods": count} for reason, count in rejected_reasons.most_common()
        ],
        "pending": [{"pod": p.key, "attempts": p.attempts, "message": p.message} for p in pending],
        "alerts": alerts or [],
        "timeline": _timeline(result.samples),
    }
    if result.fast_path is not None:
        report["fastPathVerification"] = _fast_path_json(result.fast_path)
    return report


def _fast_path_json(check: FastPathCheck) -> dict[str, Any]:
    def decision(d: Decision) -> dict[str, Any]:
        return {"node": d.node, "gpus": list(d.gpus), "combined": d.combined}

    return {
        "decisions": check.decisions,
        "mismatches": check.mismatches,
        "examples": [
            {"pod": m.pod, "fast": decision(m.fast), "full": decision(m.full)}
            for m in check.examples
        ],
    }
