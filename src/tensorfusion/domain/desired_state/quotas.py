"""GPUResourceQuota status as the quota sync writes it every 10 s when it changed (api.md §2.7).

Which quota a namespace enforces, usage, available percents and conditions come from
`allocator.quota_status`; this module decides per quota object what to write and whether its
`AlertThresholdReached` condition just turned True.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from tensorfusion.domain.allocator.quota import NamespaceQuota
from tensorfusion.domain.allocator.quota_status import (
    ALERT_THRESHOLD_REACHED,
    QuotaReading,
    choose_effective,
    quota_status,
    read_quota,
)
from tensorfusion.domain.model.meta import Condition
from tensorfusion.domain.model.registry import to_wire
from tensorfusion.domain.object_views import Obj, status_of

__all__ = ["QuotaRole", "QuotaStatusUpdate", "desired_quota_status", "quota_roles"]


@dataclass(frozen=True, slots=True)
class QuotaRole:
    """A quota as read, and the older quota that supersedes it in its namespace (if any)."""

    reading: QuotaReading
    superseded_by: str | None = None


def quota_roles(quotas: Iterable[Obj]) -> dict[tuple[str, str], QuotaRole]:
    """Every quota by (namespace, name), with the quota that wins its namespace."""
    readings = [read_quota(quota) for quota in quotas]
    effective, superseded = choose_effective(readings)
    roles = {(r.namespace, r.name): QuotaRole(r) for r in effective.values()}
    for reading in superseded:
        winner = effective[reading.namespace].name
        roles[(reading.namespace, reading.name)] = QuotaRole(reading, winner)
    return roles


@dataclass(frozen=True, slots=True)
class QuotaStatusUpdate:
    """The status to write (None when nothing but the update time would change) and the
    `AlertThresholdReached` condition when it turned True with this write."""

    status: dict[str, Any] | None
    alert: Condition | None = None


def _conditions(status: Mapping[str, Any]) -> list[Condition]:
    found = []
    for raw in status.get("conditions") or ():
        try:
            found.append(Condition.model_validate(raw))
        except ValidationError:
            continue
    return found


def _without_update_time(status: Mapping[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in status.items() if key != "lastUpdateTime"}


def desired_quota_status(
    quota: Obj, role: QuotaRole, enforced: Mapping[str, NamespaceQuota], now: str
) -> QuotaStatusUpdate:
    """The quota's status from the allocator's enforced quotas (by namespace)."""
    reading = role.reading
    namespace_quota = enforced.get(reading.namespace)
    if (
        role.superseded_by is not None
        or not reading.enforceable
        or namespace_quota is None
        or namespace_quota.spec.name != reading.name
    ):
        namespace_quota = None
    current = status_of(quota)
    previous = _conditions(current)
    model = quota_status(reading, namespace_quota, now, previous, role.superseded_by)
    status = to_wire(model)
    if _without_update_time(status) == _without_update_time(current):
        return QuotaStatusUpdate(None)
    was = {c.type: c.status for c in previous}
    alert = next(
        (c for c in model.conditions if c.type == ALERT_THRESHOLD_REACHED and c.status == "True"),
        None,
    )
    if alert is not None and was.get(ALERT_THRESHOLD_REACHED) == "True":
        alert = None
    return QuotaStatusUpdate(status, alert)
