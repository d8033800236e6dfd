"""The GPU and GPUNode objects a node agent writes (deployment.md §9.2, §9.3), as pure functions
of what it discovered and what the API server holds.

`gpu_metadata` and `gpu_status_patch` give the GPU object of one device: name = lower-cased
uuid, labels `managed-by` and `gpupool`, annotation `last-sync`, controller owner the GPUNode;
status: capacity, identity, node selector, topology, NVLink, isolation; `available` only
initialised (unset, or all zero with no running apps or partitions), `usedBy: tensor-fusion`
and phase Pending only when empty (phase also from Unknown). The agent never writes Running:
the controller decides that. `vanished_patch` handles a GPU no longer discovered: None means
delete it (idle), else the patch that marks it `Unknown` with `gpu-missing-since`.
`gpu_node_status_patch` is the GPUNode status of the node: totals, managed GPUs, node facts and
the heartbeat.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from tensorfusion.domain.annotations import KEYS
from tensorfusion.domain.devices.inventory import DeviceInfo, Inventory
from tensorfusion.domain.object_views import annotations_of
from tensorfusion.domain.quantities import format_bytes, format_milli, parse_quantity

__all__ = [
    "AGENT_DEGRADED",
    "AGENT_RUNNING",
    "AgentIdentity",
    "gpu_metadata",
    "gpu_name",
    "gpu_node_status_patch",
    "gpu_status_patch",
    "is_idle",
    "topology_peers",
    "vanished_patch",
]

AGENT_RUNNING: Final = "Running"
AGENT_DEGRADED: Final = "Degraded"
_API_VERSION: Final = "tensor-fusion.ai/v1"
_HOSTNAME: Final = "kubernetes.io/hostname"
_MIB: Final = 1 << 20


@dataclass(frozen=True, slots=True)
class AgentIdentity:
    """Who writes: the node, its pool, its GPUNode's UID, and the isolation settings of §10."""

    node: str
    pool: str
    gpu_node_uid: str
    isolation_policy: str | None = None
    isolation_mode: str = "soft"


def gpu_name(uuid: str) -> str:
    """The GPU object name of a device: its uuid, lower-cased."""
    return uuid.lower()


def gpu_metadata(identity: AgentIdentity, device: DeviceInfo, now_rfc3339: str) -> dict[str, Any]:
    """Labels, the last-sync annotation and the GPUNode as controller owner."""
    return {
        "name": gpu_name(device.uuid),
        "labels": {KEYS.managed_by: identity.node, KEYS.gpupool: identity.pool},
        "annotations": {KEYS.last_sync: now_rfc3339},
        "ownerReferences": [{
            "apiVersion": _API_VERSION, "kind": "GPUNode", "name": identity.node,
            "uid": identity.gpu_node_uid, "controller": True, "blockOwnerDeletion": True,
        }],
    }  # fmt: skip


def _zero(capacity: Mapping[str, Any] | None) -> bool:
    if not capacity:
        return True
    try:
        return all(parse_quantity(str(v)).value == 0 for v in capacity.values() if v is not None)
    except ValueError:
        return True


def is_idle(status: Mapping[str, Any] | None) -> bool:
    """No running apps and no allocated partitions."""
    status = status or {}
    return not status.get("runningApps") and not status.get("allocatedPartitions")


def topology_peers(device: DeviceInfo, devices: Sequence[DeviceInfo]) -> list[dict[str, Any]]:
    """The links to the node's other GPUs: tier 0 NVLink, 1 same NUMA node, 2 across NUMA
    nodes, 3 unknown."""
    by_bus = {d.pci_bus_id.lower(): d for d in devices if d.pci_bus_id}
    nvlinked = {
        gpu_name(by_bus[link.peer_pci_bus_id.lower()].uuid): link
        for link in device.nvlinks
        if link.peer_pci_bus_id.lower() in by_bus
    }
    peers: list[dict[str, Any]] = []
    for other in devices:
        if other.uuid == device.uuid:
            continue
        name = gpu_name(other.uuid)
        link = nvlinked.get(name)
        if link is not None:
            peers.append({"peerGPUUUID": name, "tier": 0, "linkType": "NVLink",
                          "bandwidth": link.bandwidth_mb_per_s * _MIB})  # fmt: skip
        elif device.numa_node < 0 or other.numa_node < 0:
            peers.append({"peerGPUUUID": name, "tier": 3, "linkType": "Unknown"})
        elif device.numa_node == other.numa_node:
            peers.append({"peerGPUUUID": name, "tier": 1, "linkType": "PCIe"})
        else:
            peers.append({"peerGPUUUID": name, "tier": 2, "linkType": "SMP"})
    return peers


