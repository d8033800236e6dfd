"""GPU (cluster-scoped, status only): one physical accelerator (api.md §2.4)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from tensorfusion.domain.model.base import Int32, Int64, Range, Timestamp, WireFormat, WireModel
from tensorfusion.domain.model.meta import KubeObject
from tensorfusion.domain.model.node import PodGPUInfo
from tensorfusion.domain.model.resources import GPUCapacity
from tensorfusion.domain.vocabulary import GPUPhase, IsolationMode, IsolationPolicy

__all__ = [
    "GPU",
    "AllocatedPartition",
    "GPUNvLink",
    "GPUNvLinkPeer",
    "GPUPeerLink",
    "GPUStatus",
    "GPUTopology",
    "RunningApp",
]


class RunningApp(WireModel):
    """A workload with workers on this GPU."""

    name: str | None = None
    namespace: str | None = None
    count: int | None = None
    pods: list[PodGPUInfo] = Field(default_factory=list)


class AllocatedPartition(WireModel):
    """A hardware partition held by a pod (partitioned mode); keyed by pod UID."""

    template_id: str | None = None
    pod_uid: str | None = None
    pod_name: str | None = None
    namespace: str | None = None
    allocated_at: Timestamp | None = None
    allocated_slot_start: Int32 | None = None
    allocated_slot_end: Int32 | None = None
    isolation_group_id: Int32 | None = None


class GPUPeerLink(WireModel):
    """The link to another GPU of the node; ``tier`` 0 is the closest."""

    peer_gpu_uuid: str = Field(alias="peerGPUUUID")
    tier: Annotated[int, WireFormat("int32"), Range(0, 3)]
    link_type: str | None = None
    bandwidth: Int64 | None = None


class GPUTopology(WireModel):
    """Interconnect topology: input of topology-aware placement."""

    peers: list[GPUPeerLink] = Field(default_factory=list)


class GPUNvLinkPeer(WireModel):
    """NVLink connectivity to one peer GPU (informational)."""

    peer_uuid: str | None = Field(None, alias="peerUUID")
    link_count: Int32 | None = None
    link_version: Int32 | None = None
    bandwidth_mbps: Int64 | None = Field(None, alias="bandwidthMBps")


class GPUNvLink(WireModel):
    """NVLink summary (informational)."""

    peer_count: Int32 | None = None
    total_link_count: Int32 | None = None
    total_bandwidth_mbps: Int64 | None = Field(None, alias="totalBandwidthMBps")
    peers: list[GPUNvLinkPeer] = Field(default_factory=list)


class GPUStatus(WireModel):
    """Everything known about a GPU; written by the node agent and the allocator."""

    phase: GPUPhase = GPUPhase.PENDING
    vendor: str = "NVIDIA"
    model: str | None = None
    gpu_model: str | None = Field(None, alias="gpuModel")
    capacity: GPUCapacity | None = None
    available: GPUCapacity | None = None
    uuid: str | None = None
    index: Int32 | None = None
    numa_node: Int32 | None = Field(None, description="-1 = unknown")
    node_selector: dict[str, str] = Field(default_factory=dict)
    used_by: str = Field(
        "tensor-fusion",
        description="tensor-fusion, nvidia-device-plugin, 3rd-party-device-plugin or another "
        "system; any value but tensor-fusion removes the GPU from TensorFusion scheduling",
    )
    isolation_mode: IsolationMode = IsolationMode.SOFT
    isolation_policy: IsolationPolicy | None = None
    active_isolation_mode: Literal["shared", "soft", "hard"] | None = None
    dynamic_isolation_conflict: bool | None = None
    running_apps: list[RunningApp] = Field(default_factory=list)
    allocated_partitions: dict[str, AllocatedPartition] = Field(default_factory=dict)
    topology: GPUTopology | None = None
    nv_link: GPUNvLink | None = Field(None, alias="nvLink")
    message: str | None = None


class GPU(KubeObject):
    """One physical accelerator; name = lower-cased device UUID. Status only."""

    kind: Literal["GPU"] = "GPU"
    status: GPUStatus = Field(default_factory=GPUStatus)
