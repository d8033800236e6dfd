"""The GPU stages of the filter chain for one GPU (scheduling.md §4 stages 1-9), and the
re-validation of an assumed GPU at bind (§12 step 4)."""

from __future__ import annotations

from tensorfusion.domain.allocator.gpu_state import TENSOR_FUSION_USER, GPUState, room_failure
from tensorfusion.domain.allocator.quota import charge_for, check_single, check_total
from tensorfusion.domain.allocator.request_context import (
    GPU_INDEX,
    GPU_STAGES,
    ISOLATION_POLICY,
    MODEL,
    PASSED,
    PHASE_FILTER,
    QUOTA_PERCENT,
    RESOURCE,
    SHARED_WHOLE,
    VENDOR,
    RequestContext,
)
from tensorfusion.domain.vocabulary import GPUPhase, IsolationMode, IsolationPolicy

__all__ = ["gpu_failure", "phase_failure", "revalidation_failure"]


def gpu_failure(ctx: RequestContext, gpu: GPUState, explain: bool) -> tuple[int, str]:
    """First GPU stage (1..9) that removes the GPU, or PASSED; the reason only with `explain`
    for the stages whose text costs a format."""
    request = ctx.request
    mode = request.isolation
    if ctx.plain_static:
        # The usual case, decided inline: Static policy, GPU without its own policy or lock.
        suspect = (
            (
                gpu.isolation_policy is not None
                and gpu.isolation_policy is not IsolationPolicy.STATIC
            )
            or (mode is not IsolationMode.SHARED and gpu.isolation_mode not in ("", mode))
            or (gpu.capabilities is not None and not gpu.capabilities.supports(mode))
        )
        isolation = ctx.isolation_failure(gpu) if suspect else None
    else:
        isolation = ctx.isolation_failure(gpu)
    if isolation is not None and isolation[0] == ISOLATION_POLICY:
        return isolation
    phase_reason = phase_failure(gpu)
    if phase_reason is not None:
        return PHASE_FILTER, phase_reason
    if ctx.indices and (gpu.index is None or gpu.index not in ctx.indices):
        return GPU_INDEX, (
            f"index {gpu.index} not in gpu-indices {sorted(ctx.indices)}" if explain else ""
        )
    if isolation is not None:
        return isolation
    room = room_failure(gpu, request, explain)
    if room is not None:
        return (SHARED_WHOLE if room[0] else RESOURCE), room[1]
    if ctx.percent_quota:
        reason_text = percent_quota_failure(ctx, gpu)
        if reason_text is not None:
            return QUOTA_PERCENT, reason_text
    if request.gpu_model is not None and gpu.model != request.gpu_model:
        return MODEL, f"gpuModel is {gpu.model}, request is {request.gpu_model}"
    if request.vendor is not None and gpu.vendor != request.vendor:
        return VENDOR, f"vendor is {gpu.vendor}, request is {request.vendor}"
    return PASSED, ""


def percent_quota_failure(ctx: RequestContext, gpu: GPUState) -> str | None:
    """Stage 7: the quota's TFLOPs caps with percent values converted with this GPU."""
    request = ctx.request
    quota = ctx.allocator.quotas.get(request.namespace)
    if quota is None:
        return None
    capacity = gpu.capacity_tflops
    return check_single(quota.spec, request, capacity) or check_total(
        quota, charge_for(request, [capacity] * request.count)
    )


def phase_failure(gpu: GPUState) -> str | None:
    """Stage 2 (PhaseFilter) for a GPU: None when it may be scheduled."""
    if gpu.missing:
        return f"GPU is missing since {gpu.missing_since}"
    if gpu.used_by not in ("", TENSOR_FUSION_USER):
        return f"usedBy is {gpu.used_by}"
    if gpu.phase is not GPUPhase.RUNNING:
        return f"phase is {gpu.phase}"
    if gpu.capacity_tflops <= 0 or gpu.capacity_vram <= 0:
        return "capacity is zero"
    return None


def revalidation_failure(ctx: RequestContext, gpu: GPUState) -> str | None:
    """Whether a GPU assumed for the request still passes stages 2 and 4 (§12 step 4):
    the stage message, or None. Capacity, quota and worker limits were charged at assume."""
    failure = ctx.isolation_failure(gpu)
    if failure is not None:
        return f"{GPU_STAGES[failure[0]]}: {gpu.name}: {failure[1]}"
    reason = phase_failure(gpu)
    return None if reason is None else f"PhaseFilter: {gpu.name}: {reason}"
