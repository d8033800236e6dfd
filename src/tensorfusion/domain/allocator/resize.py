"""Resize of a live allocation: new requests and limits on the same GPUs (right-sizing).

The change is checked first, as a dry run would: every GPU must hold the extra request, the
quota is charged the difference times the GPU count, and on an oversubscribed pool the node's
limits must stay within its virtual capacity. Only then, and unless `dry_run`, is the record
re-charged. A refused resize changes nothing.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from tensorfusion.domain.allocation_request import ResourceAmount
from tensorfusion.domain.allocator.allocator import Allocator
from tensorfusion.domain.allocator.gpu_accounting import make_record
from tensorfusion.domain.allocator.gpu_state import WHOLE_CARD_MODES
from tensorfusion.domain.allocator.oversubscription import limits_over_virtual, virtual_capacity
from tensorfusion.domain.allocator.quota import QuotaUsage, check_single, check_total
from tensorfusion.domain.allocator.records import AllocationRecord
from tensorfusion.domain.quantities import format_bytes, format_milli

__all__ = ["ResizeOutcome", "resize_allocation"]


@dataclass(frozen=True, slots=True)
class ResizeOutcome:
    """Whether the resize fits, why not, and what it changes in the namespace's quota."""

    allowed: bool
    message: str | None = None
    quota_delta: QuotaUsage = dataclasses.field(default_factory=QuotaUsage)
    record: AllocationRecord | None = None
    applied: bool = False


def resize_allocation(
    allocator: Allocator,
    uid: str,
    requests: ResourceAmount,
    limits: ResourceAmount,
    *,
    dry_run: bool = False,
) -> ResizeOutcome:
    """Check, and unless `dry_run` apply, new per-GPU requests and limits for pod `uid`."""
    record = allocator.records.get(uid)
    if record is None:
        return ResizeOutcome(False, f"no allocation for pod UID {uid}")
    old = record.request
    who = f"pod {old.key}"
    if old.isolation in WHOLE_CARD_MODES:
        return ResizeOutcome(
            False, f"{who}: a {old.isolation} allocation takes whole GPUs and cannot be resized"
        )
    problem = _limit_below_request(requests, limits)
    if problem is not None:
        return ResizeOutcome(False, f"{who}: {problem}")
    request = dataclasses.replace(old, request=requests, limit=limits)
    gpus = [allocator.gpus[name] for name in record.gpus if name in allocator.gpus]
    fresh = make_record(request, record.node, gpus, record.since, None, record.state)
    for gpu, before, after in zip(gpus, record.charged, fresh.charged, strict=True):
        extra_tflops, extra_vram = after[0] - before[0], after[1] - before[1]
        free_tflops = gpu.available_tflops - gpu.assumed_tflops
        free_vram = gpu.available_vram - gpu.assumed_vram
        if extra_tflops > 0 and free_tflops < extra_tflops:
            return ResizeOutcome(
                False,
                f"{who}: GPU {gpu.name}: available tflops {format_milli(free_tflops)} < "
                f"additional request {format_milli(extra_tflops)}",
            )
        if extra_vram > 0 and free_vram < extra_vram:
            return ResizeOutcome(
                False,
                f"{who}: GPU {gpu.name}: available vram {format_bytes(free_vram)} < "
                f"additional request {format_bytes(extra_vram)}",
            )
    delta = QuotaUsage()
    delta.add(fresh.quota)
    delta.add(record.quota, -1)
    quota = allocator.quotas.get(old.namespace)
    if quota is not None:
        capacity = gpus[0].capacity_tflops if gpus else 0
        problem = check_single(quota.spec, request, capacity) or check_total(quota, delta)
        if problem is not None:
            return ResizeOutcome(False, problem, delta)
    problem = _virtual_capacity_problem(allocator, record, fresh)
    if problem is not None:
        return ResizeOutcome(False, f"{who}: {problem}", delta)
    if dry_run:
        return ResizeOutcome(True, None, delta, fresh)
    return ResizeOutcome(True, None, delta, allocator.replace_request(uid, request), True)


def _limit_below_request(requests: ResourceAmount, limits: ResourceAmount) -> str | None:
    for name, request, limit, shown in (
        ("tflops", requests.tflops_milli, limits.tflops_milli, format_milli),
        ("compute", requests.percent_milli, limits.percent_milli, format_milli),
        ("vram", requests.vram_bytes, limits.vram_bytes, format_bytes),
    ):
        if limit and request > limit:
            return f"{name} request {shown(request)} is above its limit {shown(limit)}"
    return None


def _virtual_capacity_problem(
    allocator: Allocator, record: AllocationRecord, fresh: AllocationRecord
) -> str | None:
    settings = allocator.pool(record.request.pool).oversubscription
    node = allocator.nodes.get(record.node)
    if settings is None or node is None:
        return None
    total_tflops, total_vram = node.total_capacity()
    virtual = virtual_capacity(total_tflops, total_vram, node.ram_bytes, node.disk_bytes, settings)
    tflops = node.limit_tflops - record.effective_limit[0] + fresh.effective_limit[0]
    vram = node.limit_vram - record.effective_limit[1] + fresh.effective_limit[1]
    return limits_over_virtual(tflops, vram, virtual)
