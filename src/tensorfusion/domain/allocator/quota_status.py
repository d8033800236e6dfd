"""GPUResourceQuota: which quota a namespace enforces, spec validation, and status (api.md §2.7).

A quota whose spec does not hold (negative values, limits below requests, a threshold outside
0..100, a GPU count cap outside 1..128) is not enforced and says why in its `Ready` condition;
when several quotas share a namespace the oldest wins and the others are `Superseded`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import ROUND_FLOOR, Decimal
from typing import Any, Final

from tensorfusion.domain.allocator.mapping import quota_caps
from tensorfusion.domain.allocator.quota import NamespaceQuota, QuotaAmounts
from tensorfusion.domain.model.errors import ModelError
from tensorfusion.domain.model.meta import Condition
from tensorfusion.domain.model.quota import (
    GPUResourceQuota,
    GPUResourceQuotaSpec,
    GPUResourceQuotaStatus,
    QuotaAvailablePercent,
    QuotaUsage,
)
from tensorfusion.domain.model.registry import load_as
from tensorfusion.domain.model.resources import Resource
from tensorfusion.domain.object_views import creation_timestamp_of, name_of, namespace_of
from tensorfusion.domain.quantities import Quantity, format_bytes, format_milli

__all__ = [
    "ALERT_THRESHOLD_REACHED",
    "READY",
    "QuotaReading",
    "available_percent",
    "choose_effective",
    "merge_conditions",
    "quota_spec_notes",
    "quota_spec_problems",
    "quota_status",
    "read_quota",
]

READY: Final = "Ready"
ALERT_THRESHOLD_REACHED: Final = "AlertThresholdReached"
REASON_ENFORCED: Final = "Enforced"
REASON_INVALID: Final = "InvalidSpec"
REASON_SUPERSEDED: Final = "Superseded"
_MAX_GPU_COUNT: Final = 128
_HUNDRED: Final = Decimal(100)
_CENT: Final = Decimal("0.01")


@dataclass(frozen=True, slots=True)
class QuotaReading:
    """A GPUResourceQuota as read from the API: the model, or why it cannot be enforced."""

    namespace: str
    name: str
    creation_timestamp: str
    quota: GPUResourceQuota | None
    problems: tuple[str, ...] = ()

    @property
    def enforceable(self) -> bool:
        """Whether the spec holds and the quota can be enforced."""
        return self.quota is not None and not self.problems


def read_quota(data: Mapping[str, Any]) -> QuotaReading:
    """Load a GPUResourceQuota object and check its spec; never raises for a bad spec."""
    identity = (namespace_of(data), name_of(data), str(creation_timestamp_of(data) or ""))
    try:
        quota = load_as(GPUResourceQuota, data)
    except ModelError as error:
        problems = tuple(str(issue) for issue in error.issues)
        return QuotaReading(*identity, None, problems or (str(error),))
    return QuotaReading(*identity, quota, tuple(quota_spec_problems(quota.spec)))


def quota_spec_problems(spec: GPUResourceQuotaSpec) -> list[str]:
    """What makes a (schema-valid) quota spec unenforceable, one message per field."""
    problems: list[str] = []
    total, single = spec.total, spec.single
    if total.max_workers < 0:
        problems.append(
            f"spec.total.maxWorkers: invalid value {total.max_workers}: must be at least 0"
        )
    if not 0 <= total.alert_threshold_percent <= 100:
        problems.append(
            f"spec.total.alertThresholdPercent: invalid value {total.alert_threshold_percent}: "
            "must be between 0 and 100"
        )
    count = single.max_gpu_count
    if count is not None and not 1 <= count <= _MAX_GPU_COUNT:
        problems.append(
            f"spec.single.maxGPUCount: invalid value {count}: must be between 1 and "
            f"{_MAX_GPU_COUNT}"
        )
    for where, requests, limits in (
        ("spec.total", total.requests, total.limits),
        ("spec.single", single.max_requests, single.max_limits),
    ):
        problems.extend(_limits_below_requests(where, requests, limits))
    return problems


def quota_spec_notes(spec: GPUResourceQuotaSpec) -> list[str]:
    """What of a valid spec is accepted but not enforced (said in the Ready condition)."""
    notes = []
    for side, resource in (("requests", spec.total.requests), ("limits", spec.total.limits)):
        if resource is not None and resource.compute is not None and not resource.compute.is_zero():
            notes.append(
                f"spec.total.{side}.compute is not enforced: namespace totals are capped in "
                "tflops and vram (a percent request is charged in TFLOPs of its GPUs)"
            )
    return notes


def _limits_below_requests(
    where: str, requests: Resource | None, limits: Resource | None
) -> list[str]:
    request_side = "requests" if where == "spec.total" else "maxRequests"
    limit_side = "limits" if where == "spec.total" else "maxLimits"
    problems = []
    for component in ("tflops", "compute", "vram"):
        request: Quantity | None = getattr(requests, component, None) if requests else None
        limit: Quantity | None = getattr(limits, component, None) if limits else None
        if request is None or limit is None or request.is_zero() or limit.is_zero():
            continue
        if limit.value < request.value:
            shown = _shown_vram if component == "vram" else _shown_milli
            problems.append(
                f"{where}.{limit_side}.{component}: invalid value {shown(limit)}: must not be "
                f"below {where}.{request_side}.{component} ({shown(request)})"
            )
    return problems


def _shown_vram(quantity: Quantity) -> str:
    return format_bytes(quantity.ceil())


def _shown_milli(quantity: Quantity) -> str:
    return format_milli(quantity.milli())


def choose_effective(
    readings: Iterable[QuotaReading],
) -> tuple[dict[str, QuotaReading], list[QuotaReading]]:
    """Per namespace the oldest quota (creationTimestamp, then name); the others superseded."""
    by_namespace: dict[str, list[QuotaReading]] = {}
    for reading in readings:
        by_namespace.setdefault(reading.namespace, []).append(reading)
    effective: dict[str, QuotaReading] = {}
    superseded: list[QuotaReading] = []
    for namespace, found in by_namespace.items():
        ordered = sorted(found, key=lambda r: (r.creation_timestamp, r.name))
        effective[namespace] = ordered[0]
        superseded.extend(ordered[1:])
    return effective, superseded


def available_percent(cap: int, used: int, zero_is_unlimited: bool = True) -> str:
    """`(cap − used) / cap` in percent with two decimals, floored at 0; "100" without a cap.

    `maxWorkers: 0` is enforced (no worker may be allocated), so it reads "0.00"
    (`zero_is_unlimited=False`); a zero TFLOPs or VRAM cap is not enforced.
    """
    if cap <= 0:
        return "100" if zero_is_unlimited else "0.00"
    value = (Decimal(cap - used) * _HUNDRED / Decimal(cap)).quantize(_CENT, ROUND_FLOOR)
    return str(max(value, Decimal("0.00")))


def _usage_json(usage: QuotaAmounts) -> QuotaUsage:
    def resource(tflops: int, vram: int) -> Resource:
        return Resource.model_validate(
            {"tflops": format_milli(tflops) if tflops else None,
             "vram": format_bytes(vram) if vram else None}
        )  # fmt: skip

    return QuotaUsage(
        requests=resource(usage.request_tflops, usage.request_vram),
        limits=resource(usage.limit_tflops, usage.limit_vram),
        workers=usage.workers,
    )


def quota_status(
    reading: QuotaReading,
    quota: NamespaceQuota | None,
    now: str,
    previous: Sequence[Condition] = (),
    superseded_by: str | None = None,
) -> GPUResourceQuotaStatus:
    """The status the quota sync writes: committed usage, available percents, conditions.

    `quota` is the allocator's enforced quota of the namespace (None when this one is not
    enforced); `superseded_by` names the quota that wins the namespace instead.
    """
    usage = quota.committed if quota is not None else QuotaAmounts()
    conditions: list[Condition] = []
    percents = QuotaAvailablePercent()
    alert: Condition | None = None
    if superseded_by is not None:
        message = f"the older quota {superseded_by} is enforced in this namespace"
        ready = _condition(READY, False, REASON_SUPERSEDED, message)
    elif not reading.enforceable or reading.quota is None:
        message = "not enforced: " + "; ".join(reading.problems)
        ready = _condition(READY, False, REASON_INVALID, message)
    else:
        spec = reading.quota.spec
        total = spec.total
        requests, limits = quota_caps(total.requests), quota_caps(total.limits)
        percents = QuotaAvailablePercent.model_validate({
            "requests.tflops": available_percent(requests.tflops, usage.request_tflops),
            "requests.vram": available_percent(requests.vram, usage.request_vram),
            "limits.tflops": available_percent(limits.tflops, usage.limit_tflops),
            "limits.vram": available_percent(limits.vram, usage.limit_vram),
            "workers": available_percent(total.max_workers, usage.workers, False),
        })  # fmt: skip
        notes = "".join(f"; {note}" for note in quota_spec_notes(spec))
        ready = _condition(READY, True, REASON_ENFORCED, f"the quota is enforced{notes}")
        alert = _alert_condition(percents, total.alert_threshold_percent)
    conditions.append(ready)
    if alert is not None:
        conditions.append(alert)
    return GPUResourceQuotaStatus(
        used=_usage_json(usage),
        available_percent=percents,
        conditions=merge_conditions(previous, conditions, now),
        last_update_time=now,
    )


def _alert_condition(percents: QuotaAvailablePercent, threshold: int) -> Condition:
    floor = _HUNDRED - Decimal(threshold)
    low = {
        name: value
        for name, value in percents.model_dump(by_alias=True, exclude_none=True).items()
        if Decimal(value) < floor
    }
    if not low:
        message = f"every resource has at least {floor}% available"
        return _condition(ALERT_THRESHOLD_REACHED, False, "BelowThreshold", message)
    listed = ", ".join(f"{name} {value}%" for name, value in sorted(low.items()))
    message = f"available below {floor}% (alertThresholdPercent {threshold}): {listed}"
    return _condition(ALERT_THRESHOLD_REACHED, True, "ThresholdReached", message)


def _condition(kind: str, status: bool, reason: str, message: str) -> Condition:
    return Condition(
        type=kind, status="True" if status else "False", reason=reason, message=message
    )


def merge_conditions(
    previous: Sequence[Condition], current: Sequence[Condition], now: str
) -> list[Condition]:
    """`current` with `lastTransitionTime` kept from `previous` when the status is unchanged."""
    before = {condition.type: condition for condition in previous}
    merged = []
    for condition in current:
        old = before.get(condition.type)
        since = (
            old.last_transition_time
            if old is not None and old.status == condition.status and old.last_transition_time
            else now
        )
        merged.append(condition.model_copy(update={"last_transition_time": since}))
    return merged
