"""Which GPUs a container gets when the kubelet allocates its index resource (deployment.md
§9, api.md §6): `index_<h>` with n devices is pod index p = n + 8 h; the worker pod on this
node that carries p (not ended, not being deleted) names its GPUs in `gpu-ids`, which the
container sees as `NVIDIA_VISIBLE_DEVICES` (device uuids in their native case)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from tensorfusion.domain.annotations import KEYS, IndexResourceError, decode_index
from tensorfusion.domain.annotations import pod_index_from_containers as pod_index_of
from tensorfusion.domain.object_views import (
    annotations_of,
    deletion_timestamp_of,
    name_of,
    namespace_of,
)

__all__ = ["VISIBLE_DEVICES", "WorkerAllocation", "WorkerAllocationError", "allocate_worker"]

VISIBLE_DEVICES: Final = "NVIDIA_VISIBLE_DEVICES"


class WorkerAllocationError(ValueError):
    """No worker pod, or no known GPU, for the devices the kubelet allocates."""


@dataclass(frozen=True, slots=True)
class WorkerAllocation:
    """The worker a container belongs to and the environment it gets."""

    namespace: str
    pod: str
    gpus: tuple[str, ...]
    envs: Mapping[str, str]


def _live(pod: Mapping[str, Any]) -> bool:
    phase = (pod.get("status") or {}).get("phase")
    return not deletion_timestamp_of(pod) and phase not in ("Succeeded", "Failed")


def allocate_worker(
    resource_name: str,
    device_count: int,
    pods: Iterable[Mapping[str, Any]],
    native_uuids: Mapping[str, str],
) -> WorkerAllocation:
    """The allocation of `device_count` devices of `resource_name` among the node's `pods`;
    `native_uuids` maps a GPU object name to its device uuid."""
    try:
        index = decode_index(resource_name, device_count, KEYS)
    except IndexResourceError as error:
        raise WorkerAllocationError(str(error)) from None
    holders = []
    for pod in pods:
        try:
            if _live(pod) and pod_index_of(pod, KEYS) == index:
                holders.append(pod)
        except IndexResourceError:
            continue
    if not holders:
        raise WorkerAllocationError(f"no worker pod with index {index} on this node")
    pending = [pod for pod in holders if (pod.get("status") or {}).get("phase") == "Pending"]
    pod = (pending or holders)[0]
    text = str(annotations_of(pod).get(KEYS.gpu_ids) or "")
    gpus = tuple(name.strip() for name in text.split(",") if name.strip())
    name = f"{namespace_of(pod)}/{name_of(pod)}"
    if not gpus:
        raise WorkerAllocationError(f"worker pod {name} (index {index}) has no {KEYS.gpu_ids}")
    unknown = [gpu for gpu in gpus if gpu not in native_uuids]
    if unknown:
        raise WorkerAllocationError(
            f"worker pod {name} names GPUs this node does not have: {', '.join(unknown)}"
        )
    visible = ",".join(native_uuids[gpu] for gpu in gpus)
    return WorkerAllocation(namespace_of(pod), name_of(pod), gpus, {VISIBLE_DEVICES: visible})
