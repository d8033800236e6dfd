"""GPUResourceQuota (namespaced): namespace-wide and per-pod GPU caps (api.md §2.7)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from tensorfusion.domain.model.base import Int32, PercentInt, Timestamp, WireModel
from tensorfusion.domain.model.meta import Condition, KubeObject
from tensorfusion.domain.model.resources import Resource

__all__ = [
    "GPUResourceQuota",
    "GPUResourceQuotaSpec",
    "GPUResourceQuotaStatus",
    "QuotaAvailablePercent",
    "QuotaSingle",
    "QuotaTotal",
    "QuotaUsage",
]


class QuotaTotal(WireModel):
    """Namespace-wide caps on Σ(value × gpuCount); a zero or absent component is not enforced."""

    requests: Resource | None = None
    limits: Resource | None = None
    max_workers: Int32 = Field(32768, description="max concurrently allocated worker pods")
    alert_threshold_percent: PercentInt = Field(
        95, description="AlertThresholdReached when available% < 100 - threshold"
    )


class QuotaSingle(WireModel):
    """Per-pod, per-GPU caps and defaults; a zero component is unchecked."""

    max_requests: Resource | None = None
    max_limits: Resource | None = None
    max_gpu_count: Int32 | None = Field(None, alias="maxGPUCount")
    default_requests: Resource | None = None
    default_limits: Resource | None = None


class GPUResourceQuotaSpec(WireModel):
    """Namespace totals and per-pod limits."""

    total: QuotaTotal = Field(default_factory=QuotaTotal)
    single: QuotaSingle = Field(default_factory=QuotaSingle)


class QuotaUsage(WireModel):
    """What the namespace uses now."""

    requests: Resource | None = None
    limits: Resource | None = None
    workers: Int32 | None = None


class QuotaAvailablePercent(WireModel):
    """Available percent per cap, two decimals; ``"100"`` when the cap is zero or absent."""

    requests_tflops: str | None = Field(None, alias="requests.tflops")
    requests_vram: str | None = Field(None, alias="requests.vram")
    limits_tflops: str | None = Field(None, alias="limits.tflops")
    limits_vram: str | None = Field(None, alias="limits.vram")
    workers: str | None = None


class GPUResourceQuotaStatus(WireModel):
    """Usage and availability, written by the quota sync every 10 s when changed."""

    used: QuotaUsage | None = None
    available_percent: QuotaAvailablePercent | None = None
    conditions: list[Condition] = Field(default_factory=list)
    last_update_time: Timestamp | None = None


class GPUResourceQuota(KubeObject):
    """GPU quota of one namespace; the oldest one wins when several exist."""

    kind: Literal["GPUResourceQuota"] = "GPUResourceQuota"
    spec: GPUResourceQuotaSpec = Field(default_factory=GPUResourceQuotaSpec)
    status: GPUResourceQuotaStatus = Field(default_factory=GPUResourceQuotaStatus)
