"""A workload's usage given as a profile over a pod's run, and the recommendation it leads to:
the simulator's right-sizing what-if (docs/simulator.md), on the controller's own `recommend`.

A profile is a step function of the pod's age: points `(at, fraction)`, the first at 0 s, each
fraction of the per-GPU request holding from its point until the next one, the last until the
pod ends. The node agent samples usage every `SAMPLE_INTERVAL_S`, so a run of `d` seconds gives
the samples at 0, 10, 20, ... s before `d`. Their percentiles are computed from the number of
samples in each step, equal to what `percentile` (DuckDB's `quantile_cont`) gives over the
listed samples, without listing them (a pod may run for years).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from tensorfusion.domain.allocation_request import ResourceAmount
from tensorfusion.domain.autoscaling.recommendation import (
    Recommendation,
    UsagePercentiles,
    recommend,
)
from tensorfusion.domain.autoscaling.settings import AutoSetSettings
from tensorfusion.domain.autoscaling.usage_query import percentile_set

__all__ = [
    "SAMPLE_INTERVAL_S",
    "ProfileUsage",
    "UsagePoint",
    "counted_percentile",
    "profile_percentiles",
    "right_size",
    "sample_counts",
]

SAMPLE_INTERVAL_S: Final = 10.0
"""How often the node agent writes a `tf_worker_usage` row per worker and GPU."""


@dataclass(frozen=True, slots=True)
class UsagePoint:
    """From `at_s` seconds of the pod's age, it uses `fraction` of its request (1 = all)."""

    at_s: float
    fraction: float


@dataclass(frozen=True, slots=True)
class ProfileUsage:
    """The profiles of one workload's pods, per resource (None: not given)."""

    compute: tuple[UsagePoint, ...] | None = None
    vram: tuple[UsagePoint, ...] | None = None


def sample_counts(profile: Sequence[UsagePoint], duration_s: float) -> list[tuple[float, int]]:
    """(fraction, samples) per step of `profile` over a run of `duration_s` seconds: the samples
    are taken at 0, `SAMPLE_INTERVAL_S`, ... before the end; steps past the end have none."""
    counts = []
    for i, point in enumerate(profile):
        end = min(profile[i + 1].at_s if i + 1 < len(profile) else duration_s, duration_s)
        taken = math.ceil(end / SAMPLE_INTERVAL_S) - math.ceil(point.at_s / SAMPLE_INTERVAL_S)
        if taken > 0:
            counts.append((point.fraction, taken))
    return counts


def counted_percentile(counts: Sequence[tuple[float, int]], fraction: float) -> float:
    """The `fraction` percentile of the samples `counts` lists as (value, how many): the value
    `percentile` gives over them listed one by one; 0 for no samples."""
    ordered = sorted((value, n) for value, n in counts if n > 0)
    total = sum(n for _, n in ordered)
    if not total:
        return 0.0
    position = (total - 1) * fraction
    low = math.floor(position)
    high = min(low + 1, total - 1)

    def nth(index: int) -> float:
        seen = 0
        for value, n in ordered:
            seen += n
            if index < seen:
                return value
        return ordered[-1][0]

    return nth(low) + (nth(high) - nth(low)) * (position - low)


def profile_percentiles(
    profile: Sequence[UsagePoint],
    *,
    duration_s: float,
    request: int,
    rows_per_sample: int,
    fractions: tuple[float, float, float],
) -> UsagePercentiles:
    """The usage percentiles (lower, target, upper `fractions`) of one pod's run, in the unit
    of `request`; `samples` counts the rows of all the workload's workers and GPUs
    (`rows_per_sample` of them per sample time)."""
    counts = sample_counts(profile, duration_s)
    samples = sum(n for _, n in counts) * rows_per_sample
    lower, target, upper = (counted_percentile(counts, f) * request for f in fractions)
    return UsagePercentiles(samples, lower, target, upper)


def right_size(
    settings: AutoSetSettings,
    *,
    requests: ResourceAmount,
    limits: ResourceAmount,
    usage: ProfileUsage,
    duration_s: float,
    rows_per_sample: int,
) -> Recommendation:
    """What `recommend` makes of a workload admitted with `requests` and `limits` (per GPU)
    whose pods use `usage` over runs of `duration_s`, `rows_per_sample` being its workers ×
    GPUs: the recommendation once the autoscaler has seen the runs."""
    fractions = percentile_set(settings)
    compute = vram = None
    if usage.compute is not None:
        compute = profile_percentiles(
            usage.compute, duration_s=duration_s, request=requests.tflops_milli,
            rows_per_sample=rows_per_sample, fractions=fractions.compute,
        )  # fmt: skip
    if usage.vram is not None:
        vram = profile_percentiles(
            usage.vram, duration_s=duration_s, request=requests.vram_bytes,
            rows_per_sample=rows_per_sample, fractions=fractions.vram,
        )  # fmt: skip
    return recommend(settings, original=(requests, limits), current=(requests, limits),
                     compute=compute, vram=vram)  # fmt: skip
