"""Which GPUs another device plugin holds (deployment.md §9.4, progressive migration).

The kubelet says which device IDs it handed out, either through pod-resources `List` or, when
that API is unavailable, its `kubelet_internal_checkpoint` file. `assignments_from_pod_resources`
and `assignments_from_checkpoint` turn either into `DeviceAssignment`s; `device_plugin_usage`
applies the counting rules and returns `{gpu uuid: usedBy}`; `used_by_changes` says which GPU
objects to patch (back to `tensor-fusion` on release). `parse_checkpoint` reads the checkpoint
JSON, both `DeviceIDs` shapes (map NUMA node -> IDs, or a list in old kubelets).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from tensorfusion.domain.annotations import KEYS, USED_BY_TENSOR_FUSION_DEFAULT
from tensorfusion.domain.devices.kubelet_messages import ListPodResourcesResponse

__all__ = [
    "CHECKPOINT_FILE_NAME",
    "COUNTED_RESOURCE_PREFIXES",
    "MAX_DEVICE_ID_LENGTH",
    "USED_BY_NVIDIA_DEVICE_PLUGIN",
    "USED_BY_THIRD_PARTY_DEVICE_PLUGIN",
    "CheckpointEntry",
    "CheckpointError",
    "DeviceAssignment",
    "KubeletCheckpoint",
    "assignments_from_checkpoint",
    "assignments_from_pod_resources",
    "device_plugin_usage",
    "gpu_id_of",
    "parse_checkpoint",
    "used_by_changes",
]

CHECKPOINT_FILE_NAME: Final = "kubelet_internal_checkpoint"
COUNTED_RESOURCE_PREFIXES: Final = ("nvidia.com/gpu", "nvidia.com/mig")
MAX_DEVICE_ID_LENGTH: Final = 40  # "gpu-" + a 36-character UUID
USED_BY_NVIDIA_DEVICE_PLUGIN: Final = "nvidia-device-plugin"
USED_BY_THIRD_PARTY_DEVICE_PLUGIN: Final = "3rd-party-device-plugin"


class CheckpointError(ValueError):
    """A checkpoint file that is not what the kubelet writes; the message names file and field."""


@dataclass(frozen=True, slots=True)
class DeviceAssignment:
    """Device IDs of one resource the kubelet handed to one container."""

    pod: str  # `namespace/name` (pod-resources) or the pod UID (checkpoint)
    container: str
    resource_name: str
    device_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class CheckpointEntry:
    """One `Data.PodDeviceEntries[]` item (device IDs of all NUMA nodes, in node order)."""

    pod_uid: str
    container_name: str
    resource_name: str
    device_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class KubeletCheckpoint:
    """The device manager's checkpoint: allocations and devices registered per resource."""

    entries: tuple[CheckpointEntry, ...] = ()
    registered_devices: Mapping[str, tuple[str, ...]] = field(default_factory=dict)


def assignments_from_pod_resources(
    response: ListPodResourcesResponse,
) -> tuple[DeviceAssignment, ...]:
    """Flatten a pod-resources `List` answer."""
    return tuple(
        DeviceAssignment(
            f"{pod.namespace}/{pod.name}", container.name, devices.resource_name, devices.device_ids
        )
        for pod in response.pod_resources
        for container in pod.containers
        for devices in container.devices
    )


def assignments_from_checkpoint(checkpoint: KubeletCheckpoint) -> tuple[DeviceAssignment, ...]:
    """The checkpoint's allocations as assignments (pods named by UID)."""
    return tuple(
        DeviceAssignment(entry.pod_uid, entry.container_name, entry.resource_name, entry.device_ids)
        for entry in checkpoint.entries
    )


def gpu_id_of(device_id: str, mig_parents: Mapping[str, str] | None = None) -> tuple[str, str]:
    """(GPU uuid, usedBy) for one device ID another plugin handed out.

    Lower-cased, a `::<n>` replica suffix cut; a MIG device maps to its parent GPU through
    `mig_parents` (lower-cased MIG device ID -> parent GPU uuid; old-style
    `MIG-GPU-<uuid>/<gi>/<ci>` IDs name their parent themselves); an ID over 40 characters is a
    third-party plugin's, truncated to 40.
    """
    gpu_id = device_id.strip().lower()
    head, separator, replica = gpu_id.rpartition("::")
    if separator and replica.isdigit():
        gpu_id = head
    parents = {key.lower(): value for key, value in (mig_parents or {}).items()}
    if gpu_id in parents:
        return parents[gpu_id].lower(), USED_BY_NVIDIA_DEVICE_PLUGIN
    if gpu_id.startswith("mig-gpu-") and "/" in gpu_id:
        return gpu_id[len("mig-") : gpu_id.index("/")], USED_BY_NVIDIA_DEVICE_PLUGIN
    if len(gpu_id) > MAX_DEVICE_ID_LENGTH:
        return gpu_id[:MAX_DEVICE_ID_LENGTH], USED_BY_THIRD_PARTY_DEVICE_PLUGIN
    return gpu_id, USED_BY_NVIDIA_DEVICE_PLUGIN


