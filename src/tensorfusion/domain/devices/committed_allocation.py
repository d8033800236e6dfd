"""Whether the leader committed a worker pod's GPUs (api.md §6, hypervisor.md): a pod's
`gpu-ids` annotation is only a claim; the allocation is real when every GPU it names lists the
pod's uid in `status.runningApps[].pods[]`, which only the leader's status write-back writes.

The kubelet's Allocate names no pod, so two live Pending pods on the node carrying the same
index make the answer ambiguous: `index_rivals` counts them and the agent refuses both.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from tensorfusion.domain.annotations import KEYS, IndexResourceError, decode_index
from tensorfusion.domain.annotations import pod_index_from_containers as pod_index_of
from tensorfusion.domain.object_views import deletion_timestamp_of, name_of, namespace_of

__all__ = ["index_rivals", "running_pod_entries", "running_pod_uids", "uncommitted_gpus"]


def running_pod_entries(gpu: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    """The entries of a GPU object's `status.runningApps[].pods[]` (malformed parts skipped)."""
    status = gpu.get("status")
    apps = status.get("runningApps") if isinstance(status, Mapping) else None
    for app in apps if isinstance(apps, list) else ():
        pods = app.get("pods") if isinstance(app, Mapping) else None
        for pod in pods if isinstance(pods, list) else ():
            if isinstance(pod, Mapping):
                yield pod


def running_pod_uids(gpu: Mapping[str, Any]) -> frozenset[str]:
    """The pod uids a GPU object's `status.runningApps[].pods[]` lists."""
    uids = (entry.get("uid") for entry in running_pod_entries(gpu))
    return frozenset(uid for uid in uids if isinstance(uid, str) and uid)


def uncommitted_gpus(
    pod_uid: str, gpus: Sequence[str], gpu_objects: Mapping[str, Mapping[str, Any]]
) -> tuple[str, ...]:
    """The GPUs of `gpus` whose object (by name) is missing or does not list `pod_uid`;
    every GPU is uncommitted for a pod without a uid."""
    if not pod_uid:
        return tuple(gpus)
    return tuple(
        gpu
        for gpu in gpus
        if gpu not in gpu_objects or pod_uid not in running_pod_uids(gpu_objects[gpu])
    )


def index_rivals(
    resource_name: str, device_count: int, pods: Iterable[Mapping[str, Any]]
) -> tuple[str, ...]:
    """`namespace/name` of the live Pending pods carrying the index that `device_count` devices
    of `resource_name` encode (empty when the index is malformed)."""
    try:
        index = decode_index(resource_name, device_count, KEYS)
    except IndexResourceError:
        return ()
    found = []
    for pod in pods:
        if deletion_timestamp_of(pod) or (pod.get("status") or {}).get("phase") != "Pending":
            continue
        try:
            if pod_index_of(pod, KEYS) == index:
                found.append(f"{namespace_of(pod)}/{name_of(pod)}")
        except IndexResourceError:
            continue
    return tuple(found)
