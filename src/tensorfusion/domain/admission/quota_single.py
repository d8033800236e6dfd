"""The `single` part of a namespace GPUResourceQuota: per-pod defaults and caps (§4 steps 7, 13)."""

from __future__ import annotations

from dataclasses import dataclass, field

from tensorfusion.domain.admission.resources import resource_amount
from tensorfusion.domain.allocation_request import ResourceAmount
from tensorfusion.domain.annotation_errors import Code, Problem, invalid_value
from tensorfusion.domain.annotations import Keys
from tensorfusion.domain.model import GPUResourceQuota
from tensorfusion.domain.quantities import format_bytes, format_milli

__all__ = ["SingleQuota", "read_single_quota", "single_cap_problems"]


@dataclass(frozen=True, slots=True)
class SingleQuota:
    """Per-GPU caps and defaults of one pod; zero components are unchecked / not filled."""

    name: str = ""
    max_requests: ResourceAmount = field(default_factory=ResourceAmount)
    max_limits: ResourceAmount = field(default_factory=ResourceAmount)
    max_gpu_count: int = 0
    default_requests: ResourceAmount = field(default_factory=ResourceAmount)
    default_limits: ResourceAmount = field(default_factory=ResourceAmount)


def read_single_quota(quota: GPUResourceQuota | None) -> SingleQuota:
    """`spec.single` of the effective quota; absent values are zero (unchecked, not filled)."""
    if quota is None:
        return SingleQuota()
    single = quota.spec.single
    return SingleQuota(
        name=quota.metadata.name or "",
        max_requests=resource_amount(single.max_requests),
        max_limits=resource_amount(single.max_limits),
        max_gpu_count=single.max_gpu_count or 0,
        default_requests=resource_amount(single.default_requests),
        default_limits=resource_amount(single.default_limits),
    )


def single_cap_problems(
    quota: SingleQuota,
    requests: ResourceAmount,
    limits: ResourceAmount,
    count: int,
    keys: Keys,
) -> list[Problem]:
    """Per-GPU `maxRequests` / `maxLimits` and `maxGPUCount`; each excess is a 403 problem."""
    problems: list[Problem] = []
    where = f'GPUResourceQuota "{quota.name}" spec.single'
    for side, amount, cap, tflops_key, percent_key, vram_key in (
        (
            "maxRequests",
            requests,
            quota.max_requests,
            keys.tflops_request,
            keys.compute_percent_request,
            keys.vram_request,
        ),
        (
            "maxLimits",
            limits,
            quota.max_limits,
            keys.tflops_limit,
            keys.compute_percent_limit,
            keys.vram_limit,
        ),
    ):
        for key, value, maximum, text, name in (
            (tflops_key, amount.tflops_milli, cap.tflops_milli, format_milli, "tflops"),
            (percent_key, amount.percent_milli, cap.percent_milli, format_milli, "compute"),
            (vram_key, amount.vram_bytes, cap.vram_bytes, format_bytes, "vram"),
        ):
            if maximum and value > maximum:
                problems.append(
                    invalid_value(
                        key,
                        text(value),
                        f"exceeds the namespace quota ({where}.{side}.{name} = {text(maximum)})",
                        code=Code.FORBIDDEN,
                    )
                )
    if quota.max_gpu_count and count > quota.max_gpu_count:
        problems.append(
            invalid_value(
                keys.gpu_count,
                str(count),
                f"exceeds the namespace quota ({where}.maxGPUCount = {quota.max_gpu_count})",
                code=Code.FORBIDDEN,
            )
        )
    return problems
