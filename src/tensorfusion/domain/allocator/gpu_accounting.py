"""How one allocation charges its GPUs: the record's figures, runningApps and the isolation lock.

Pure functions over `GPUState` and `AllocationRecord`, called by the allocator with sign 1 to
add an allocation and −1 to remove it (scheduling.md §5, §5.1, §5.2, §9).
"""

from __future__ import annotations

from collections.abc import Sequence

from tensorfusion.domain.allocation_request import AllocationRequest
from tensorfusion.domain.allocator.gpu_state import (
    LOCKABLE_MODES,
    WHOLE_CARD_MODES,
    GPUState,
    RunningPod,
    RunningWorkload,
)
from tensorfusion.domain.allocator.oversubscription import effective_limit, shared_effective_limit
from tensorfusion.domain.allocator.quota import charge_for
from tensorfusion.domain.allocator.records import AllocationRecord, RecordState
from tensorfusion.domain.vocabulary import IsolationMode, IsolationPolicy

__all__ = ["make_record", "update_isolation_lock", "update_running_apps"]


def make_record(
    request: AllocationRequest,
    node_name: str,
    gpus: Sequence[GPUState],
    now: float,
    ttl: float | None,
    state: RecordState = RecordState.ASSUMED,
    fallback_capacity: int = 0,
) -> AllocationRecord:
    """A record of `request` on `gpus` with what it charges each GPU, the quota and the node.

    With fewer GPUs than the request's count (GPUs skipped at recovery), the quota is still
    charged for every GPU, converting percent values with the first GPU's capacity, else
    `fallback_capacity`.
    """
    if request.isolation in WHOLE_CARD_MODES:
        charged = tuple((g.capacity_tflops, g.capacity_vram) for g in gpus)
        limit = shared_effective_limit(list(charged))
    else:
        charged = tuple(
            (request.request.tflops_on(g.capacity_tflops), request.request.vram_bytes) for g in gpus
        )
        limit = effective_limit(request, [g.capacity_tflops for g in gpus])
    capacities = [g.capacity_tflops for g in gpus]
    padding = capacities[0] if capacities else fallback_capacity
    capacities += [padding] * (request.count - len(capacities))
    return AllocationRecord(
        request=request,
        node=node_name,
        gpus=tuple(g.name for g in gpus),
        state=state,
        since=now,
        expires_at=None if ttl is None else now + ttl,
        charged=charged,
        quota=charge_for(request, capacities),
        effective_limit=limit,
    )


def update_running_apps(gpu: GPUState, request: AllocationRequest, sign: int) -> None:
    """Add (1) or remove (−1) the pod under its (workload, namespace) app entry."""
    key = (request.workload, request.namespace)
    if sign > 0:
        app = gpu.running_apps.get(key)
        if app is None:
            app = gpu.running_apps[key] = RunningWorkload(request.workload, request.namespace)
        app.pods[request.pod_uid] = RunningPod(request)
        return
    app = gpu.running_apps.get(key)
    if app is not None:
        app.pods.pop(request.pod_uid, None)
        if not app.pods:
            del gpu.running_apps[key]


def update_isolation_lock(
    gpu: GPUState, uid: str, request: AllocationRequest, sign: int, policy: IsolationPolicy
) -> None:
    """Holders, whole-card holders, partitions and, under the Dynamic policy, the mode lock."""
    mode = request.isolation
    if sign > 0:
        gpu.holders[uid] = mode
        gpu.whole_holders += mode in WHOLE_CARD_MODES
        if mode is IsolationMode.PARTITIONED:
            gpu.partitions[uid] = request.partition_template_id or ""
    else:
        held = gpu.holders.pop(uid, None)
        gpu.whole_holders -= held in WHOLE_CARD_MODES
        gpu.partitions.pop(uid, None)
    if policy is not IsolationPolicy.DYNAMIC:
        return
    modes = set(gpu.holders.values())
    if len(modes) > 1:
        gpu.dynamic_isolation_conflict = True
        gpu.active_isolation_mode = ""
    else:
        gpu.dynamic_isolation_conflict = False
        held_mode = next(iter(modes)) if modes else None
        # A partitioned holder takes the whole card but is no mode the lock can show.
        gpu.active_isolation_mode = held_mode.value if held_mode in LOCKABLE_MODES else ""
