"""GPUPool (cluster-scoped): a set of GPU nodes with shared policy (api.md §2.2)."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Literal

from pydantic import Field

from tensorfusion.domain.model.base import (
    FreeForm,
    GoDuration,
    Int32,
    PercentInt,
    Range,
    Timestamp,
    WireFormat,
    WireModel,
)
from tensorfusion.domain.model.capacity import CapacityFigures
from tensorfusion.domain.model.meta import Condition, KubeObject
from tensorfusion.domain.model.resources import CapacityAmount
from tensorfusion.domain.model.selectors import LabelSelector, NodeSelector
from tensorfusion.domain.vocabulary import IsolationMode, QoSLevel

__all__ = [
    "Budget",
    "CapacityConfig",
    "ClientConfig",
    "ComponentConfig",
    "ComponentStatus",
    "DefragConfig",
    "GPUPool",
    "GPUPoolSpec",
    "GPUPoolStatus",
    "HypervisorConfig",
    "IsolationModeRule",
    "MaintenanceWindow",
    "NodeCompaction",
    "NodeManagerConfig",
    "NodeProvisioner",
    "NodeRequirement",
    "NodeTaint",
    "ObjectReference",
    "Oversubscription",
    "PodTemplateComponent",
    "PoolPhase",
    "ProvisioningMode",
    "ProvisioningPhase",
    "QoSConfig",
    "QoSDefinition",
    "QoSPricing",
    "QoSRequestPricing",
    "RollingUpdatePolicy",
]


class PoolPhase(StrEnum):
    """Phase of a pool or cluster."""

    PENDING = "Pending"
    RUNNING = "Running"
    UPDATING = "Updating"
    DESTROYING = "Destroying"
    UNKNOWN = "Unknown"


class ProvisioningMode(StrEnum):
    """How nodes join a pool; only AutoSelect is in scope."""

    PROVISIONED = "Provisioned"
    AUTO_SELECT = "AutoSelect"
    KARPENTER = "Karpenter"


class ProvisioningPhase(StrEnum):
    """Progress of node provisioning for a pool."""

    NONE = "None"
    INITIALIZING = "Initializing"
    PROVISIONING = "Provisioning"
    COMPLETED = "Completed"


class Oversubscription(WireModel):
    """How far virtual capacity exceeds physical capacity (scheduling.md §6)."""

    tflops_oversell_ratio: Annotated[int, WireFormat("int32"), Range(100, 100000)] = Field(
        500, description="percent multiplier of physical TFLOPs: 500 = 5x"
    )
    vram_expand_to_host_mem: PercentInt = Field(
        50, alias="vramExpandToHostMem", description="percent of host RAM added to virtual VRAM"
    )
    vram_expand_to_host_disk: PercentInt = Field(
        70,
        alias="vramExpandToHostDisk",
        description="percent of host data disk added to virtual VRAM",
    )


class CapacityConfig(WireModel):
    """Capacity bounds (provisioning) and oversubscription (scheduling)."""

    min_resources: CapacityAmount | None = None
    max_resources: CapacityAmount | None = None
    warm_resources: CapacityAmount | None = None
    oversubscription: Oversubscription | None = None
    """Absent: virtual capacity equals physical capacity and limits stay unchecked (§6)."""


class IsolationModeRule(WireModel):
    """Isolation mode for the nodes a selector matches; the first matching rule wins."""

    mode: IsolationMode
    selector: LabelSelector


class DefragConfig(WireModel):
    """Cron-triggered migration of workers off lightly used nodes."""

    enabled: bool = False
    schedule: str = "0 3 * * *"
    timezone: str
    max_duration: GoDuration = "2h"
    utilization_threshold_percent: PercentInt = 40
    evicted_pod_marker_ttl: str = Field("never", alias="evictedPodMarkerTTL")
    source_node_marker_ttl: str = Field("30m", alias="sourceNodeMarkerTTL")


class NodeCompaction(WireModel):
    """Removal of empty nodes and node defragmentation."""

    period: GoDuration = "5m"
    defrag: DefragConfig | None = None


class MaintenanceWindow(WireModel):
    """Cron expressions of the windows in which rolling updates may run."""

    includes: list[str] = Field(default_factory=list)


class RollingUpdatePolicy(WireModel):
    """Whether and how fast component changes roll out to the pool's nodes."""

    auto_update_hypervisor: bool = False
    auto_update_worker: bool = False
    auto_update_client: bool = False
    batch_percentage: PercentInt = Field(100, description="percent of nodes per batch; 0 pauses")
    batch_interval: GoDuration = "1s"
    max_duration: GoDuration = "10m"
    maintenance_window: MaintenanceWindow | None = None


