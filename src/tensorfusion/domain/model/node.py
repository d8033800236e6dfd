"""GPUNode (cluster-scoped): one per Kubernetes node that belongs to a pool (api.md §2.3)."""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import Field

from tensorfusion.domain.model.base import Int32, Int64, QuantityValue, Timestamp, WireModel
from tensorfusion.domain.model.capacity import CapacityFigures
from tensorfusion.domain.model.meta import Condition, KubeObject
from tensorfusion.domain.model.resources import Resource
from tensorfusion.domain.vocabulary import IsolationMode, QoSLevel

__all__ = [
    "GPUNode",
    "GPUNodeInfo",
    "GPUNodePhase",
    "GPUNodeSpec",
    "GPUNodeStatus",
    "HypervisorStatus",
    "MPSDaemonStatus",
    "ManageMode",
    "PodGPUInfo",
]


class GPUNodePhase(StrEnum):
    """Lifecycle phase of a GPU node."""

    PENDING = "Pending"
    PROVISIONING = "Provisioning"
    MIGRATING = "Migrating"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    UNKNOWN = "Unknown"
    DESTROYING = "Destroying"


class ManageMode(StrEnum):
    """How the node came into the pool."""

    MANUAL = "Manual"
    AUTO_SELECT = "AutoSelect"
    PROVISIONED = "Provisioned"


class PodGPUInfo(WireModel):
    """A pod holding GPU resources, with its per-GPU requests and limits."""

    name: str | None = None
    namespace: str | None = None
    uid: str | None = None
    requests: Resource | None = None
    limits: Resource | None = None
    qos: QoSLevel | None = None
    isolation: IsolationMode | None = Field(
        None,
        description="the isolation mode the pod was admitted with (its node agent "
        "enforces the limits it implies)",
    )
    is_external: bool | None = None


class GPUNodeInfo(WireModel):
    """Host facts used for virtual VRAM (bytes)."""

    ram_size: QuantityValue | None = Field(None, alias="ramSize")
    data_disk_size: QuantityValue | None = None


class MPSDaemonStatus(WireModel):
    """The node's NVIDIA MPS control daemon, which enforces workers' limits (hypervisor.md)."""

    state: Literal["Off", "Starting", "Running", "Restarting", "Failed"] | None = None
    restarts: Int32 | None = None
    message: str | None = Field(None, max_length=1024)
    protocol: Int32 | None = Field(
        None,
        description="2: legacy MPS (limits in each client's environment); 3: the driver has MPS v3",
    )


class HypervisorStatus(WireModel):
    """Liveness of the node agent."""

    hypervisor_state: str | None = None
    hypervisor_version: str | None = None
    last_heartbeat_time: Timestamp | None = None
    mps: MPSDaemonStatus | None = Field(None, alias="mps")


class GPUNodeSpec(WireModel):
    """Desired state of a GPU node."""

    manage_mode: ManageMode = ManageMode.AUTO_SELECT
    cost_per_hour: str | None = None
    cloud_vendor_param: str | None = None
    gpu_card_indices: list[int] = Field(default_factory=list, alias="gpuCardIndices")


class GPUNodeStatus(CapacityFigures):
    """Observed state of a GPU node: capacity sums over its GPUs and node-agent facts."""

    phase: GPUNodePhase = GPUNodePhase.PENDING
    total_gpus: Int32 | None = Field(None, alias="totalGPUs")
    managed_gpus: Int32 | None = Field(None, alias="managedGPUs")
    managed_gpu_device_ids: list[str] = Field(default_factory=list, alias="managedGPUDeviceIDs")
    node_info: GPUNodeInfo | None = None
    total_gpu_pods: Int32 | None = Field(None, alias="totalGPUPods")
    allocated_pods: dict[str, list[PodGPUInfo]] = Field(default_factory=dict)
    hypervisor_status: HypervisorStatus | None = None
    conditions: list[Condition] = Field(default_factory=list)
    loaded_models: list[str] = Field(default_factory=list)
    observed_generation: Int64 | None = None


class GPUNode(KubeObject):
    """A Kubernetes node that belongs to a pool; name = node name."""

    kind: Literal["GPUNode"] = "GPUNode"
    spec: GPUNodeSpec = Field(default_factory=GPUNodeSpec)
    status: GPUNodeStatus = Field(default_factory=GPUNodeStatus)
