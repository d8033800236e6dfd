"""Rolling out a component's configuration change over a pool's nodes in batches
(deployment.md §11), as one pure step: `plan_rollout(...)` says which nodes to replace now, the
pool's component status, the batch in progress and the maintenance-window condition.

The caller keeps the batch in progress and the time of the last completed batch on the pool
(annotations `<component>-update-in-progress` and `<component>-batch-update-last-time`), and
replaces the pods of `replace`. A batch is complete when every instance of it is ready with the
new hash or gone (a deleted client pod, a removed node); the next starts `batchInterval` later,
with the oldest outdated instances first. Maintenance windows are reported, and gate batch
starts only when the pool opts in.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Final

from tensorfusion.domain.cron import CronError, CronSchedule, parse_cron, window_open

__all__ = [
    "NodeRollout",
    "RolloutPlan",
    "RolloutPolicy",
    "WindowCondition",
    "plan_rollout",
    "window_condition",
]

NOT_ENFORCED: Final = "NotEnforced"
WAITING: Final = "WaitingForWindow"
IN_WINDOW: Final = "InWindow"
BATCH_POLL_S: Final = 5.0
WINDOW_POLL_S: Final = 60.0


@dataclass(frozen=True, slots=True)
class RolloutPolicy:
    """`nodePoolRollingUpdatePolicy` for one component, read."""

    auto_update: bool = False
    batch_percentage: int = 100
    batch_interval_s: float = 1.0
    max_duration_s: float = 600.0
    windows: tuple[str, ...] = ()
    honour_windows: bool = False


@dataclass(frozen=True, slots=True)
class NodeRollout:
    """One instance of the component (a node's agent, a client pod): when it was created,
    whether it has the configuration rendered now, and whether it is ready with it (§10 step 6
    for agents)."""

    name: str
    created_at: float
    in_sync: bool
    ready: bool


@dataclass(frozen=True, slots=True)
class WindowCondition:
    """The pool condition `MaintenanceWindow`."""

    status: str
    reason: str
    message: str


@dataclass(frozen=True, slots=True)
class RolloutPlan:
    """What to do now."""

    hash: str
    synced: bool
    progress: int
    replace: tuple[str, ...] = ()
    in_progress: tuple[str, ...] = ()
    batch_completed: bool = False
    paused: bool = False
    waiting_for_window: bool = False
    window: WindowCondition | None = None
    invalid_windows: tuple[str, ...] = ()
    recheck_s: float | None = None


def _schedules(windows: Sequence[str]) -> tuple[tuple[CronSchedule, ...], tuple[str, ...]]:
    schedules: list[CronSchedule] = []
    invalid: list[str] = []
    for text in windows:
        try:
            schedules.append(parse_cron(text))
        except CronError as error:
            invalid.append(f"maintenanceWindow.includes: invalid value {text!r}: {error}")
    return tuple(schedules), tuple(invalid)


def window_condition(
    policy: RolloutPolicy, now: datetime
) -> tuple[WindowCondition | None, bool, tuple[str, ...]]:
    """The `MaintenanceWindow` condition (None without windows), whether a batch may start now,
    and the invalid expressions (each naming the field and value)."""
    if not policy.windows:
        return None, True, ()
    schedules, invalid = _schedules(policy.windows)
    listed = ", ".join(policy.windows)
    if not policy.honour_windows:
        message = (
            f"maintenance windows ({listed}) are recorded, not enforced; annotate the pool "
            "tensor-fusion.ai/honour-maintenance-window=true to enforce them"
        )
        return WindowCondition("False", NOT_ENFORCED, message), True, invalid
    if window_open(schedules, policy.max_duration_s, now):
        return (
            WindowCondition("True", IN_WINDOW, f"inside a maintenance window ({listed})"),
            True,
            invalid,
        )
    return (
        WindowCondition("False", WAITING, f"waiting for a maintenance window ({listed})"),
        False,
        invalid,
    )


def plan_rollout(
    *,
    component_hash: str,
    recorded_hash: str | None,
    policy: RolloutPolicy,
    nodes: Sequence[NodeRollout],
    in_progress: Sequence[str],
    last_batch_at: datetime | None,
    now: datetime,
) -> RolloutPlan:
    """The step of the rollout of the pool's component configuration `component_hash` (its
    status recorded `recorded_hash` before) over `nodes`."""
    total = len(nodes)
    by_name = {n.name: n for n in nodes}
    outdated = sorted((n for n in nodes if not n.in_sync),
                      key=lambda n: (n.created_at, n.name))  # fmt: skip
    rolling = recorded_hash is not None and policy.auto_update
    # a batch's instances count as done once ready with the new hash, not when replaced
    batch = [by_name[name] for name in in_progress if name in by_name] if rolling else []
    waiting = [n for n in batch if not (n.in_sync and n.ready)]
    done = total - len(outdated) - sum(1 for n in waiting if n.in_sync)
    condition, may_start, invalid = window_condition(policy, now)
    plan = RolloutPlan(hash=component_hash, synced=not outdated and not waiting,
                       progress=100 if total == 0 else done * 100 // total, window=condition,
                       invalid_windows=invalid)  # fmt: skip
    if not rolling:
        return plan
    if in_progress:
        if waiting:
            return replace(plan, in_progress=tuple(in_progress), recheck_s=BATCH_POLL_S)
        return replace(plan, batch_completed=True, recheck_s=policy.batch_interval_s)
    if plan.synced:
        return plan
    if policy.batch_percentage <= 0:
        return replace(plan, paused=True)
    if last_batch_at is not None:
        wait = (last_batch_at + timedelta(seconds=policy.batch_interval_s) - now).total_seconds()
        if wait > 0:
            return replace(plan, recheck_s=wait)
    if not may_start:
        return replace(plan, waiting_for_window=True, recheck_s=WINDOW_POLL_S)
    size = max(1, math.ceil(policy.batch_percentage * total / 100))
    chosen = tuple(n.name for n in outdated[:size])
    return replace(plan, replace=chosen, in_progress=chosen, recheck_s=BATCH_POLL_S)
