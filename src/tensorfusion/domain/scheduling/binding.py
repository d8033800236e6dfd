"""The extender's `bind` for a TF worker (scheduling.md §12 "Bind", §8 `container-gpus`).

`reserve_for_bind` runs step 4 under the allocator lock: it keeps a committed record, re-validates
the pod's assumption on the node, or evaluates the node alone and assumes; it returns the pod
patch of step 5 (`gpu-ids`, `index`, `effective-hard-sm-percent`, `container-gpus`; a bind key
left by an earlier bind whose Binding was never posted is removed). The shell then patches the
pod, calls `Allocator.commit`, posts the Binding, and on failure releases the record and applies
`rollback_patch`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from tensorfusion.domain.allocation_request import AllocationRequest
from tensorfusion.domain.allocator.allocation_seal import seal
from tensorfusion.domain.allocator.allocator import Allocator
from tensorfusion.domain.allocator.records import AllocationRecord, RecordState
from tensorfusion.domain.annotations import KEYS, IndexResourceError, pod_index_from_containers
from tensorfusion.domain.json_patch import pointer
from tensorfusion.domain.object_views import annotations_of, metadata_of
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
    "bind_patch",
    "container_gpus",
    "effective_hard_sm_percent",
    "pod_index_of",
    "reserve_for_bind",
    "rollback_patch",
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
    """What `bind` does next for one pod.

    `already_committed`: the pod's record is committed on the node (a retried bind): post the
    Binding only. Otherwise patch the pod with `patch`, then commit the record.
    """

    record: AllocationRecord
    already_committed: bool
    patch: tuple[dict[str, Any], ...]
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
            return BindPlan(record, True, ())
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
    patch, events = bind_patch(record, index, pod, allocator)
    return BindPlan(record, False, patch, events)


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
    limit = request.limit.tflops_milli
    if request.isolation is not IsolationMode.HARD or not limit or first_capacity_tflops <= 0:
        return None
    percent = -(-limit * 100 // first_capacity_tflops)
    return min(max(percent, 1), 100)


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


def bind_patch(
    record: AllocationRecord,
    index: int,
    pod: Mapping[str, Any],
    allocator: Allocator,
) -> tuple[tuple[dict[str, Any], ...], tuple[BindEvent, ...]]:
    """The JSON patch of §12 step 5 and the events it raises."""
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
    return _annotation_patch(pod, values, _BIND_KEYS), (() if event is None else (event,))


def rollback_patch(pod: Mapping[str, Any]) -> tuple[dict[str, Any], ...]:
    """Best-effort removal of what `bind_patch` wrote, for the keys the pod now carries."""
    annotations = annotations_of(pod)
    return tuple(
        {"op": "remove", "path": pointer("metadata", "annotations", key)}
        for key in _BIND_KEYS
        if key in annotations
    )


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


def _annotation_patch(
    pod: Mapping[str, Any], values: Mapping[str, str], bind_keys: tuple[str, ...]
) -> tuple[dict[str, Any], ...]:
    """Sets `values`, and removes the bind keys the pod carries that `values` does not set (left
    by an earlier bind that posted no Binding), so the pod ends with exactly this bind's."""
    annotations = metadata_of(pod).get("annotations")
    if annotations is None:
        return ({"op": "add", "path": "/metadata/annotations", "value": dict(values)},)
    stale = tuple(
        {"op": "remove", "path": pointer("metadata", "annotations", key)}
        for key in bind_keys
        if key in annotations and key not in values
    )
    return stale + tuple(
        {"op": "add", "path": pointer("metadata", "annotations", key), "value": value}
        for key, value in values.items()
    )
