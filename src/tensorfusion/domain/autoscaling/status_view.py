"""What the autoscaler says of a workload, as `GET /api/allocation` shows it beside each of its
allocations (docs/api.md): the recommended resources, the `AutoScaled` condition and the cron
rule in force, read from the workload's status."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from tensorfusion.domain.object_views import name_of, namespace_of

__all__ = ["scaling_view", "scaling_views"]


def scaling_view(workload: Mapping[str, Any]) -> dict[str, Any] | None:
    """`{recommended, condition, activeCronScalingRule}` of one workload; None when the
    autoscaler has said nothing of it."""
    status = workload.get("status")
    if not isinstance(status, Mapping):
        return None
    recommended = status.get("recommendation")
    rule = status.get("activeCronScalingRule")
    condition = next((c for c in status.get("conditions") or [] if isinstance(c, Mapping)
                      and c.get("type") == "AutoScaled"), None)  # fmt: skip
    if not recommended and not rule and condition is None:
        return None
    return {
        "recommended": dict(recommended) if isinstance(recommended, Mapping) else None,
        "condition": None if condition is None else {
            key: condition.get(key)
            for key in ("status", "reason", "message", "lastTransitionTime")},
        "activeCronScalingRule": rule.get("name") if isinstance(rule, Mapping) else None,
    }  # fmt: skip


def scaling_views(workloads: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str], Any]:
    """`scaling_view` of every workload that has one, by (namespace, name)."""
    views = {}
    for workload in workloads:
        view = scaling_view(workload)
        if view is not None:
            views[(namespace_of(workload), name_of(workload))] = view
    return views
