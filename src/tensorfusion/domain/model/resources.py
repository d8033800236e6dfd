"""Per-GPU resource amounts: TFLOPs or compute percent, and VRAM (api.md §1.1)."""

from __future__ import annotations

from typing import Self

from pydantic import Field, model_validator

from tensorfusion.domain.model.base import NonNegativeQuantity, Percent, QuantityValue, WireModel

__all__ = ["CapacityAmount", "GPUCapacity", "Resource", "Resources"]


class Resource(WireModel):
    """Per-GPU TFLOPs (or compute percent, exclusive with TFLOPs) and VRAM bytes.

    An absent component reads as zero.
    """

    tflops: NonNegativeQuantity | None = None
    compute: Percent | None = Field(
        None, description="0-100 percent of one GPU, mutually exclusive with tflops"
    )
    vram: NonNegativeQuantity | None = None

    @model_validator(mode="after")
    def _tflops_or_compute(self) -> Self:
        has_tflops = self.tflops is not None and not self.tflops.is_zero()
        if has_tflops and self.compute is not None and not self.compute.is_zero():
            raise ValueError("tflops and compute are mutually exclusive; set only one")
        return self


class Resources(WireModel):
    """Requests and limits, per GPU."""

    requests: Resource = Field(default_factory=Resource)
    limits: Resource = Field(default_factory=Resource)


class GPUCapacity(WireModel):
    """TFLOPs and VRAM of one GPU (``capacity``, ``available``); written by the system."""

    tflops: QuantityValue | None = None
    vram: QuantityValue | None = None


class CapacityAmount(WireModel):
    """Pool capacity bounds for provisioning: GPU TFLOPs and VRAM, CPU and memory."""

    tflops: QuantityValue | None = None
    vram: QuantityValue | None = None
    cpu: QuantityValue | None = None
    memory: QuantityValue | None = None