class ObjectReference(WireModel):
    """Group/version/kind/name of a referenced object."""

    group: str | None = None
    version: str | None = None
    kind: str | None = None
    name: str | None = None


class NodeRequirement(WireModel):
    """A node requirement for provisioned nodes."""

    key: str | None = None
    operator: Literal["In", "Exists", "DoesNotExist", "Gt", "Lt"] = "In"
    values: list[str] = Field(default_factory=list)


class NodeTaint(WireModel):
    """A taint put on provisioned nodes."""

    key: str | None = None
    value: str | None = None
    effect: Literal["NoSchedule", "NoExecute", "PreferNoSchedule"] = "NoSchedule"


class Budget(WireModel):
    """Spending limits of provisioned nodes."""

    budget_per_day: str = "100"
    budget_per_month: str = "1000"
    budget_per_quarter: str = "3000"
    budget_exceed_strategy: Literal["AlertOnly", "AlertAndTerminateVM"] = "AlertOnly"


class NodeProvisioner(WireModel):
    """Automatic node provisioning (declared)."""

    crd_preserve_unknown_fields = True

    node_class: str | None = None
    karpenter_node_class_ref: ObjectReference | None = None
    gpu_requirements: list[NodeRequirement] = Field(default_factory=list)
    cpu_requirements: list[NodeRequirement] = Field(default_factory=list)
    gpu_taints: list[NodeTaint] = Field(default_factory=list)
    cpu_taints: list[NodeTaint] = Field(default_factory=list)
    gpu_node_labels: dict[str, str] = Field(default_factory=dict)
    cpu_node_labels: dict[str, str] = Field(default_factory=dict)
    gpu_node_annotations: dict[str, str] = Field(default_factory=dict)
    budget: Budget | None = None


class NodeManagerConfig(WireModel):
    """Which nodes join the pool and how they are run."""

    provisioning_mode: ProvisioningMode = ProvisioningMode.AUTO_SELECT
    default_isolation_mode: IsolationMode = IsolationMode.SOFT
    isolation_mode_rules: list[IsolationModeRule] = Field(default_factory=list)
    default_vendor: str = "NVIDIA"
    node_selector: NodeSelector | None = None
    multi_vendor_node_selector: dict[str, NodeSelector] | None = None
    node_compaction: NodeCompaction = Field(default_factory=NodeCompaction)
    node_pool_rolling_update_policy: RollingUpdatePolicy = Field(
        default_factory=RollingUpdatePolicy
    )
    node_provisioner: NodeProvisioner | None = None


class QoSDefinition(WireModel):
    """A QoS class with its priority (declared)."""

    name: QoSLevel | None = None
    description: str | None = None
    priority: Annotated[int, WireFormat("int32"), Range(1, 100)] | None = None


class QoSRequestPricing(WireModel):
    """Price of requested TFLOPs and VRAM per hour."""

    per_fp16_tflops_per_hour: str = Field("$0.0069228", alias="perFP16TFlopsPerHour")
    per_gb_of_vram_per_hour: str = Field("$0.01548", alias="perGBOfVRAMPerHour")


