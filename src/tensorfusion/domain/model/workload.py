"""WorkloadProfile and TensorFusionWorkload (namespaced): one spec type (api.md §2.6)."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Literal, Self

from pydantic import Field, model_validator

from tensorfusion.domain.model.autoscaling import AutoScalingConfig, CronScalingRule
from tensorfusion.domain.model.base import (
    FreeForm,
    GoDuration,
    Int32,
    Range,
    Timestamp,
    WireFormat,
    WireModel,
)
from tensorfusion.domain.model.meta import Condition, KubeObject
from tensorfusion.domain.model.resources import Resources
from tensorfusion.domain.vocabulary import IsolationMode, QoSLevel

__all__ = [
    "GangPhase",
    "GangScheduling",
    "GangStatus",
    "TensorFusionWorkload",
    "TensorFusionWorkloadStatus",
    "WorkloadPhase",
    "WorkloadProfile",
    "WorkloadProfileSpec",
    "WorkloadProfileStatus",
]


class WorkloadPhase(StrEnum):
    """Phase of a TensorFusionWorkload."""

    PENDING = "Pending"
    RUNNING = "Running"
    FAILED = "Failed"
    UNKNOWN = "Unknown"


class GangPhase(StrEnum):
    """Phase of a gang (declared)."""

    PENDING = "Pending"
    WAITING = "Waiting"
    SCHEDULING = "Scheduling"
    RUNNING = "Running"
    TIMED_OUT = "TimedOut"
    FAILED = "Failed"


class GangScheduling(WireModel):
    """All-or-nothing scheduling of a workload's workers (declared, scheduling.md §13)."""

    min_members: Annotated[int, WireFormat("int32"), Range(minimum=0)] | None = Field(
        None, description="0 (= desired replicas) or at least 2"
    )
    timeout: GoDuration | None = Field(None, description="unset or 0 = wait forever")
    mode: Literal["Strict"] = "Strict"

    @model_validator(mode="after")
    def _not_one(self) -> Self:
        if self.min_members == 1:
            raise ValueError("minMembers must be 0 or at least 2")
        return self


class WorkloadProfileSpec(WireModel):
    """What a workload asks for, per GPU; shared by WorkloadProfile and TensorFusionWorkload."""

    replicas: Int32 | None = Field(None, description="nil = one worker per pod")
    pool_name: str | None = None
    resources: Resources = Field(default_factory=Resources)
    qos: QoSLevel | None = None
    is_local_gpu: bool | None = Field(None, alias="isLocalGPU")
    sidecar_worker: bool | None = None
    isolation: IsolationMode = IsolationMode.SOFT
    partition_template_id: str | None = None
    gpu_model: str | None = Field(None, alias="gpuModel")
    vendor: str | None = None
    gpu_count: Annotated[int, WireFormat("int32"), Range(1, 128)] | None = Field(
        None, alias="gpuCount"
    )
    gpu_indices: list[Annotated[int, WireFormat("int32"), Range(minimum=0)]] = Field(
        default_factory=list, alias="gpuIndices"
    )
    auto_scaling_config: AutoScalingConfig | None = None
    node_affinity: FreeForm | None = None
    worker_pod_template: FreeForm | None = None
    gang_scheduling: GangScheduling | None = None

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        if len(set(self.gpu_indices)) != len(self.gpu_indices):
            raise ValueError("gpuIndices must not contain duplicates")
        gang = self.gang_scheduling
        if (
            gang is not None
            and gang.min_members
            and self.replicas is not None
            and gang.min_members > self.replicas
        ):
            raise ValueError(
                f"gangScheduling.minMembers {gang.min_members} exceeds replicas {self.replicas}"
            )
        return self


class WorkloadProfileStatus(WireModel):
    """Empty."""


class WorkloadProfile(KubeObject):
    """A reusable workload template; pods reference it by ``tensor-fusion.ai/workload-profile``."""

    kind: Literal["WorkloadProfile"] = "WorkloadProfile"
    spec: WorkloadProfileSpec = Field(default_factory=WorkloadProfileSpec)
    status: WorkloadProfileStatus = Field(default_factory=WorkloadProfileStatus)


class GangStatus(WireModel):
    """Progress of a gang (declared)."""

    phase: GangPhase | None = None
    group_key: str | None = None
    desired_members: Int32 | None = None
    waiting_members: Int32 | None = None
    scheduled_members: Int32 | None = None
    ready_members: Int32 | None = None
    last_transition_time: Timestamp | None = None
    reason: str | None = None
    message: str | None = None
    backoff_until: Timestamp | None = None


class TensorFusionWorkloadStatus(WireModel):
    """Observed state of a workload's workers."""

    phase: WorkloadPhase = WorkloadPhase.PENDING
    conditions: list[Condition] = Field(default_factory=list)
    worker_count: Int32 | None = None
    ready_workers: Int32 | None = None
    pod_template_hash: str | None = None
    recommendation: Resources | None = None
    applied_recommended_replicas: Int32 | None = None
    active_cron_scaling_rule: CronScalingRule | None = None
    gang: GangStatus | None = None


class TensorFusionWorkload(KubeObject):
    """One workload's resource requirements, created by the admission webhook."""

    kind: Literal["TensorFusionWorkload"] = "TensorFusionWorkload"
    spec: WorkloadProfileSpec = Field(default_factory=WorkloadProfileSpec)
    status: TensorFusionWorkloadStatus = Field(default_factory=TensorFusionWorkloadStatus)
