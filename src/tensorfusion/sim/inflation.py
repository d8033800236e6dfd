"""The workload-inflation curve: GPU allocation ratio against the arrived GPU request.

Pods arrive one after another and never leave, so after each arrival the allocated GPUs are
the requests of the pods placed so far. Both are given as a percentage of the cluster's GPUs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

__all__ = ["allocation_at", "inflation_curve", "inflation_table"]


def inflation_curve(
    requests: Sequence[float], placed: Sequence[bool], cluster_gpus: int, factor: float, seed: int
) -> dict[str, Any]:
    """The report's `inflation` value: a point each time the arrived request crosses a whole
    percent of the cluster's GPUs, and one after the last arrival."""
    points: list[dict[str, float]] = []
    arrived = allocated = 0.0
    next_percent = 1
    for request, was_placed in zip(requests, placed, strict=True):
        arrived += request
        allocated += request if was_placed else 0.0
        arrived_percent = 100 * arrived / cluster_gpus
        if arrived_percent + 1e-9 >= next_percent:
            points.append(_point(arrived_percent, 100 * allocated / cluster_gpus))
            next_percent = math.floor(arrived_percent + 1e-9) + 1
    final = _point(100 * arrived / cluster_gpus, 100 * allocated / cluster_gpus)
    if not points or points[-1] != final:
        points.append(final)
    return {"factor": factor, "seed": seed, "clusterGpus": cluster_gpus, "points": points}


def _point(arrived: float, allocated: float) -> dict[str, float]:
    return {"arrivedPercent": round(arrived, 3), "allocatedPercent": round(allocated, 3)}


def inflation_table(curve: dict[str, Any], step: float = 10.0) -> list[tuple[float, float]]:
    """(arrived %, allocated %) at every `step` percent of arrived workload: the first point at
    or past each step, up to the last arrival."""
    points = curve["points"]
    last = points[-1]["arrivedPercent"] if points else 0.0
    marks = [step * k for k in range(1, math.floor((last + 1e-9) / step) + 1)]
    return [(mark, allocation_at(curve, mark)) for mark in marks]


def allocation_at(curve: dict[str, Any], arrived_percent: float) -> float:
    """The allocated percent at the first point at or past `arrived_percent` (the last point's
    when the run stopped before)."""
    points = curve["points"]
    for point in points:
        if point["arrivedPercent"] + 1e-9 >= arrived_percent:
            return float(point["allocatedPercent"])
    return float(points[-1]["allocatedPercent"]) if points else 0.0
