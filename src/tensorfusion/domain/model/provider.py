"""ProviderConfig (cluster-scoped): hardware metadata per vendor (api.md §2.8).

Only ``vendor``, ``hardwareMetadata`` and ``inUseResourceNames`` are typed; every other field
of the spec is kept as written.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from tensorfusion.domain.model.base import Int32, NonNegativeQuantity, WireModel
from tensorfusion.domain.model.meta import KubeObject

__all__ = [
    "HardwareModelInfo",
    "ProviderConfig",
    "ProviderConfigSpec",
    "ProviderConfigStatus",
]


class HardwareModelInfo(WireModel):
    """One accelerator model and its FP16 TFLOPs."""

    crd_preserve_unknown_fields = True

    model: str
    full_model_name: str | None = None
    fp16_tflops: NonNegativeQuantity = Field(alias="fp16TFlops")
    cost_per_hour: str | None = None
    max_partitions: Int32 | None = None


class ProviderConfigSpec(WireModel):
    """A vendor's hardware table and native device-plugin resource names."""

    crd_preserve_unknown_fields = True

    vendor: str
    hardware_metadata: list[HardwareModelInfo] = Field(default_factory=list)
    in_use_resource_names: list[str] = Field(default_factory=list)


class ProviderConfigStatus(WireModel):
    """Kept as written."""

    crd_preserve_unknown_fields = True


class ProviderConfig(KubeObject):
    """Hardware metadata of one vendor (NVIDIA, AMD, ...)."""

    kind: Literal["ProviderConfig"] = "ProviderConfig"
    spec: ProviderConfigSpec
    status: ProviderConfigStatus = Field(default_factory=ProviderConfigStatus)
