"""`autoScalingConfig.autoSetResources` as the autoscaler uses it (docs/autoscaling.md): every
field parsed and bounded, with the documented defaults; a bad value is one
`AutoScaleConfigError` naming the field (the workload gets a condition, nothing is resized).
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Final, Literal

from tensorfusion.domain.durations import DurationError, parse_go_duration
from tensorfusion.domain.model.autoscaling import AutoSetResources

__all__ = [
    "DEFAULTS",
    "MIN_INTERVAL_S",
    "AutoScaleConfigError",
    "AutoSetSettings",
    "parse_auto_set",
    "parse_seconds",
]

TargetResource = Literal["compute", "vram", "all"]
MIN_INTERVAL_S: Final = 10.0
MAX_HISTORY_S: Final = 30 * 86_400.0


class AutoScaleConfigError(ValueError):
    """A field of `autoSetResources` cannot be used; the message names it."""


@dataclass(frozen=True, slots=True)
class AutoSetSettings:
    """Right-sizing of one workload. Percentiles are fractions in (0, 1]; ratios bound the new
    request against the original one; times in seconds."""

    enable: bool = False
    target_resource: TargetResource = "all"
    target_compute_percentile: float = 0.95
    lower_bound_compute_percentile: float = 0.5
    upper_bound_compute_percentile: float = 0.99
    target_vram_percentile: float = 0.95
    lower_bound_vram_percentile: float = 0.5
    upper_bound_vram_percentile: float = 0.99
    margin_fraction: float = 0.15
    update_threshold: float = 0.1
    min_compute_resources_ratio: float = 0.1
    max_compute_resources_ratio: float = 1.0
    min_vram_resources_ratio: float = 0.1
    max_vram_resources_ratio: float = 1.0
    history_data_period_s: float = 86_400.0
    initial_delay_period_s: float = 1_800.0
    interval_s: float = 30.0

    @property
    def compute(self) -> bool:
        """TFLOPS are right-sized."""
        return self.target_resource in ("compute", "all")

    @property
    def vram(self) -> bool:
        """VRAM is right-sized."""
        return self.target_resource in ("vram", "all")


DEFAULTS: Final = AutoSetSettings()


def _number(field: str, text: str | None, default: float, low: float, high: float) -> float:
    if text is None or not text.strip():
        return default
    try:
        value = Decimal(text.strip().removesuffix("%"))
    except InvalidOperation:
        raise AutoScaleConfigError(f'{field}: invalid value "{text}": not a number') from None
    if not value.is_finite():
        raise AutoScaleConfigError(f'{field}: invalid value "{text}": not a finite number')
    if text.strip().endswith("%"):
        value /= 100
    if not (Decimal(str(low)) <= value <= Decimal(str(high))):
        raise AutoScaleConfigError(
            f'{field}: invalid value "{text}": must be between {low:g} and {high:g}'
        )
    return float(value)


def parse_seconds(field: str, text: str | None, default: float, low: float) -> float:
    """A Go duration in seconds within [low, 30 days] (`default` when unset); AutoScaleConfigError
    naming `field` otherwise."""
    if text is None or not text.strip():
        return default
    try:
        seconds = parse_go_duration(text.strip()) / 1e9
    except DurationError:
        raise AutoScaleConfigError(
            f'{field}: invalid value "{text}": must be a duration such as 30s or 24h'
        ) from None
    if not low <= seconds <= MAX_HISTORY_S:
        raise AutoScaleConfigError(
            f'{field}: invalid value "{text}": must be between {low:g}s and 30 days'
        )
    return seconds


def parse_auto_set(spec: AutoSetResources | None) -> AutoSetSettings:
    """The settings of `spec` (defaults for absent fields); AutoScaleConfigError on a bad one."""
    if spec is None:
        return DEFAULTS
    d = DEFAULTS

    def percentile(name: str, text: str | None, default: float) -> float:
        return _number(name, text, default, 0.01, 1.0)

    settings = AutoSetSettings(
        enable=bool(spec.enable),
        target_resource=spec.target_resource or d.target_resource,
        target_compute_percentile=percentile(
            "targetComputePercentile", spec.target_compute_percentile,
            d.target_compute_percentile),
        lower_bound_compute_percentile=percentile(
            "lowerBoundComputePercentile", spec.lower_bound_compute_percentile,
            d.lower_bound_compute_percentile),
        upper_bound_compute_percentile=percentile(
            "upperBoundComputePercentile", spec.upper_bound_compute_percentile,
            d.upper_bound_compute_percentile),
        target_vram_percentile=percentile(
            "targetVRAMPercentile", spec.target_vram_percentile, d.target_vram_percentile),
        lower_bound_vram_percentile=percentile(
            "lowerBoundVRAMPercentile", spec.lower_bound_vram_percentile,
            d.lower_bound_vram_percentile),
        upper_bound_vram_percentile=percentile(
            "upperBoundVRAMPercentile", spec.upper_bound_vram_percentile,
            d.upper_bound_vram_percentile),
        margin_fraction=_number("marginFraction", spec.margin_fraction, d.margin_fraction, 0, 10),
        update_threshold=_number("updateThreshold", spec.update_threshold, d.update_threshold,
                                 0, 10),
        min_compute_resources_ratio=_number(
            "minComputeResourcesRatio", spec.min_compute_resources_ratio,
            d.min_compute_resources_ratio, 0.01, 100),
        max_compute_resources_ratio=_number(
            "maxComputeResourcesRatio", spec.max_compute_resources_ratio,
            d.max_compute_resources_ratio, 0.01, 100),
        min_vram_resources_ratio=_number(
            "minVRAMResourcesRatio", spec.min_vram_resources_ratio, d.min_vram_resources_ratio,
            0.01, 100),
        max_vram_resources_ratio=_number(
            "maxVRAMResourcesRatio", spec.max_vram_resources_ratio, d.max_vram_resources_ratio,
            0.01, 100),
        history_data_period_s=parse_seconds("historyDataPeriod", spec.history_data_period,
                                       d.history_data_period_s, 60.0),
        initial_delay_period_s=parse_seconds("initialDelayPeriod", spec.initial_delay_period,
                                        d.initial_delay_period_s, 0.0),
        interval_s=parse_seconds("interval", spec.interval, d.interval_s, MIN_INTERVAL_S),
    )  # fmt: skip
    _ordered(settings)
    return settings


def _ordered(s: AutoSetSettings) -> None:
    for kind, low, target, high in (
        ("Compute", s.lower_bound_compute_percentile, s.target_compute_percentile,
         s.upper_bound_compute_percentile),
        ("VRAM", s.lower_bound_vram_percentile, s.target_vram_percentile,
         s.upper_bound_vram_percentile),
    ):  # fmt: skip
        if not low <= target <= high:
            raise AutoScaleConfigError(
                f"lowerBound{kind}Percentile <= target{kind}Percentile <= "
                f"upperBound{kind}Percentile does not hold ({low:g}, {target:g}, {high:g})"
            )
    for kind, low, high in (
        ("Compute", s.min_compute_resources_ratio, s.max_compute_resources_ratio),
        ("VRAM", s.min_vram_resources_ratio, s.max_vram_resources_ratio),
    ):
        if low > high:
            raise AutoScaleConfigError(
                f"min{kind}ResourcesRatio ({low:g}) is above max{kind}ResourcesRatio ({high:g})"
            )
