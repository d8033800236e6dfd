"""The right-sizing math: percentiles, margin, the ratio bounds, the update threshold, the
limit's ratio kept, too few samples changing nothing; the settings' defaults and bounds."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tensorfusion.domain.allocation_request import ResourceAmount
from tensorfusion.domain.autoscaling.recommendation import (
    MIN_SAMPLES,
    UsagePercentiles,
    percentile,
    recommend,
)
from tensorfusion.domain.autoscaling.settings import (
    DEFAULTS,
    AutoScaleConfigError,
    parse_auto_set,
)
from tensorfusion.domain.model.autoscaling import AutoSetResources

GIB = 1 << 30
ORIGINAL = (ResourceAmount(tflops_milli=100_000, vram_bytes=20 * GIB),
            ResourceAmount(tflops_milli=200_000, vram_bytes=20 * GIB))  # fmt: skip


def usage(target: float, lower: float | None = None, upper: float | None = None,
          samples: int = 1000) -> UsagePercentiles:  # fmt: skip
    return UsagePercentiles(samples, lower if lower is not None else target * 0.8, target,
                            upper if upper is not None else target * 1.1)  # fmt: skip


def test_percentile_interpolates_like_quantile_cont() -> None:
    assert percentile([1, 2, 3, 4], 0.5) == 2.5
    assert percentile([5], 0.95) == 5
    assert percentile([], 0.9) == 0.0
    assert percentile(list(range(101)), 0.95) == 95


def test_an_over_requested_workload_shrinks_to_its_percentile_with_the_margin() -> None:
    found = recommend(DEFAULTS, original=ORIGINAL, current=ORIGINAL,
                      compute=usage(40_000), vram=usage(4 * GIB))  # fmt: skip
    assert found.change
    assert found.requests.tflops_milli == 46_000  # 40 TFLOPS x 1.15
    assert found.limits.tflops_milli == 92_000  # the original limit/request ratio of 2 kept
    assert found.requests.vram_bytes == found.limits.vram_bytes == int(4 * GIB * 1.15) + 1


def test_the_ratio_bounds_hold_the_request() -> None:
    found = recommend(DEFAULTS, original=ORIGINAL, current=ORIGINAL,
                      compute=usage(1.0), vram=usage(500 * GIB))  # fmt: skip
    assert found.requests.tflops_milli == 10_000  # min ratio 0.1 of 100 TFLOPS
    assert found.requests.vram_bytes == 20 * GIB  # max ratio 1.0: never above the original
    assert found.vram is not None and not found.vram.change


def test_a_change_within_the_threshold_and_the_bounds_is_not_made() -> None:
    current = (ResourceAmount(tflops_milli=48_000, vram_bytes=20 * GIB), ORIGINAL[1])
    found = recommend(DEFAULTS, original=ORIGINAL, current=current,
                      compute=usage(40_000, lower=30_000, upper=50_000), vram=None)  # fmt: skip
    assert not found.change
    assert found.requests == current[0] and found.limits == current[1]


def test_too_few_samples_change_nothing() -> None:
    found = recommend(DEFAULTS, original=ORIGINAL, current=ORIGINAL,
                      compute=usage(1.0, samples=MIN_SAMPLES - 1), vram=None)  # fmt: skip
    assert not found.change
    assert found.compute is not None and "fewer than" in found.compute.reason


def test_the_target_resource_limits_what_is_touched() -> None:
    settings = parse_auto_set(AutoSetResources(enable=True, target_resource="vram"))
    found = recommend(settings, original=ORIGINAL, current=ORIGINAL,
                      compute=usage(1.0), vram=usage(4 * GIB))  # fmt: skip
    assert found.compute is None and found.requests.tflops_milli == 100_000
    assert found.vram is not None and found.vram.change


@given(st.floats(0, 1e6), st.floats(0, 1), st.floats(0.01, 1), st.floats(1, 10))
def test_the_request_always_stays_within_the_ratio_bounds(
    used: float, margin: float, low: float, high: float
) -> None:
    settings = parse_auto_set(AutoSetResources(
        enable=True, margin_fraction=str(margin), min_compute_resources_ratio=str(low),
        max_compute_resources_ratio=str(high)))  # fmt: skip
    found = recommend(settings, original=ORIGINAL, current=ORIGINAL,
                      compute=usage(used), vram=None)  # fmt: skip
    request = found.requests.tflops_milli
    assert low * 100_000 - 1 <= request <= high * 100_000 + 1
    assert found.limits.tflops_milli >= request


@pytest.mark.parametrize(("fields", "message"), [
    ({"target_compute_percentile": "1.5"}, "targetComputePercentile: invalid value \"1.5\""),
    ({"margin_fraction": "lots"}, "marginFraction: invalid value \"lots\": not a number"),
    ({"interval": "1s"}, "interval: invalid value \"1s\": must be between 10s and 30 days"),
    ({"history_data_period": "forever"}, "historyDataPeriod: invalid value \"forever\""),
    ({"lower_bound_vram_percentile": "0.99", "target_vram_percentile": "0.5"},
     "lowerBoundVRAMPercentile <= targetVRAMPercentile"),
    ({"min_compute_resources_ratio": "2", "max_compute_resources_ratio": "1"},
     "minComputeResourcesRatio (2) is above maxComputeResourcesRatio (1)"),
])  # fmt: skip
def test_a_bad_setting_is_one_error_naming_it(fields: dict[str, str], message: str) -> None:
    with pytest.raises(AutoScaleConfigError) as raised:
        parse_auto_set(AutoSetResources(enable=True, **fields))
    assert str(raised.value).startswith(message)


def test_percent_strings_and_defaults() -> None:
    settings = parse_auto_set(AutoSetResources(enable=True, target_compute_percentile="90%",
                                               interval="1m"))  # fmt: skip
    assert (settings.target_compute_percentile, settings.interval_s) == (0.9, 60.0)
    assert parse_auto_set(None) == DEFAULTS and not DEFAULTS.enable
