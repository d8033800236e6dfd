"""TensorFusionCluster status: sums over its pools, and its phase (api.md §2.1).

`Running` when the cluster has pools and every pool it wants exists and is `Running`;
`Destroying` while it is deleted; `Pending` otherwise. Conditions never change the phase: the
controller owns `Ready` and `GPUPoolReady`, and leaves the others (`TimeSeriesDatabaseReady`,
`CloudVendorConnectionReady`) to their writers.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from tensorfusion.domain.allocator.capacity_figures import CapacityTotals
from tensorfusion.domain.desired_state.pools import ready_condition, replace_conditions
from tensorfusion.domain.model.meta import Condition
from tensorfusion.domain.model.pool import PoolPhase
from tensorfusion.domain.model.registry import to_wire
from tensorfusion.domain.object_views import Obj, is_deleting, status_of
from tensorfusion.domain.quantities import QuantityError, parse_quantity

__all__ = ["GPU_POOL_READY", "cluster_phase", "cluster_status", "status_totals"]

GPU_POOL_READY: Final = "GPUPoolReady"
_TFLOPS_FIELDS: Final = {
    "total_tflops": "totalTFlops",
    "available_tflops": "availableTFlops",
    "virtual_tflops": "virtualTFlops",
    "virtual_available_tflops": "virtualAvailableTFlops",
}
_VRAM_FIELDS: Final = {
    "total_vram": "totalVRAM",
    "available_vram": "availableVRAM",
    "virtual_vram": "virtualVRAM",
    "virtual_available_vram": "virtualAvailableVRAM",
}


def _amount(status: Mapping[str, Any], key: str, milli: bool) -> int:
    text = status.get(key)
    if text is None:
        return 0
    try:
        quantity = parse_quantity(str(text))
    except QuantityError:
        return 0
    return quantity.milli() if milli else quantity.ceil()


def status_totals(obj: Obj | None) -> CapacityTotals:
    """The capacity figures of a GPUNode, GPUPool or cluster status (absent ones are 0)."""
    status = status_of(obj)
    values = {name: _amount(status, key, True) for name, key in _TFLOPS_FIELDS.items()}
    values.update({name: _amount(status, key, False) for name, key in _VRAM_FIELDS.items()})
    return CapacityTotals(**values)


def _int(status: Mapping[str, Any], key: str) -> int:
    value = status.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def cluster_phase(cluster: Obj, pools: Mapping[str, Obj | None]) -> PoolPhase:
    """The phase from the wanted pools (None: not created yet)."""
    if is_deleting(cluster):
        return PoolPhase.DESTROYING
    if pools and all(
        pool is not None and status_of(pool).get("phase") == PoolPhase.RUNNING.value
        for pool in pools.values()
    ):
        return PoolPhase.RUNNING
    return PoolPhase.PENDING


def cluster_status(cluster: Obj, pools: Mapping[str, Obj | None], now: str) -> dict[str, Any]:
    """The status fields the controller owns (for `merge_patch` with the current status).

    `pools` maps the name of every pool the cluster wants to its object (None when missing).
    """
    phase = cluster_phase(cluster, pools)
    totals = CapacityTotals()
    nodes = gpus = 0
    ready: list[str] = []
    not_ready: list[str] = []
    for name in sorted(pools):
        pool = pools[name]
        totals += status_totals(pool)
        status = status_of(pool)
        nodes += _int(status, "totalNodes")
        gpus += _int(status, "totalGPUs")
        if pool is not None and status.get("phase") == PoolPhase.RUNNING.value:
            ready.append(name)
        else:
            not_ready.append(name)
    if not pools:
        pool_condition = Condition(
            type=GPU_POOL_READY, status="False", reason="NoPools",
            message="spec.gpuPools lists no pool",
        )  # fmt: skip
    elif not_ready:
        pool_condition = Condition(
            type=GPU_POOL_READY, status="False", reason="PoolsNotReady",
            message=f"not Running: {', '.join(not_ready)}",
        )  # fmt: skip
    else:
        pool_condition = Condition(
            type=GPU_POOL_READY, status="True", reason="PoolsRunning",
            message=f"all {len(ready)} pools are Running",
        )  # fmt: skip
    if phase is PoolPhase.RUNNING:
        ready_now = ready_condition(True, "PoolsRunning", "every pool is Running")
    elif phase is PoolPhase.DESTROYING:
        ready_now = ready_condition(False, "Destroying", "the cluster is being deleted")
    else:
        ready_now = ready_condition(
            False, pool_condition.reason or "", pool_condition.message or ""
        )
    return {
        "phase": phase.value,
        "totalPools": len(pools),
        "totalNodes": nodes,
        "totalGPUs": gpus,
        **to_wire(totals.to_status()),
        "readyGPUPools": ready,
        "notReadyGPUPools": not_ready,
        "conditions": replace_conditions(cluster, [ready_now, pool_condition], now),
    }