def device_plugin_usage(
    assignments: Iterable[DeviceAssignment],
    *,
    extra_resource_prefixes: Iterable[str] = (),
    mig_parents: Mapping[str, str] | None = None,
    index_resource_prefix: str = KEYS.index_resource_prefix,
) -> dict[str, str]:
    """`{gpu uuid: usedBy}` for the GPUs other device plugins hold.

    Counted: resources prefixed `nvidia.com/gpu`, `nvidia.com/mig` or one of
    `extra_resource_prefixes` (ProviderConfig `devicePluginDetection.resourceNamePrefixes`);
    our own index resources never count. A GPU claimed both ways is the third party's.
    """
    prefixes = (*COUNTED_RESOURCE_PREFIXES, *(p for p in extra_resource_prefixes if p))
    usage: dict[str, str] = {}
    for assignment in assignments:
        name = assignment.resource_name
        if name.startswith(index_resource_prefix) or not name.startswith(prefixes):
            continue
        for device_id in assignment.device_ids:
            if not device_id.strip():
                continue
            gpu, used_by = gpu_id_of(device_id, mig_parents)
            if usage.get(gpu) != USED_BY_THIRD_PARTY_DEVICE_PLUGIN:
                usage[gpu] = used_by
    return usage


def used_by_changes(
    current: Mapping[str, str],
    usage: Mapping[str, str],
    tensor_fusion: str = USED_BY_TENSOR_FUSION_DEFAULT,
) -> dict[str, str]:
    """`{gpu uuid: new usedBy}` for the node's GPUs (`current`: uuid -> usedBy) that must change.

    A GPU in `usage` gets its plugin's name; any other goes back to `tensor-fusion`.
    """
    changes: dict[str, str] = {}
    for gpu, used_by in current.items():
        desired = usage.get(gpu.lower(), tensor_fusion)
        if used_by != desired:
            changes[gpu] = desired
    return changes


def parse_checkpoint(text: str | bytes, source: str = CHECKPOINT_FILE_NAME) -> KubeletCheckpoint:
    """Parse the kubelet device-manager checkpoint JSON; errors name `source` and the field."""
    try:
        document = json.loads(text)
    except (ValueError, UnicodeDecodeError) as error:
        raise CheckpointError(f"{source}: not JSON ({error})") from None
    data = _object(document, source, "")
    data = _object(data.get("Data"), source, "Data")
    entries_raw = data.get("PodDeviceEntries")
    entries_raw = [] if entries_raw is None else entries_raw
    if not isinstance(entries_raw, list):
        raise _error(source, "Data.PodDeviceEntries", "a list", entries_raw)
    entries = tuple(
        _entry(raw, source, f"Data.PodDeviceEntries[{position}]")
        for position, raw in enumerate(entries_raw)
    )
    registered_raw = data.get("RegisteredDevices")
    registered_raw = _object(
        {} if registered_raw is None else registered_raw, source, "Data.RegisteredDevices"
    )
    registered = {
        str(name): _strings(ids, source, f"Data.RegisteredDevices[{name!r}]")
        for name, ids in registered_raw.items()
    }
    return KubeletCheckpoint(entries, registered)


def _entry(raw: Any, source: str, where: str) -> CheckpointEntry:
    entry = _object(raw, source, where)
    texts = []
    for key in ("PodUID", "ContainerName", "ResourceName"):
        value = entry.get(key, "")
        if not isinstance(value, str):
            raise _error(source, f"{where}.{key}", "a string", value)
        texts.append(value)
    return CheckpointEntry(
        texts[0], texts[1], texts[2], _device_ids(entry.get("DeviceIDs"), source, where)
    )


def _device_ids(raw: Any, source: str, where: str) -> tuple[str, ...]:
    where = f"{where}.DeviceIDs"
    if raw is None or isinstance(raw, list):
        return _strings(raw, source, where)
    if not isinstance(raw, dict):
        raise _error(source, where, "a list or an object of lists per NUMA node", raw)
    ids: list[str] = []
    for node in sorted(raw, key=lambda key: _numa_node(key, source, where)):
        ids.extend(_strings(raw[node], source, f"{where}[{node!r}]"))
    return tuple(ids)


def _numa_node(key: str, source: str, where: str) -> int:
    try:
        return int(key)
    except ValueError:
        raise _error(source, where, "NUMA node numbers as keys", key) from None


def _strings(raw: Any, source: str, where: str) -> tuple[str, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list) or not all(isinstance(item, str) for item in raw):
        raise _error(source, where, "a list of strings", raw)
    return tuple(raw)


def _object(raw: Any, source: str, where: str) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise _error(source, where or "(top level)", "an object", raw)
    return raw


def _error(source: str, where: str, expected: str, value: Any) -> CheckpointError:
    shown = json.dumps(value)
    if len(shown) > 80:
        shown = shown[:77] + "..."
    return CheckpointError(f"{source}: {where}: expected {expected}, got {shown}")