class QoSPricing(WireModel):
    """Cost figures of one QoS class (metrics.md)."""

    qos: QoSLevel | None = None
    requests: QoSRequestPricing = Field(default_factory=QoSRequestPricing)
    limits_over_requests: str = "1"


class QoSConfig(WireModel):
    """Default QoS and QoS pricing."""

    default_qos: QoSLevel | None = Field(None, alias="defaultQoS")
    definitions: list[QoSDefinition] = Field(default_factory=list)
    pricing: list[QoSPricing] = Field(default_factory=list)
    eviction_protection_price_ratio: str = "1.2"


class PodTemplateComponent(WireModel):
    """A system component run from an image and a raw pod template."""

    image: str | None = None
    pod_template: FreeForm | None = None


class HypervisorConfig(PodTemplateComponent):
    """The node agent ("hypervisor") component."""

    port_number: Annotated[int, WireFormat("int32"), Range(0, 65535)] = 8000
    enable_vector: bool | None = None
    vector_image: str | None = None


class ClientConfig(WireModel):
    """The client component injected into application pods (declared)."""

    operator_endpoint: str | None = None
    remote_mode_image: str | None = None
    embedded_mode_image: str | None = None
    patch_to_pod: FreeForm | None = None
    patch_to_container: FreeForm | None = None
    patch_embedded_worker_to_pod: FreeForm | None = None
    patch_to_embedded_worker_container: FreeForm | None = None


class ComponentConfig(WireModel):
    """Images and pod templates of the worker, hypervisor, node discovery and client."""

    worker: PodTemplateComponent | None = None
    hypervisor: HypervisorConfig = Field(default_factory=HypervisorConfig)
    node_discovery: PodTemplateComponent | None = None
    client: ClientConfig | None = None


class GPUPoolSpec(WireModel):
    """Desired state of a GPU pool."""

    default_using_local_gpu: bool | None = Field(
        None, alias="defaultUsingLocalGPU", description="nil is treated as true"
    )
    scheduling_config_template: str | None = None
    capacity_config: CapacityConfig = Field(default_factory=CapacityConfig)
    node_manager_config: NodeManagerConfig = Field(default_factory=NodeManagerConfig)
    qos_config: QoSConfig = Field(default_factory=QoSConfig, alias="qosConfig")
    component_config: ComponentConfig = Field(default_factory=ComponentConfig)


class ComponentStatus(WireModel):
    """Config hashes and rolling-update progress per component."""

    worker: str | None = None
    worker_config_synced: bool | None = None
    worker_update_progress: Int32 | None = None
    hypervisor: str | None = None
    hypervisor_config_synced: bool | None = None
    hypervisor_update_progress: Int32 | None = None
    client: str | None = None
    client_config_synced: bool | None = None
    client_update_progress: Int32 | None = None


class GPUPoolStatus(CapacityFigures):
    """Observed state of a pool: capacity sums over its GPUNodes."""

    cluster: str | None = None
    phase: PoolPhase = PoolPhase.PENDING
    conditions: list[Condition] = Field(default_factory=list)
    total_nodes: Int32 | None = None
    total_gpus: Int32 | None = Field(None, alias="totalGPUs")
    ready_nodes: Int32 | None = None
    not_ready_nodes: Int32 | None = None
    running_apps_cnt: Int32 | None = None
    component_status: ComponentStatus | None = None
    provisioning_phase: ProvisioningPhase = ProvisioningPhase.NONE
    last_compaction_time: Timestamp | None = None
    last_defrag_time: Timestamp | None = None
    saved_costs_per_month: str | None = None
    potential_savings_per_month: str | None = None
    budget_exceeded: bool | None = None


class GPUPool(KubeObject):
    """A set of GPU nodes with shared policy."""

    kind: Literal["GPUPool"] = "GPUPool"
    spec: GPUPoolSpec = Field(default_factory=GPUPoolSpec)
    status: GPUPoolStatus = Field(default_factory=GPUPoolStatus)
