"""The extender's `bind` for a TF worker (scheduling.md §12 "Bind", §8 `container-gpus`).

`reserve_for_bind` runs step 4 under the allocator lock: it keeps a committed record, re-validates
the pod's assumption on the node, or evaluates the node alone and assumes; it returns the
annotations of step 5 (`gpu-ids`, `index`, `effective-hard-sm-percent`, `container-gpus`,
`allocation-seal`). They travel in the Binding: the API server copies a Binding's annotations
onto the pod in the same write that sets `nodeName`, so a pod carries its GPUs exactly when it
is bound, and a failed Binding leaves nothing to take back. A bind key an earlier bind left that
this one does not set (a Binding cannot remove one) is removed first by `cleanup`, a JSON patch
that is empty unless such a key is there. The shell then calls `Allocator.commit`, posts the
Binding, and on failure releases the record.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from tensorfusion.domain.allocation_request import AllocationRequest, sm_percent
from tensorfusion.domain.allocator.allocation_seal import seal
from tensorfusion.domain.allocator.allocator import Allocator
from tensorfusion.domain.allocator.records import AllocationRecord, RecordState
from tensorfusion.domain.annotations import KEYS, IndexResourceError, pod_index_from_containers
from tensorfusion.domain.json_patch import pointer
from tensorfusion.domain.object_views import annotations_of
from tensorfusion.domain.scheduling.decision import NativeView, decide
from tensorfusion.domain.scheduling.filter_chain import node_health_failure
from tensorfusion.domain.scheduling.gpu_filters import revalidation_failure
from tensorfusion.domain.scheduling.request_context import RequestContext
from tensorfusion.domain.scheduling.scheduler_config import SchedulingProfile
from tensorfusion.domain.vocabulary import IsolationMode

__all__ = [
    "CONTAINER_GPU_ALLOCATION_FAILED",
    "GPU_DEVICE_ALLOCATED",
    "GPU_DEVICE_ALLOCATED_FAILED",
    "BindEvent",
    "BindPlan",
    "BindRefusedError",
    "allocated_event",
    "bind_annotations",
    "container_gpus",
    "effective_hard_sm_percent",
    "pod_index_of",
    "reserve_for_bind",
]

GPU_DEVICE_ALLOCATED: Final = "GPUDeviceAllocated"
GPU_DEVICE_ALLOCATED_FAILED: Final = "GPUDeviceAllocatedFailed"
CONTAINER_GPU_ALLOCATION_FAILED: Final = "ContainerGPUAllocationFailed"
NO_INDEX_MESSAGE: Final = "pod carries no valid tensor-fusion.ai/index_* resource"


class BindRefusedError(ValueError):
    """The bind cannot go on; the message is what the extender returns as `Error`."""


@dataclass(frozen=True, slots=True)
class BindEvent:
    """An Event the shell records on the pod."""

    type: str
    reason: str
    message: str


@dataclass(frozen=True, slots=True)
class BindPlan:
    """What `bind` does next for one pod: apply `cleanup` when not empty, commit the record
    (unless `already_committed`: a retried bind), then post the Binding with `annotations`.
    `events` are recorded once the record is committed."""

    record: AllocationRecord
    already_committed: bool
    annotations: Mapping[str, str]
    cleanup: tuple[dict[str, Any], ...] = ()
    events: tuple[BindEvent, ...] = ()


def pod_index_of(pod: Mapping[str, Any]) -> int:
    """The pod index p from the pod's `index_*` limit (§12 step 3); BindRefusedError if none."""
    try:
        index = pod_index_from_containers(pod, KEYS)
    except IndexResourceError as error:
        raise BindRefusedError(f"{NO_INDEX_MESSAGE}: {error}") from None
    if index is None:
        raise BindRefusedError(NO_INDEX_MESSAGE)
    return index


def reserve_for_bind(
    allocator: Allocator,
    request: AllocationRequest,
    *,
    node: str,
    pod: Mapping[str, Any],
    native: NativeView,
    profile: SchedulingProfile,
    now: float,
) -> BindPlan:
    """Step 4 of §12 for `request` on `node`; the allocator holds an assumption afterwards.

    Raises BindRefusedError with the stage message when the node no longer fits (the pod's
    assumption, if any, is released first).
    """
    index = pod_index_of(pod)
    uid = request.pod_uid
    record = allocator.records.get(uid)
    if record is not None and record.state is RecordState.COMMITTED:
        if record.node == node:
            values, cleanup, _ = bind_annotations(record, index, pod, allocator)
            return BindPlan(record, True, values, cleanup)
        allocator.release(uid)
        record = None
    if record is not None and record.node == node:
        problem = _revalidation_problem(allocator, record, profile)
        if problem is not None:
            allocator.release(uid)
            raise BindRefusedError(problem)
    else:
        allocator.release(uid)
        decision = decide(allocator, request, native, [node], profile=profile)
        if decision.node is None:
            raise BindRefusedError(decision.rejection_message(node))
        record = allocator.assume(request, node, decision.gpus, now)
    values, cleanup, events = bind_annotations(record, index, pod, allocator)
    return BindPlan(record, False, values, cleanup, events)


