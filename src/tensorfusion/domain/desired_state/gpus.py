"""The GPU status fields the allocator owns, as they are written back (scheduling.md §3,
api.md §2.4): `available`, `runningApps`, `allocatedPartitions`, `activeIsolationMode`,
`dynamicIsolationConflict`.

These writes are reports: no reader decides from them (the GPUNode figures, the node taint and
the metrics read the allocator's memory).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tensorfusion.domain.allocator.gpu_state import GPUState
from tensorfusion.domain.allocator.records import AllocationRecord
from tensorfusion.domain.desired_state.objects import Exactly
from tensorfusion.domain.object_views import Obj, status_of
from tensorfusion.domain.quantities import format_bytes, format_milli

__all__ = ["gpu_owned_status"]


def _running_apps(gpu: GPUState) -> list[dict[str, Any]]:
    apps = []
    for app in sorted(gpu.running_apps.values(), key=lambda a: (a.namespace, a.name)):
        pods = sorted(app.pods.values(), key=lambda p: (p.request.namespace, p.request.pod_name))
        entry: dict[str, Any] = {"namespace": app.namespace, "count": app.count}
        if app.name:
            entry["name"] = app.name
        entry["pods"] = [pod.to_json() for pod in pods]
        apps.append(entry)
    return apps


def _partitions(
    gpu: GPUState, records: Mapping[str, AllocationRecord], current: Obj | None, now: str
) -> dict[str, Any]:
    written = status_of(current).get("allocatedPartitions")
    written = written if isinstance(written, Mapping) else {}
    partitions: dict[str, Any] = {}
    for uid in sorted(gpu.partitions):
        template = gpu.partitions[uid]
        entry: dict[str, Any] = {"templateId": template, "podUid": uid}
        record = records.get(uid)
        if record is not None:
            entry["podName"] = record.request.pod_name
            entry["namespace"] = record.request.namespace
        before = written.get(uid)
        kept = before.get("allocatedAt") if isinstance(before, Mapping) else None
        same = isinstance(before, Mapping) and before.get("templateId") == template
        entry["allocatedAt"] = kept if same and kept else now
        partitions[uid] = entry
    return partitions


def gpu_owned_status(
    gpu: GPUState, records: Mapping[str, AllocationRecord], current: Obj | None, now: str
) -> dict[str, Any]:
    """The owned status fields of one GPU (for `merge_patch` with its current status).

    `current` is the GPU object as last read (partitions keep the `allocatedAt` written
    first); `now` (RFC 3339) stamps a partition seen for the first time.
    """
    return {
        "available": {
            "tflops": format_milli(gpu.available_tflops),
            "vram": format_bytes(gpu.available_vram),
        },
        "runningApps": _running_apps(gpu) or None,
        "allocatedPartitions": Exactly(_partitions(gpu, records, current, now)),
        "activeIsolationMode": gpu.active_isolation_mode or None,
        "dynamicIsolationConflict": True if gpu.dynamic_isolation_conflict else None,
    }
