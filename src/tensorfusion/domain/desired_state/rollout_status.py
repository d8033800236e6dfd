"""What a pool's rollouts (deployment.md §11) read from and write to the GPUPool: the policy of
each component, the batch in progress and the last batch's time (pool annotations), the
component status, the conditions `MaintenanceWindow` and `ConfigSynced`, and the Events a
change of those conditions gives.

`rollout_policy` and `rollout_record` read; `component_status_fields`, `record_annotations`,
`rollout_conditions` and `rollout_events` give what to write, all pure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final, Literal

from tensorfusion.domain.annotations import (
    COMPONENT_CLIENT,
    COMPONENT_HYPERVISOR,
    COMPONENT_WORKER,
    KEYS,
)
from tensorfusion.domain.desired_state.rollout import (
    NOT_ENFORCED,
    WAITING,
    RolloutPlan,
    RolloutPolicy,
    WindowCondition,
)
from tensorfusion.domain.durations import DurationError, parse_go_duration
from tensorfusion.domain.object_views import Obj, annotations_of, metadata_of, status_of
from tensorfusion.domain.timestamps import parse_rfc3339

__all__ = [
    "COMPONENTS",
    "CONFIG_SYNCED",
    "MAINTENANCE_WINDOW",
    "RolloutEvent",
    "RolloutRecord",
    "component_status_fields",
    "record_annotations",
    "rollout_conditions",
    "rollout_events",
    "rollout_policy",
    "rollout_record",
]

COMPONENTS: Final = (COMPONENT_HYPERVISOR, COMPONENT_WORKER, COMPONENT_CLIENT)
MAINTENANCE_WINDOW: Final = "MaintenanceWindow"
CONFIG_SYNCED: Final = "ConfigSynced"
WINDOW_NOT_ENFORCED_EVENT: Final = "MaintenanceWindowNotEnforced"
WAITING_FOR_WINDOW_EVENT: Final = "RolloutWaitingForMaintenanceWindow"
INVALID_WINDOW_EVENT: Final = "InvalidMaintenanceWindow"
OUTSIDE_WINDOW: Final = "OutsideWindow"
_DEFAULT_INTERVAL: Final = "1s"
_DEFAULT_MAX_DURATION: Final = "10m"
_NS_PER_S: Final = 1e9


@dataclass(frozen=True, slots=True)
class RolloutRecord:
    """A component's rollout as the pool's annotations keep it."""

    in_progress: tuple[str, ...] = ()
    last_batch_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class RolloutEvent:
    """An Event on the pool."""

    type: Literal["Normal", "Warning"]
    reason: str
    message: str


def _policy_spec(pool: Obj) -> Mapping[str, Any]:
    manager = (pool.get("spec") or {}).get("nodeManagerConfig") or {}
    policy = manager.get("nodePoolRollingUpdatePolicy") if isinstance(manager, Mapping) else None
    return policy if isinstance(policy, Mapping) else {}


def _seconds(value: object, default: str) -> float:
    try:
        return parse_go_duration(str(value)) / _NS_PER_S
    except DurationError:
        return parse_go_duration(default) / _NS_PER_S


def rollout_policy(pool: Obj, component: str) -> RolloutPolicy:
    """The pool's `nodePoolRollingUpdatePolicy` for `component` (CRD defaults for what is
    unset; the CRD validates the rest)."""
    spec = _policy_spec(pool)
    window = spec.get("maintenanceWindow") or {}
    includes = window.get("includes") if isinstance(window, Mapping) else None
    percentage = spec.get("batchPercentage", 100)
    return RolloutPolicy(
        auto_update=spec.get(f"autoUpdate{component.capitalize()}") is True,
        batch_percentage=percentage if isinstance(percentage, int) else 100,
        batch_interval_s=_seconds(spec.get("batchInterval", _DEFAULT_INTERVAL), _DEFAULT_INTERVAL),
        max_duration_s=_seconds(
            spec.get("maxDuration", _DEFAULT_MAX_DURATION), _DEFAULT_MAX_DURATION
        ),
        windows=tuple(str(entry) for entry in includes or () if entry),
        honour_windows=annotations_of(pool).get(KEYS.honour_maintenance_window) == "true",
    )


def rollout_record(pool: Obj, component: str) -> RolloutRecord:
    """The batch in progress and the last completed batch's time from the pool's annotations."""
    annotations = annotations_of(pool)
    text = str(annotations.get(KEYS.update_in_progress(component)) or "")
    last = parse_rfc3339(annotations.get(KEYS.batch_update_last_time(component)))
    return RolloutRecord(
        in_progress=tuple(name for name in text.split(",") if name),
        last_batch_at=None if last is None else datetime.fromtimestamp(last, UTC),
    )


def component_status_fields(component: str, plan: RolloutPlan) -> dict[str, Any]:
    """`status.componentStatus` fields of one component."""
    return {
        component: plan.hash,
        f"{component}ConfigSynced": plan.synced,
        f"{component}UpdateProgress": plan.progress,
    }


def record_annotations(
    pool: Obj, component: str, plan: RolloutPlan, now: str
) -> dict[str, str | None]:
    """The annotation changes (None removes) that keep the plan's batch and, when a batch just
    completed, stamp `<component>-batch-update-last-time` with `now`."""
    annotations = annotations_of(pool)
    wanted: dict[str, str | None] = {
        KEYS.update_in_progress(component): ",".join(plan.in_progress) or None,
    }
    if plan.batch_completed:
        wanted[KEYS.update_in_progress(component)] = None
        wanted[KEYS.batch_update_last_time(component)] = now
    return {key: value for key, value in wanted.items() if annotations.get(key) != value}


def _sync_condition(plans: Mapping[str, RolloutPlan]) -> dict[str, Any]:
    parts = []
    reason = "Synced"
    for component, plan in plans.items():
        if plan.synced:
            parts.append(f"{component}: synced")
            continue
        if plan.paused:
            state, why = "paused (batchPercentage 0)", "RolloutPaused"
        elif plan.waiting_for_window:
            state, why = "waiting for a maintenance window", "WaitingForWindow"
        elif plan.in_progress:
            state, why = f"batch in progress ({len(plan.in_progress)})", "RolloutInProgress"
        else:
            state, why = f"out of sync, {plan.progress}% updated", "OutOfSync"
        parts.append(f"{component}: {state}")
        if reason in ("Synced", "OutOfSync"):
            reason = why
    return {
        "type": CONFIG_SYNCED,
        "status": "True" if reason == "Synced" else "False",
        "reason": reason,
        "message": "; ".join(parts),
    }


def rollout_conditions(
    window: WindowCondition | None, plans: Mapping[str, RolloutPlan], generation: int | None
) -> tuple[dict[str, Any] | None, dict[str, Any]]:
    """The `MaintenanceWindow` condition (None: the pool has no window, remove it) and the
    `ConfigSynced` one (status False names each component's state: paused, waiting, in
    progress, out of sync). Outside an enforced window the reason is `WaitingForWindow` only
    while a batch waits for one, else `OutsideWindow`."""
    maintenance: dict[str, Any] | None = None
    if window is not None:
        reason, message = window.reason, window.message
        if reason == WAITING and not any(plan.waiting_for_window for plan in plans.values()):
            reason = OUTSIDE_WINDOW
            message = message.replace("waiting for", "outside") + "; no batch is waiting"
        maintenance = {
            "type": MAINTENANCE_WINDOW, "status": window.status, "reason": reason,
            "message": message,
        }  # fmt: skip
        if generation is not None:
            maintenance["observedGeneration"] = generation
    return maintenance, _sync_condition(plans)


def _condition(pool: Obj, kind: str) -> Mapping[str, Any]:
    for condition in status_of(pool).get("conditions") or ():
        if isinstance(condition, Mapping) and condition.get("type") == kind:
            return condition
    return {}


def rollout_events(
    pool: Obj, window: Mapping[str, Any] | None, invalid: Sequence[str]
) -> list[RolloutEvent]:
    """The Events the pool's new `MaintenanceWindow` condition (`rollout_conditions`) gives
    against its current one: `MaintenanceWindowNotEnforced` and invalid expressions once per
    pool generation, `RolloutWaitingForMaintenanceWindow` once per closed window a batch waits
    for."""
    if window is None:
        return []
    reason, message = window.get("reason"), str(window.get("message") or "")
    previous = _condition(pool, MAINTENANCE_WINDOW)
    generation = metadata_of(pool).get("generation")
    new_generation = not previous or previous.get("observedGeneration") != generation
    events: list[RolloutEvent] = []
    if new_generation:
        events.extend(RolloutEvent("Warning", INVALID_WINDOW_EVENT, text) for text in invalid)
    if reason == NOT_ENFORCED and (new_generation or previous.get("reason") != NOT_ENFORCED):
        events.append(RolloutEvent("Warning", WINDOW_NOT_ENFORCED_EVENT, message))
    if reason == WAITING and previous.get("reason") != WAITING:
        events.append(RolloutEvent("Normal", WAITING_FOR_WINDOW_EVENT, message))
    return events