def _revalidation_problem(
    allocator: Allocator, record: AllocationRecord, profile: SchedulingProfile
) -> str | None:
    ctx = RequestContext.build(allocator, record.request, profile)
    for name in record.gpus:
        gpu = allocator.gpus.get(name)
        if gpu is None:
            return f"GPU {name} no longer exists"
        if gpu.node != record.node:
            return f"GPU {name} moved to node {gpu.node}"
        problem = revalidation_failure(ctx, gpu)
        if problem is not None:
            return problem
    node = allocator.nodes.get(record.node)
    if node is None:
        return f"node {record.node} has no GPU"
    health = node_health_failure(ctx, node)
    return None if health is None else f"{health[0]}: {health[1]}"


def effective_hard_sm_percent(request: AllocationRequest, first_capacity_tflops: int) -> int | None:
    """`clamp(ceil(limit / capacity of the first GPU × 100), 1, 100)` for a hard pod with an
    absolute TFLOPs limit; None otherwise."""
    if request.isolation is not IsolationMode.HARD:
        return None
    return sm_percent(request.limit.tflops_milli, first_capacity_tflops) or None


def container_gpus(
    request: AllocationRequest, gpus: Sequence[str]
) -> tuple[dict[str, list[str]] | None, BindEvent | None]:
    """`container-gpus` (§8): containers by name, each taking its next n GPUs in order.

    None without `container-gpu-count`; a count that does not add up to the GPUs gives no
    annotation and a Warning event `ContainerGPUAllocationFailed`.
    """
    counts = sorted(request.container_gpu_count)
    if not counts:
        return None, None
    wanted = sum(n for _, n in counts)
    if wanted != len(gpus) or any(n < 0 for _, n in counts):
        message = (
            f"container-gpu-count asks {wanted} GPUs "
            f"({', '.join(f'{c}: {n}' for c, n in counts)}), the pod got {len(gpus)}"
        )
        return None, BindEvent("Warning", CONTAINER_GPU_ALLOCATION_FAILED, message)
    split: dict[str, list[str]] = {}
    start = 0
    for container, n in counts:
        split[container] = list(gpus[start : start + n])
        start += n
    return split, None


def bind_annotations(
    record: AllocationRecord,
    index: int,
    pod: Mapping[str, Any],
    allocator: Allocator,
) -> tuple[dict[str, str], tuple[dict[str, Any], ...], tuple[BindEvent, ...]]:
    """The annotations of §12 step 5, the patch removing the stale bind keys of `pod`, and the
    events the bind raises."""
    values: dict[str, str] = {KEYS.gpu_ids: ",".join(record.gpus), KEYS.index: str(index)}
    if allocator.seal_key:
        values[KEYS.allocation_seal] = seal(
            allocator.seal_key, uid=record.request.pod_uid, node=record.node, gpus=record.gpus
        )
    first = allocator.gpus.get(record.gpus[0]) if record.gpus else None
    percent = effective_hard_sm_percent(record.request, first.capacity_tflops if first else 0)
    if percent is not None:
        values[KEYS.effective_hard_sm_percent] = str(percent)
    split, event = container_gpus(record.request, record.gpus)
    if split is not None:
        values[KEYS.container_gpus] = json.dumps(split, separators=(",", ":"))
    annotations = annotations_of(pod)
    cleanup = tuple(
        {"op": "remove", "path": pointer("metadata", "annotations", key)}
        for key in _BIND_KEYS
        if key in annotations and key not in values
    )
    return values, cleanup, (() if event is None else (event,))


_BIND_KEYS: Final = (KEYS.gpu_ids, KEYS.index, KEYS.effective_hard_sm_percent,
                     KEYS.container_gpus, KEYS.allocation_seal)  # fmt: skip
"""The annotations a bind writes."""


def allocated_event(record: AllocationRecord) -> BindEvent:
    """The Normal event recorded once the Binding took effect."""
    return BindEvent(
        "Normal",
        GPU_DEVICE_ALLOCATED,
        f"Allocated {len(record.gpus)} GPU device IDs to Pod: {','.join(record.gpus)}",
    )
