"""SchedulingConfigTemplate (cluster-scoped): placement policy of pools (api.md §2.5)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from tensorfusion.domain.model.autoscaling import AutoScalingConfig
from tensorfusion.domain.model.base import FreeForm, WireModel
from tensorfusion.domain.model.meta import KubeObject
from tensorfusion.domain.model.selectors import LabelSelector
from tensorfusion.domain.vocabulary import PlacementMode

__all__ = [
    "GPUFilter",
    "Placement",
    "SchedulingConfigTemplate",
    "SchedulingConfigTemplateSpec",
    "SchedulingConfigTemplateStatus",
    "VerticalScalingRule",
]


class GPUFilter(WireModel):
    """A GPU filter by type and parameters (declared)."""

    type: str | None = None
    params: FreeForm | None = None


class Placement(WireModel):
    """How the allocator ranks nodes and GPUs (scheduling.md §7)."""

    mode: PlacementMode = PlacementMode.NODE_COMPACT_GPU_LOW_LOAD
    allow_using_local_gpu: bool = Field(True, alias="allowUsingLocalGPU")
    gpu_filters: list[GPUFilter] = Field(default_factory=list, alias="gpuFilters")


class VerticalScalingRule(WireModel):
    """Auto-scaling for the pods a label selector matches (declared)."""

    name: str | None = None
    selector: LabelSelector | None = None
    auto_scaling: AutoScalingConfig | None = None


class SchedulingConfigTemplateSpec(WireModel):
    """Placement mode, scaling rules and node-agent settings."""

    placement: Placement = Field(default_factory=Placement)
    vertical_scaling_rules: list[VerticalScalingRule] = Field(default_factory=list)
    re_balancer: FreeForm | None = Field(None, alias="reBalancer")
    hypervisor: FreeForm | None = Field(
        None,
        description="autoFreezeAndResume, elasticRateLimitParameters, "
        "multiProcessQueuingParameters; passed to node agents",
    )


class SchedulingConfigTemplateStatus(WireModel):
    """Empty."""


class SchedulingConfigTemplate(KubeObject):
    """Placement policy referenced by pools through ``spec.schedulingConfigTemplate``."""

    kind: Literal["SchedulingConfigTemplate"] = "SchedulingConfigTemplate"
    spec: SchedulingConfigTemplateSpec = Field(default_factory=SchedulingConfigTemplateSpec)
    status: SchedulingConfigTemplateStatus = Field(default_factory=SchedulingConfigTemplateStatus)