def _nvlink(device: DeviceInfo, devices: Sequence[DeviceInfo]) -> dict[str, Any] | None:
    if not device.nvlinks:
        return None
    by_bus = {d.pci_bus_id.lower(): gpu_name(d.uuid) for d in devices if d.pci_bus_id}
    peers = [{"peerUUID": by_bus.get(link.peer_pci_bus_id.lower(), link.peer_pci_bus_id),
              "linkCount": link.links, "linkVersion": link.version,
              "bandwidthMBps": link.bandwidth_mb_per_s} for link in device.nvlinks]  # fmt: skip
    return {
        "peerCount": len(peers),
        "totalLinkCount": sum(link.links for link in device.nvlinks),
        "totalBandwidthMBps": sum(link.bandwidth_mb_per_s for link in device.nvlinks),
        "peers": peers,
    }


def gpu_status_patch(
    identity: AgentIdentity,
    device: DeviceInfo,
    devices: Sequence[DeviceInfo],
    *,
    tflops_milli: int,
    gpu_model: str,
    current: Mapping[str, Any] | None,
) -> dict[str, Any]:
    """The status merge patch of the device's GPU object, given its `current` status."""
    current = current or {}
    capacity = {"tflops": format_milli(tflops_milli),
                "vram": format_bytes(device.vram_bytes // _MIB * _MIB)}  # fmt: skip
    status: dict[str, Any] = {
        "capacity": capacity,
        "uuid": gpu_name(device.uuid),
        "index": device.index,
        "model": device.model,
        "gpuModel": gpu_model,
        "vendor": device.vendor,
        "numaNode": device.numa_node,
        "nodeSelector": {_HOSTNAME: identity.node},
        "topology": {"peers": topology_peers(device, devices)},
        "isolationMode": identity.isolation_mode,
    }
    if identity.isolation_policy:
        status["isolationPolicy"] = identity.isolation_policy
    nvlink = _nvlink(device, devices)
    if nvlink is not None:
        status["nvLink"] = nvlink
    if _zero(current.get("available")) and is_idle(current):
        status["available"] = dict(capacity)
    if not current.get("usedBy"):
        status["usedBy"] = "tensor-fusion"
    if not current.get("phase") or current.get("phase") == "Unknown":
        status["phase"] = "Pending"
    return status


def vanished_patch(gpu: Mapping[str, Any], now_rfc3339: str) -> dict[str, Any] | None:
    """A GPU no longer discovered: None when it is idle (delete it), else the patch marking it
    `Unknown` with `gpu-missing-since` (kept from an earlier mark)."""
    status = gpu.get("status") or {}
    if is_idle(status):
        return None
    since = annotations_of(gpu).get(KEYS.gpu_missing_since) or now_rfc3339
    return {"metadata": {"annotations": {KEYS.gpu_missing_since: since}},
            "status": {"phase": "Unknown"}}  # fmt: skip


def gpu_node_status_patch(
    inventory: Inventory,
    tflops_milli: Mapping[str, int],
    *,
    version: str,
    state: str,
    now_rfc3339: str,
    current_phase: str | None,
    mps: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The GPUNode status the agent writes: totals over its GPUs, the managed devices, the
    node facts and the heartbeat (with the MPS daemon's status, `mps`); phase Pending only when
    empty."""
    devices = inventory.devices
    names = [gpu_name(d.uuid) for d in devices]
    total_vram = sum(d.vram_bytes // _MIB * _MIB for d in devices)
    status: dict[str, Any] = {
        "totalTFlops": format_milli(sum(tflops_milli.get(n, 0) for n in names)),
        "totalVRAM": format_bytes(total_vram),
        "totalGPUs": len(devices),
        "managedGPUs": len(devices),
        "managedGPUDeviceIDs": names,
        "nodeInfo": {"ramSize": format_bytes(inventory.node.host_ram_bytes),
                     "dataDiskSize": format_bytes(inventory.node.data_disk_bytes)},
        "hypervisorStatus": {"hypervisorState": state, "hypervisorVersion": version,
                             "lastHeartbeatTime": now_rfc3339},
    }  # fmt: skip
    if mps is not None:
        status["hypervisorStatus"]["mps"] = dict(mps)
    if not current_phase:
        status["phase"] = "Pending"
    return status
