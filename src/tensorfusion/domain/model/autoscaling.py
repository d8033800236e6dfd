"""Auto-scaling settings of workloads and scheduling templates (declared, api.md §2.5-2.6)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from tensorfusion.domain.model.base import WireModel
from tensorfusion.domain.model.resources import Resources

__all__ = [
    "AutoScalingConfig",
    "AutoSetResources",
    "CronScalingRule",
    "ExternalScaler",
    "SecretReference",
]


class AutoSetResources(WireModel):
    """Adjust requests and limits to recent usage."""

    enable: bool | None = None
    target_resource: Literal["compute", "vram", "all"] | None = None
    target_compute_percentile: str | None = None
    lower_bound_compute_percentile: str | None = None
    upper_bound_compute_percentile: str | None = None
    target_vram_percentile: str | None = Field(None, alias="targetVRAMPercentile")
    lower_bound_vram_percentile: str | None = Field(None, alias="lowerBoundVRAMPercentile")
    upper_bound_vram_percentile: str | None = Field(None, alias="upperBoundVRAMPercentile")
    margin_fraction: str | None = None
    update_threshold: str | None = None
    min_compute_resources_ratio: str | None = None
    max_compute_resources_ratio: str | None = None
    min_vram_resources_ratio: str | None = Field(None, alias="minVRAMResourcesRatio")
    max_vram_resources_ratio: str | None = Field(None, alias="maxVRAMResourcesRatio")
    history_data_period: str | None = None
    initial_delay_period: str | None = None
    interval: str | None = None


class CronScalingRule(WireModel):
    """Resources to use between two cron times."""

    enable: bool | None = None
    name: str | None = None
    start: str | None = None
    end: str | None = None
    desired_resources: Resources | None = None


class SecretReference(WireModel):
    """A Secret by name and namespace."""

    name: str | None = None
    namespace: str | None = None


class ExternalScaler(WireModel):
    """An external service that recommends resources."""

    enable: bool | None = None
    url: str | None = None
    api_key_secret_ref: SecretReference | None = None
    initial_delay_period: str | None = None
    interval: str | None = None


class AutoScalingConfig(WireModel):
    """Automatic resource adjustment (declared: no autoscaler runs in this version)."""

    crd_preserve_unknown_fields = True

    auto_set_resources: AutoSetResources | None = None
    cron_scaling_rules: list[CronScalingRule] = Field(default_factory=list)
    external_scaler: ExternalScaler | None = None
