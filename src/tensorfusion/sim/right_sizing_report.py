"""The report's `rightSizing` section (`simulate --auto-scale`): each workload's request before
and after, the capacity right-sizing gives back from the pods the trace placed, and the two
runs' outcomes side by side."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from tensorfusion.domain.allocation_request import AllocationRequest, ResourceAmount
from tensorfusion.domain.allocator.capacity_figures import CapacityTotals, pool_capacities
from tensorfusion.sim.engine import PodOutcome, SimPod, SimulationResult
from tensorfusion.sim.right_sizer import WorkloadPlan
from tensorfusion.sim.virtual_cluster import VirtualCluster

__all__ = ["MODEL", "Freed", "freed_capacity", "right_sizing_section"]

MODEL: Final = (
    "Each pod of a workload with a usage profile is placed from admission on with the request "
    "and limit the autoscaler recommends from the profile's percentiles over a whole run; "
    "not modelled: the initial delay, the filling of the history window, the interval, in-place "
    "resizes of running pods, cron rules and the external scaler."
)

_SUMMARY: Final = ("placed", "pending", "rejected", "placedAfterWaiting", "meanWaitSeconds",
                   "p95WaitSeconds")  # fmt: skip
_UTILISATION: Final = ("meanVramAllocatedPercent", "peakVramAllocatedPercent",
                       "meanTflopsAllocatedPercent", "meanGpusInUsePercent")  # fmt: skip

PlanOf = Callable[[int, AllocationRequest], WorkloadPlan | None]


@dataclass(frozen=True, slots=True)
class Freed:
    """Requests and limits given back over the placed pods' runs (TFLOPS in milli, VRAM in
    bytes): the most at any one time, and the mean over the time any GPU pod ran."""

    peak: tuple[int, int, int, int]
    """Request TFLOPS, request VRAM, limit TFLOPS, limit VRAM."""
    mean: tuple[float, float, float, float]


def _charged(requests: ResourceAmount, limits: ResourceAmount) -> tuple[int, int, int, int]:
    """Per GPU: request TFLOPS and VRAM, and the limits as virtual capacity counts them (an
    unset limit is the request; a compute percent is never right-sized, so it counts 0)."""
    tflops, vram = requests.tflops_milli, requests.vram_bytes
    return tflops, vram, limits.tflops_milli or tflops, limits.vram_bytes or vram


def _given_back(pod: SimPod, plan_of: PlanOf) -> tuple[int, int, int, int]:
    assert pod.request is not None
    plan = plan_of(pod.entry_index, pod.request)
    if plan is None or not plan.changed:
        return 0, 0, 0, 0
    before = _charged(plan.requests, plan.limits)
    after = _charged(plan.new_requests, plan.new_limits)
    n = plan.gpus
    return (n * (before[0] - after[0]), n * (before[1] - after[1]),
            n * (before[2] - after[2]), n * (before[3] - after[3]))  # fmt: skip


def freed_capacity(result: SimulationResult, plan_of: PlanOf) -> Freed:
    """What right-sizing would give back from the GPU pods `result` placed, each from its
    placement until it left (or the run ended)."""
    events: list[tuple[float, int, tuple[int, int, int, int]]] = []
    for pod in result.pods:
        if pod.native or pod.request is None or pod.placed_at is None:
            continue
        end = (pod.placed_at + pod.duration if pod.outcome is PodOutcome.COMPLETED
               else result.end_time)  # fmt: skip
        delta = _given_back(pod, plan_of)
        events.append((pod.placed_at, 1, delta))
        events.append((max(end, pod.placed_at), -1, delta))
    events.sort(key=lambda e: (e[0], e[1]))  # departures first at equal times
    current = [0, 0, 0, 0]
    peak = [0, 0, 0, 0]
    area = [0.0, 0.0, 0.0, 0.0]
    running = 0
    busy = 0.0
    last = events[0][0] if events else 0.0
    for at, sign, delta in events:
        if running:
            busy += at - last
            area = [a + c * (at - last) for a, c in zip(area, current, strict=True)]
        last = at
        running += sign
        current = [c + sign * d for c, d in zip(current, delta, strict=True)]
        peak = [max(p, c) for p, c in zip(peak, current, strict=True)]
    mean = [a / busy if busy else 0.0 for a in area]
    return Freed((peak[0], peak[1], peak[2], peak[3]), (mean[0], mean[1], mean[2], mean[3]))


def _figures(tflops_milli: float, vram_bytes: float) -> dict[str, float]:
    return {"tflops": round(tflops_milli / 1000, 3), "vramGiB": round(vram_bytes / 2**30, 3)}


def _percent(part: float, whole: int) -> float:
    return round(100 * part / whole, 2) if whole else 0.0


def _outcome(report: dict[str, Any]) -> dict[str, Any]:
    summary, utilisation = report["summary"], report["utilisation"]
    return {k: summary[k] for k in _SUMMARY} | {k: utilisation[k] for k in _UTILISATION}


def _plan_json(plan: WorkloadPlan, pods: int) -> dict[str, Any]:
    return {
        "entry": plan.name,
        "namespace": plan.namespace,
        "pods": pods,
        "gpusPerPod": plan.gpus,
        "settings": plan.source,
        "requests": plan.requests.to_json(),
        "limits": plan.limits.to_json(),
        "rightSized": {"requests": plan.new_requests.to_json(),
                       "limits": plan.new_limits.to_json()},
        "changed": plan.changed,
        "reason": plan.reason,
        "warnings": list(plan.warnings),
    }  # fmt: skip


def right_sizing_section(
    *,
    baseline: SimulationResult,
    baseline_report: dict[str, Any],
    resized_report: dict[str, Any],
    plan_of: PlanOf,
    plans: Sequence[WorkloadPlan],
    cluster: VirtualCluster,
) -> dict[str, Any]:
    """The `rightSizing` value: `plans` (one per right-sized workload), the capacity freed from
    the baseline's placed pods (TFLOPS and GiB; requests against physical capacity, limits
    against virtual), the outcomes of both runs and how many more pods were placed."""
    totals = sum((f.totals for f in pool_capacities(cluster.allocator).values()), CapacityTotals())
    freed = freed_capacity(baseline, plan_of)
    pods = Counter(p.entry_index for p in baseline.pods if p.request is not None)
    before, after = _outcome(baseline_report), _outcome(resized_report)
    return {
        "model": MODEL,
        "workloads": [_plan_json(p, pods[p.entry]) for p in plans],
        "freed": {
            "requests": {
                "peak": _figures(freed.peak[0], freed.peak[1]),
                "mean": _figures(freed.mean[0], freed.mean[1]),
                "peakPercentOfPhysical": {
                    "tflops": _percent(freed.peak[0], totals.total_tflops),
                    "vram": _percent(freed.peak[1], totals.total_vram),
                },
            },
            "limits": {
                "peak": _figures(freed.peak[2], freed.peak[3]),
                "mean": _figures(freed.mean[2], freed.mean[3]),
                "peakPercentOfVirtual": {
                    "tflops": _percent(freed.peak[2], totals.virtual_tflops),
                    "vram": _percent(freed.peak[3], totals.virtual_vram),
                },
            },
        },
        "baseline": before,
        "rightSized": after,
        "morePodsPlaced": after["placed"] - before["placed"],
    }
