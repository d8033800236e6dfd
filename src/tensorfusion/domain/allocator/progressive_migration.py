"""Progressive migration from the NVIDIA device plugin (scheduling.md §11).

Native-GPU pods go only to nodes without TensorFusion workers, committed or assumed; a node
whose GPUs hold TF allocations carries `tensor-fusion.ai/used-by=tensor-fusion:PreferNoSchedule`
so that the device plugin's pods prefer other nodes. Both rules read the allocator's memory.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from tensorfusion.domain.allocator.allocator import Allocator
from tensorfusion.domain.allocator.records import NodeState
from tensorfusion.domain.annotations import KEYS

__all__ = [
    "NODE_HOSTS_WORKERS",
    "SCHEDULE_WITH_NATIVE_GPU",
    "native_gpu_pod_rejection",
    "progressive_taint",
    "taints_with_progressive_taint",
    "wants_progressive_taint",
]

NODE_HOSTS_WORKERS: Final = "node hosts TensorFusion workers"
SCHEDULE_WITH_NATIVE_GPU: Final = "ScheduleWithNativeGPU"
"""Event reason on a native-GPU pod bound through the extender."""


def native_gpu_pod_rejection(allocator: Allocator, node: str) -> str | None:
    """Why a native-GPU pod may not go to `node` (a TF worker is committed or assumed there),
    or None; nodes without GPU objects always pass."""
    state = allocator.nodes.get(node)
    if state is not None and state.workers > 0:
        return NODE_HOSTS_WORKERS
    return None


def wants_progressive_taint(node: NodeState) -> bool:
    """Whether any GPU of the node, missing ones included (their allocations still hold), has
    committed available below capacity (TFLOPs or VRAM)."""
    return any(
        g.available_tflops < g.capacity_tflops or g.available_vram < g.capacity_vram
        for g in (*node.gpus, *node.missing_gpus)
    )


def progressive_taint() -> dict[str, str]:
    """The taint (`used-by=tensor-fusion:PreferNoSchedule`) as it appears in a Node spec."""
    return {"key": KEYS.used_by, "value": KEYS.used_by_value, "effect": KEYS.taint_effect}


def taints_with_progressive_taint(
    taints: Sequence[Mapping[str, Any]], wanted: bool
) -> list[dict[str, Any]] | None:
    """The Node's taints with ours added or removed; None when nothing changes."""
    ours = progressive_taint()

    def is_ours(taint: Mapping[str, Any]) -> bool:
        return taint.get("key") == ours["key"] and taint.get("effect") == ours["effect"]

    present = [dict(t) for t in taints if is_ours(t)]
    if wanted and present == [ours]:
        return None
    if not wanted and not present:
        return None
    kept = [dict(t) for t in taints if not is_ours(t)]
    return [*kept, ours] if wanted else kept
