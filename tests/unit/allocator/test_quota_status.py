"""GPUResourceQuota validation, the effective quota of a namespace, and the status written."""

from __future__ import annotations

from typing import Any

from tensorfusion.domain.allocator.mapping import quota_spec
from tensorfusion.domain.allocator.quota import NamespaceQuota, QuotaAmounts
from tensorfusion.domain.allocator.quota_status import (
    available_percent,
    choose_effective,
    quota_status,
    read_quota,
)
from tensorfusion.domain.model.meta import Condition

from .builders import tflops, vram

NOW = "2026-12-01T00:00:00Z"


def _raw(spec: dict[str, Any], name: str = "q", created: str = "2026-01-01T00:00:00Z") -> Any:
    return {
        "apiVersion": "tensor-fusion.ai/v1",
        "kind": "GPUResourceQuota",
        "metadata": {"name": name, "namespace": "ml", "creationTimestamp": created},
        "spec": spec,
    }


def _conditions(status: Any) -> dict[str, Condition]:
    return {c.type: c for c in status.conditions}


def test_available_percent_has_two_decimals_is_floored_at_zero_and_100_without_cap() -> None:
    assert available_percent(0, 5) == "100"
    assert available_percent(3000, 1000) == "66.66"
    assert available_percent(100, 0) == "100.00"
    assert available_percent(100, 250) == "0.00"


def test_an_enforced_quota_reports_usage_percents_and_the_alert_threshold() -> None:
    reading = read_quota(
        _raw(
            {
                "total": {
                    "requests": {"tflops": "1000", "vram": "100Gi"},
                    "maxWorkers": 10,
                    "alertThresholdPercent": 50,
                }
            }
        )
    )
    assert reading.enforceable
    assert reading.quota is not None
    enforced = NamespaceQuota(quota_spec(reading.quota))
    enforced.committed.add(QuotaAmounts(tflops("600"), vram("10Gi"), 0, 0, 2))
    status = quota_status(reading, enforced, NOW)
    percents = status.available_percent
    assert percents is not None
    assert (percents.requests_tflops, percents.requests_vram, percents.workers) == (
        "40.00",
        "90.00",
        "80.00",
    )
    assert (percents.limits_tflops, percents.limits_vram) == ("100", "100")
    assert status.used is not None and status.used.workers == 2
    conditions = _conditions(status)
    assert conditions["Ready"].status == "True"
    alert = conditions["AlertThresholdReached"]
    assert alert.status == "True" and alert.message is not None
    assert "requests.tflops 40.00%" in alert.message
    assert alert.last_transition_time == NOW
    # An unchanged status keeps its transition time.
    later = quota_status(reading, enforced, "2026-12-02T00:00:00Z", previous=status.conditions)
    assert _conditions(later)["AlertThresholdReached"].last_transition_time == NOW
    enforced.committed.add(QuotaAmounts(tflops("600"), 0, 0, 0, 0), -1)
    calm = quota_status(reading, enforced, "2026-12-03T00:00:00Z", previous=later.conditions)
    assert _conditions(calm)["AlertThresholdReached"].status == "False"
    assert _conditions(calm)["AlertThresholdReached"].last_transition_time == (
        "2026-12-03T00:00:00Z"
    )


def test_limits_below_requests_make_the_quota_unenforced_with_a_condition() -> None:
    reading = read_quota(
        _raw(
            {
                "total": {"requests": {"tflops": "100"}, "limits": {"tflops": "50"}},
                "single": {"maxRequests": {"vram": "8Gi"}, "maxLimits": {"vram": "4Gi"}},
            }
        )
    )
    assert not reading.enforceable
    assert reading.problems == (
        "spec.total.limits.tflops: invalid value 50: must not be below "
        "spec.total.requests.tflops (100)",
        "spec.single.maxLimits.vram: invalid value 4Gi: must not be below "
        "spec.single.maxRequests.vram (8Gi)",
    )
    ready = _conditions(quota_status(reading, None, NOW))["Ready"]
    assert (ready.status, ready.reason) == ("False", "InvalidSpec")
    assert ready.message is not None and "spec.total.limits.tflops" in ready.message


def test_negative_values_and_a_threshold_outside_0_100_are_reported_not_raised() -> None:
    negative = read_quota(_raw({"total": {"requests": {"vram": "-1Gi"}}}))
    assert not negative.enforceable
    assert any("spec.total.requests.vram" in p and '"-1Gi"' in p for p in negative.problems)
    threshold = read_quota(_raw({"total": {"alertThresholdPercent": 150}}))
    assert not threshold.enforceable
    assert any("alertThresholdPercent" in p and "150" in p for p in threshold.problems)
    workers = read_quota(_raw({"total": {"maxWorkers": -3}, "single": {"maxGPUCount": 0}}))
    assert workers.problems == (
        "spec.total.maxWorkers: invalid value -3: must be at least 0",
        "spec.single.maxGPUCount: invalid value 0: must be between 1 and 128",
    )


def test_the_oldest_quota_of_a_namespace_wins_and_the_others_are_superseded() -> None:
    old = read_quota(_raw({}, name="b", created="2026-01-01T00:00:00Z"))
    same_time = read_quota(_raw({}, name="c", created="2026-01-01T00:00:00Z"))
    young = read_quota(_raw({}, name="a", created="2026-06-01T00:00:00Z"))
    effective, superseded = choose_effective([young, same_time, old])
    assert effective["ml"].name == "b"
    assert sorted(r.name for r in superseded) == ["a", "c"]
    ready = _conditions(quota_status(young, None, NOW, superseded_by="b"))["Ready"]
    assert (ready.status, ready.reason) == ("False", "Superseded")


def test_a_zero_worker_cap_reads_as_nothing_available_and_compute_totals_are_noted() -> None:
    reading = read_quota(
        _raw({"total": {"maxWorkers": 0, "requests": {"compute": "50", "vram": "1Gi"}}})
    )
    assert reading.enforceable and reading.quota is not None
    status = quota_status(reading, NamespaceQuota(quota_spec(reading.quota)), NOW)
    assert status.available_percent is not None
    assert status.available_percent.workers == "0.00"
    ready = _conditions(status)["Ready"]
    assert ready.status == "True" and ready.message is not None
    assert "spec.total.requests.compute is not enforced" in ready.message
