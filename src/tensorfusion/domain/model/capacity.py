"""The capacity figures shared by GPUNode, GPUPool and TensorFusionCluster status."""

from __future__ import annotations

from pydantic import Field

from tensorfusion.domain.model.base import QuantityValue, WireModel

__all__ = ["CapacityFigures"]


class CapacityFigures(WireModel):
    """Physical, available (request-based) and virtual (oversubscribed) TFLOPs and VRAM."""

    total_tflops: QuantityValue | None = Field(None, alias="totalTFlops")
    total_vram: QuantityValue | None = Field(None, alias="totalVRAM")
    available_tflops: QuantityValue | None = Field(None, alias="availableTFlops")
    available_vram: QuantityValue | None = Field(None, alias="availableVRAM")
    virtual_tflops: QuantityValue | None = Field(None, alias="virtualTFlops")
    virtual_vram: QuantityValue | None = Field(None, alias="virtualVRAM")
    virtual_available_tflops: QuantityValue | None = Field(None, alias="virtualAvailableTFlops")
    virtual_available_vram: QuantityValue | None = Field(None, alias="virtualAvailableVRAM")
