"""Resize of a live allocation: new requests and limits on the same GPUs (right-sizing).

The change is checked first, as a dry run would: every GPU must hold the extra request, the
quota is charged the difference times the GPU count, and on an oversubscribed pool the node's
limits must stay within its virtual capacity. Only then, and unless `dry_run`, is the record
re-charged. A refused resize changes nothing.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from tensorfusion.domain.allocation_request import AllocationRequest, ResourceAmount
from tensorfusion.domain.allocator.allocator import Allocator
from tensorfusion.domain.allocator.gpu_accounting import make_record
from tensorfusion.domain.allocator.gpu_state import WHOLE_CARD_MODES
from tensorfusion.domain.allocator.oversubscription import limits_over_virtual, virtual_capacity
from tensorfusion.domain.allocator.quota import QuotaAmounts, QuotaSpec, check_single, check_total
from tensorfusion.domain.allocator.records import AllocationRecord
from tensorfusion.domain.quantities import format_bytes, format_milli

__all__ = ["ResizeOutcome", "resize_allocation"]


@dataclass(frozen=True, slots=True)
class ResizeOutcome:
    """Whether the resize fits, why not, and what it changes in the namespace's quota."""

    allowed: bool
    message: str | None = None
    quota_delta: QuotaAmounts = dataclasses.field(default_factory=QuotaAmounts)
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
    gone = [name for name in record.gpus if name not in allocator.gpus]
    if gone:
        return ResizeOutcome(False, f"{who}: GPU {', '.join(gone)} no longer exists")
    request = dataclasses.replace(old, request=requests, limit=limits)
    gpus = [allocator.gpus[name] for name in record.gpus]
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
    delta = QuotaAmounts()
    delta.add(fresh.quota)
    delta.add(record.quota, -1)
    quota = allocator.quotas.get(old.namespace)
    if quota is not None:
        capacity = gpus[0].capacity_tflops if gpus else 0
        problem = _single_cap_problem(quota.spec, old, request, capacity) or check_total(
            quota, delta, growing_only=True
        )
        if problem is not None:
            return ResizeOutcome(False, problem, delta)
    problem = _virtual_capacity_problem(allocator, record, fresh)
    if problem is not None:
        return ResizeOutcome(False, f"{who}: {problem}", delta)
    if dry_run:
        return ResizeOutcome(True, None, delta, fresh)
    return ResizeOutcome(True, None, delta, allocator.replace_request(uid, request), True)


def _single_cap_problem(
    spec: QuotaSpec, old: AllocationRequest, new: AllocationRequest, capacity: int
) -> str | None:
    """The per-pod caps, for the values the resize raises only."""
    grown = dataclasses.replace(
        new,
        request=_grown(old.request, new.request, capacity),
        limit=_grown(old.limit, new.limit, capacity),
    )
    return check_single(spec, grown, capacity)


def _grown(old: ResourceAmount, new: ResourceAmount, capacity: int) -> ResourceAmount:
    """`new` with every component that does not grow set to zero (zero is never capped)."""
    tflops_grows = new.tflops_on(capacity) > old.tflops_on(capacity)
    return ResourceAmount(
        tflops_milli=new.tflops_milli if tflops_grows else 0,
        percent_milli=new.percent_milli if tflops_grows else 0,
        vram_bytes=new.vram_bytes if new.vram_bytes > old.vram_bytes else 0,
    )


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
    extra_tflops = fresh.effective_limit[0] - record.effective_limit[0]
    extra_vram = fresh.effective_limit[1] - record.effective_limit[1]
    # Only what grows is checked: shrinking a node already over its virtual capacity is fine.
    tflops = node.limit_tflops + extra_tflops if extra_tflops > 0 else 0
    vram = node.limit_vram + extra_vram if extra_vram > 0 else 0
    return limits_over_virtual(tflops, vram, virtual)
