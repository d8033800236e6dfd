"""Per-GPU resources and GPU count of a TF pod (admission.md §4 steps 7-8, §5, §9.2-9.3)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from tensorfusion.domain.admission.validation import ParsedAnnotations
from tensorfusion.domain.allocation_request import ResourceAmount
from tensorfusion.domain.annotation_errors import Problem, invalid_value, problem
from tensorfusion.domain.annotations import INDEX_MAX, INDEX_MIN, Keys
from tensorfusion.domain.model import Resource
from tensorfusion.domain.native_resources import NativeGPUs

__all__ = [
    "FULL_GPU_PERCENT_MILLI",
    "GPUCount",
    "fill_defaults",
    "resolve_count",
    "resolve_resources",
    "resource_amount",
]

FULL_GPU_PERCENT_MILLI = 100_000


def resource_amount(resource: Resource | None) -> ResourceAmount:
    """A CRD `Resource` (`tflops`, `compute`, `vram`) in integer units; absent parts are zero."""
    if resource is None:
        return ResourceAmount()
    tflops, compute, vram = resource.tflops, resource.compute, resource.vram
    return ResourceAmount(
        tflops_milli=0 if tflops is None else tflops.milli(),
        percent_milli=0 if compute is None else compute.milli(),
        vram_bytes=0 if vram is None else vram.ceil(),
    )


def fill_defaults(base: ResourceAmount, default: ResourceAmount) -> ResourceAmount:
    """Zero fields take the default (compute kind only when the base has no compute at all)."""
    tflops, percent = base.tflops_milli, base.percent_milli
    if not tflops and not percent:
        tflops, percent = default.tflops_milli, default.percent_milli
    return ResourceAmount(tflops, percent, base.vram_bytes or default.vram_bytes)


def _override(
    base: ResourceAmount, tflops: int | None, percent: int | None, vram: int | None
) -> ResourceAmount:
    # Both given is a syntax error reported by validation; TFLOPs wins here to avoid a repeat.
    if tflops is not None:
        base = replace(base, tflops_milli=tflops, percent_milli=0)
    elif percent is not None:
        base = replace(base, tflops_milli=0, percent_milli=percent)
    if vram is not None:
        base = replace(base, vram_bytes=vram)
    return base


def resolve_resources(
    requests: ResourceAmount,
    limits: ResourceAmount,
    parsed: ParsedAnnotations,
    *,
    full_gpu_limit: bool,
    keys: Keys,
) -> tuple[ResourceAmount, ResourceAmount, list[Problem]]:
    """Apply the §5 resolution order to the profile-plus-quota base.

    `full_gpu_limit`: the pod had native GPUs and is not `shared` (§9.2), so a limit without any
    compute value becomes 100 percent.
    """
    limits = _override(limits, parsed.tflops_limit, parsed.percent_limit, parsed.vram_limit)
    if full_gpu_limit and not limits.tflops_milli and not limits.percent_milli:
        limits = replace(limits, percent_milli=FULL_GPU_PERCENT_MILLI)
    requests = _override(
        requests, parsed.tflops_request, parsed.percent_request, parsed.vram_request
    )
    if not requests.tflops_milli and not requests.percent_milli:
        requests = replace(
            requests, tflops_milli=limits.tflops_milli, percent_milli=limits.percent_milli
        )
    if not requests.vram_bytes:
        requests = replace(requests, vram_bytes=limits.vram_bytes)
    problems = [
        problem(
            f"resources.{side}: TFLOPs and compute percent are mutually exclusive "
            f"({tflops_key}, {percent_key})",
            about="tflops-with-compute-percent",
        )
        for side, amount, tflops_key, percent_key in (
            ("limits", limits, keys.tflops_limit, keys.compute_percent_limit),
            ("requests", requests, keys.tflops_request, keys.compute_percent_request),
        )
        if amount.tflops_milli and amount.percent_milli
    ]
    return requests, limits, problems


@dataclass(frozen=True, slots=True)
class GPUCount:
    """The resolved GPU count, pinned indices and the per-container native split."""

    count: int = 1
    indices: tuple[int, ...] = ()
    container_gpu_count: tuple[tuple[str, int], ...] = ()


def resolve_count(
    parsed: ParsedAnnotations,
    profile_count: int | None,
    profile_indices: tuple[int, ...] | None,
    native: NativeGPUs,
    *,
    profile_field: str,
    keys: Keys,
) -> tuple[GPUCount, list[Problem]]:
    """Count from `gpu-count`, else `gpu-indices`, else the profile, else native limits, else 1."""
    indices = parsed.gpu_indices if parsed.gpu_indices is not None else profile_indices or ()
    split: tuple[tuple[str, int], ...] = ()
    source = ""
    if parsed.gpu_count is not None:
        count = parsed.gpu_count
    elif parsed.gpu_indices is not None:
        count = len(parsed.gpu_indices)
    elif profile_count is not None:
        count, source = profile_count, f"{profile_field}.gpuCount"
    elif profile_indices:
        count = len(profile_indices)
    elif native.total:
        count, split, source = native.total, native.per_container, "sum of native GPU limits"
    else:
        count = 1
    problems: list[Problem] = []
    if not INDEX_MIN <= count <= INDEX_MAX:
        problems.append(
            invalid_value(
                source,
                str(count),
                f"must be an integer between {INDEX_MIN} and {INDEX_MAX}",
                rank_as="gpu-count",
            )
        )
    elif indices and count != len(indices) and (parsed.gpu_count is None or not parsed.gpu_indices):
        if parsed.gpu_count is not None:
            source = keys.gpu_count
        problems.append(
            invalid_value(
                source or keys.gpu_count,
                str(count),
                f"must equal the number of GPU indices ({len(indices)})",
                rank_as="gpu-count-with-gpu-indices",
            )
        )
    return GPUCount(count, tuple(indices), split), problems
