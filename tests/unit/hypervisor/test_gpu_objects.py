"""The objects a node agent writes: GPU metadata and status (capacity, topology, initialised
`available`, usedBy and phase only when empty, never Running), vanished GPUs, GPUNode status."""

from __future__ import annotations

from tensorfusion.domain.annotations import KEYS
from tensorfusion.domain.devices.gpu_objects import (
    AgentIdentity,
    gpu_metadata,
    gpu_node_status_patch,
    gpu_status_patch,
    topology_peers,
    vanished_patch,
)
from tensorfusion.domain.devices.inventory import DeviceInfo, HostFacts, Inventory, NVLinkPeer

NOW = "2026-12-02T04:00:00Z"
IDENTITY = AgentIdentity(node="gpu-1", pool="shared", gpu_node_uid="n-uid",
                         isolation_policy="soft-or-shared", isolation_mode="soft")  # fmt: skip
GIB = 1 << 30


def device(index: int, numa: int = 0, links: tuple[NVLinkPeer, ...] = ()) -> DeviceInfo:
    return DeviceInfo(uuid=f"GPU-ABC-{index}", index=index, model="NVIDIA H100 80GB HBM3",
                      vendor="NVIDIA", vram_bytes=80 * GIB + 12345, numa_node=numa,
                      pci_bus_id=f"0000:0{index}:00.0", nvlinks=links)  # fmt: skip


LINKED = device(0, links=(NVLinkPeer("0000:01:00.0", 18, 4, 450_000),))
DEVICES = [LINKED, device(1), device(2, numa=1), device(3, numa=-1)]


def test_metadata_names_the_gpu_by_its_lower_uuid_owned_by_the_gpu_node() -> None:
    metadata = gpu_metadata(IDENTITY, LINKED, NOW)
    assert metadata["name"] == "gpu-abc-0"
    assert metadata["labels"] == {KEYS.managed_by: "gpu-1", KEYS.gpupool: "shared"}
    assert metadata["annotations"] == {KEYS.last_sync: NOW}
    [owner] = metadata["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"], owner["controller"]) == (
        "GPUNode", "gpu-1", "n-uid", True)  # fmt: skip


def test_a_new_gpu_gets_capacity_available_used_by_and_pending() -> None:
    status = gpu_status_patch(IDENTITY, LINKED, DEVICES, tflops_milli=989_500, gpu_model="H100",
                              current=None)  # fmt: skip
    assert status["capacity"] == {"tflops": "989500m", "vram": "80Gi"}, "VRAM in whole MiB"
    assert status["available"] == status["capacity"]
    assert (status["usedBy"], status["phase"]) == ("tensor-fusion", "Pending")
    assert status["nodeSelector"] == {"kubernetes.io/hostname": "gpu-1"}
    assert (status["isolationMode"], status["isolationPolicy"]) == ("soft", "soft-or-shared")
    assert status["nvLink"]["peers"][0]["peerUUID"] == "gpu-abc-1"
    assert (status["uuid"], status["gpuModel"], status["numaNode"]) == ("gpu-abc-0", "H100", 0)


def test_a_known_gpu_keeps_what_the_controller_and_other_systems_own() -> None:
    current = {"phase": "Running", "usedBy": "nvidia-device-plugin",
               "available": {"tflops": "100", "vram": "10Gi"},
               "runningApps": [{"name": "w"}]}  # fmt: skip
    status = gpu_status_patch(IDENTITY, LINKED, DEVICES, tflops_milli=1000, gpu_model="H100",
                              current=current)  # fmt: skip
    assert "available" not in status and "usedBy" not in status and "phase" not in status
    busy_zero = {**current, "available": {"tflops": "0", "vram": "0"}}
    assert "available" not in gpu_status_patch(IDENTITY, LINKED, DEVICES, tflops_milli=1000,
                                               gpu_model="H100", current=busy_zero)  # fmt: skip
    unknown = gpu_status_patch(IDENTITY, LINKED, DEVICES, tflops_milli=1000, gpu_model="H100",
                               current={"phase": "Unknown", "usedBy": "tensor-fusion"})  # fmt: skip
    assert unknown["phase"] == "Pending" and unknown["available"]["tflops"] == "1"


def test_topology_tiers_nvlink_numa_sockets_unknown() -> None:
    tiers = {p["peerGPUUUID"]: p["tier"] for p in topology_peers(LINKED, DEVICES)}
    assert tiers == {"gpu-abc-1": 0, "gpu-abc-2": 2, "gpu-abc-3": 3}
    assert {p["peerGPUUUID"]: p["tier"] for p in topology_peers(DEVICES[1], DEVICES)} == {
        "gpu-abc-0": 1, "gpu-abc-2": 2, "gpu-abc-3": 3}  # fmt: skip


def test_a_vanished_gpu_is_deleted_when_idle_else_unknown_since_its_first_absence() -> None:
    assert vanished_patch({"status": {"phase": "Running"}}, NOW) is None
    busy = {"metadata": {}, "status": {"runningApps": [{"name": "w"}]}}
    patch = vanished_patch(busy, NOW)
    assert patch == {"metadata": {"annotations": {KEYS.gpu_missing_since: NOW}},
                     "status": {"phase": "Unknown"}}  # fmt: skip
    marked = {"metadata": {"annotations": {KEYS.gpu_missing_since: "earlier"}},
              "status": {"allocatedPartitions": {"p": {}}}}  # fmt: skip
    again = vanished_patch(marked, NOW)
    assert again is not None
    assert again["metadata"]["annotations"][KEYS.gpu_missing_since] == "earlier"


def test_the_gpu_node_status_sums_the_gpus_and_beats() -> None:
    inventory = Inventory(tuple(DEVICES[:2]), HostFacts(512 * GIB, 2048 * GIB))
    status = gpu_node_status_patch(
        inventory, {"gpu-abc-0": 989_500, "gpu-abc-1": 989_500}, version="1.2.3",
        state="Running", now_rfc3339=NOW, current_phase=None,
    )  # fmt: skip
    assert (status["totalTFlops"], status["totalVRAM"], status["totalGPUs"]) == ("1979", "160Gi", 2)
    assert status["managedGPUDeviceIDs"] == ["gpu-abc-0", "gpu-abc-1"]
    assert status["nodeInfo"] == {"ramSize": "512Gi", "dataDiskSize": "2Ti"}
    assert status["hypervisorStatus"] == {
        "hypervisorState": "Running",
        "hypervisorVersion": "1.2.3",
        "lastHeartbeatTime": NOW,
    }
    assert status["phase"] == "Pending"
    running = gpu_node_status_patch(inventory, {}, version="1", state="Degraded",
                                    now_rfc3339=NOW, current_phase="Running")  # fmt: skip
    assert "phase" not in running
