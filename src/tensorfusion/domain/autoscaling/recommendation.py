"""The right-sizing recommendation of one workload (docs/autoscaling.md).

Estimator: percentiles of the per-GPU usage samples (`tf_worker_usage`, every worker and GPU of
the workload) over the last `historyDataPeriod`, no decay: the fields of `autoSetResources` name
percentiles of a window, and a window is what an operator can check with one query. The leader
reads them from its usage histograms (`usage_histogram`, `usage_history`), within 5 % of the
exact `percentile`. Per resource (TFLOPS, VRAM), when targeted:

- target = P_target × (1 + margin), lower = P_lower × (1 + margin),
  upper = P_upper × (1 + margin);
- each clamped to [min ratio × original request, max ratio × original request] (the request the
  workload was admitted with; never 0);
- the request moves to the target only when the current request is outside [lower, upper] or
  differs from the target by more than `updateThreshold` of itself; the limit keeps the
  original limit-to-request ratio, and is never below the request.

Without enough samples (`MIN_SAMPLES`) or with no data for the window, nothing is recommended.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from tensorfusion.domain.allocation_request import ResourceAmount
from tensorfusion.domain.autoscaling.settings import AutoSetSettings

__all__ = [
    "MIN_SAMPLES",
    "Recommendation",
    "ResourceRecommendation",
    "UsagePercentiles",
    "percentile",
    "recommend",
]

MIN_SAMPLES: Final = 30
"""Rows over all the workload's workers and GPUs (five minutes of one worker's 10 s samples):
fewer is not a basis for a change."""


def percentile(values: Sequence[float], fraction: float) -> float:
    """The `fraction` percentile of `values` by linear interpolation (as DuckDB's
    `quantile_cont`); 0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    position = (len(ordered) - 1) * fraction
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


@dataclass(frozen=True, slots=True)
class UsagePercentiles:
    """One resource's usage over the window: samples and the three percentiles (TFLOPS in
    milli, VRAM in bytes)."""

    samples: int
    lower: float
    target: float
    upper: float


@dataclass(frozen=True, slots=True)
class ResourceRecommendation:
    """What one resource should be, and why."""

    request: int
    limit: int
    lower: int
    upper: int
    change: bool
    reason: str


@dataclass(frozen=True, slots=True)
class Recommendation:
    """Both resources; `requests`/`limits` hold the current values where nothing changes."""

    requests: ResourceAmount
    limits: ResourceAmount
    compute: ResourceRecommendation | None
    vram: ResourceRecommendation | None

    @property
    def change(self) -> bool:
        """Whether anything is to be resized."""
        return any(r is not None and r.change for r in (self.compute, self.vram))


def _one(
    name: str,
    usage: UsagePercentiles | None,
    *,
    original: int,
    original_limit: int,
    current: int,
    current_limit: int,
    margin: float,
    bounds: tuple[float, float],
    threshold: float,
) -> ResourceRecommendation | None:
    if original <= 0:
        return None
    if usage is None or usage.samples < MIN_SAMPLES:
        seen = 0 if usage is None else usage.samples
        why = f"{name}: {seen} samples, fewer than {MIN_SAMPLES}"
        return ResourceRecommendation(current, current_limit, 0, 0, False, why)
    low_cap = max(math.ceil(bounds[0] * original), 1)
    high_cap = max(math.floor(bounds[1] * original), low_cap)

    def capped(value: float) -> int:
        return min(max(math.ceil(value * (1 + margin)), low_cap), high_cap)

    target, lower, upper = capped(usage.target), capped(usage.lower), capped(usage.upper)
    ratio = original_limit / original if original_limit > original else 1.0
    limit = max(math.ceil(target * ratio), target)
    outside = not lower <= current <= upper
    moved = current <= 0 or abs(target - current) > threshold * current
    change = target != current and (outside or moved)
    why = f"{name}: target {target}, bounds [{lower}, {upper}], current {current}" + (
        "" if change else " (within the threshold)")  # fmt: skip
    return ResourceRecommendation(target if change else current,
                                  limit if change else current_limit,
                                  lower, upper, change, why)  # fmt: skip


def recommend(
    settings: AutoSetSettings,
    *,
    original: tuple[ResourceAmount, ResourceAmount],
    current: tuple[ResourceAmount, ResourceAmount],
    compute: UsagePercentiles | None,
    vram: UsagePercentiles | None,
) -> Recommendation:
    """The recommendation for a workload admitted with `original` (requests, limits), now at
    `current`, given its usage percentiles."""
    (orig_req, orig_lim), (cur_req, cur_lim) = original, current
    tflops = vram_rec = None
    if settings.compute and orig_req.tflops_milli:
        tflops = _one("tflops", compute, original=orig_req.tflops_milli,
                      original_limit=orig_lim.tflops_milli, current=cur_req.tflops_milli,
                      current_limit=cur_lim.tflops_milli,
                      margin=settings.margin_fraction,
                      bounds=(settings.min_compute_resources_ratio,
                              settings.max_compute_resources_ratio),
                      threshold=settings.update_threshold)  # fmt: skip
    if settings.vram and orig_req.vram_bytes:
        vram_rec = _one("vram", vram, original=orig_req.vram_bytes,
                        original_limit=orig_lim.vram_bytes, current=cur_req.vram_bytes,
                        current_limit=cur_lim.vram_bytes,
                        margin=settings.margin_fraction,
                        bounds=(settings.min_vram_resources_ratio,
                                settings.max_vram_resources_ratio),
                        threshold=settings.update_threshold)  # fmt: skip
    requests = ResourceAmount(
        tflops_milli=tflops.request if tflops else cur_req.tflops_milli,
        percent_milli=cur_req.percent_milli,
        vram_bytes=vram_rec.request if vram_rec else cur_req.vram_bytes,
    )
    limits = ResourceAmount(
        tflops_milli=tflops.limit if tflops else cur_lim.tflops_milli,
        percent_milli=cur_lim.percent_milli,
        vram_bytes=vram_rec.limit if vram_rec else cur_lim.vram_bytes,
    )
    return Recommendation(requests, limits, tflops, vram_rec)
