"""Rolling out a component change in batches: only recorded the first time or without the
flag, paused at 0 %, oldest outdated nodes first, a batch complete when its agents are ready
with the new hash, batchInterval between batches, maintenance windows reported and enforced only
on opt-in; five-field cron."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from tensorfusion.domain.cron import CronError, parse_cron, window_open
from tensorfusion.domain.desired_state.rollout import (
    NodeRollout,
    RolloutPlan,
    RolloutPolicy,
    plan_rollout,
)

NOW = datetime(2026, 12, 2, 3, 30, tzinfo=UTC)  # a Wednesday
ON = RolloutPolicy(auto_update=True, batch_percentage=20, batch_interval_s=300)


def nodes(outdated: int, total: int = 10, ready: bool = True) -> list[NodeRollout]:
    return [NodeRollout(f"n{i}", created_at=float(100 - i), ready=ready,
                        in_sync=i >= outdated)
            for i in range(total)]  # fmt: skip


def plan(policy: RolloutPolicy = ON, node_list: list[NodeRollout] | None = None,
         in_progress: tuple[str, ...] = (), last: datetime | None = None,
         recorded: str | None = "old", now: datetime = NOW) -> RolloutPlan:  # fmt: skip
    return plan_rollout(component_hash="new", recorded_hash=recorded, policy=policy,
                        nodes=node_list if node_list is not None else nodes(10),
                        in_progress=in_progress, last_batch_at=last, now=now)  # fmt: skip


def test_the_first_hash_or_the_flag_off_only_records() -> None:
    first = plan(recorded=None)
    assert (first.replace, first.synced, first.progress) == ((), False, 0)
    off = plan(policy=RolloutPolicy(auto_update=False))
    assert off.replace == () and not off.synced
    done = plan(node_list=nodes(0))
    assert (done.synced, done.progress, done.replace) == (True, 100, ())


def test_batches_take_the_oldest_outdated_nodes_and_wait_for_their_agents() -> None:
    first = plan()
    assert first.replace == ("n9", "n8"), "ceil(20 % of 10) = 2, the oldest GPUNodes first"
    assert first.in_progress == first.replace
    waiting = [NodeRollout(n.name, n.created_at, in_sync=n.name in ("n9", "n8"),
                           ready=n.name != "n8") for n in nodes(10)]  # fmt: skip
    pending = plan(node_list=waiting, in_progress=("n9", "n8"))
    assert pending.replace == () and pending.in_progress == ("n9", "n8")
    assert pending.progress == 10, "n8 is replaced but its agent is not ready: not done yet"
    ready = [NodeRollout(n.name, n.created_at, n.in_sync, True) for n in waiting]
    complete = plan(node_list=ready, in_progress=("n9", "n8"))
    assert complete.batch_completed and complete.progress == 20 and complete.replace == ()
    early = plan(node_list=ready, last=NOW - timedelta(seconds=100))
    assert early.replace == () and early.recheck_s == pytest.approx(200)
    later = plan(node_list=ready, last=NOW - timedelta(seconds=300))
    assert later.replace == ("n7", "n6")


def test_zero_percent_pauses() -> None:
    paused = plan(policy=RolloutPolicy(auto_update=True, batch_percentage=0))
    assert paused.paused and paused.replace == ()


def test_windows_are_reported_and_gate_only_on_opt_in() -> None:
    nightly = RolloutPolicy(auto_update=True, batch_percentage=50, windows=("0 2 * * *",),
                            max_duration_s=3600)  # fmt: skip
    reported = plan(policy=nightly)
    assert reported.window is not None and reported.window.reason == "NotEnforced"
    assert reported.replace, "not enforced: batches start at any time"
    enforced = replace(nightly, honour_windows=True)
    outside = plan(policy=enforced)
    assert outside.waiting_for_window and outside.replace == ()
    assert outside.window is not None and outside.window.reason == "WaitingForWindow"
    inside = plan(policy=enforced, now=NOW.replace(hour=2, minute=59))
    assert inside.replace and inside.window is not None and inside.window.reason == "InWindow"
    bad = RolloutPolicy(auto_update=True, windows=("61 * * * *",), honour_windows=True)
    broken = plan(policy=bad)
    assert broken.waiting_for_window and "61" in broken.invalid_windows[0]


def test_cron_fields_ranges_steps_and_either_day() -> None:
    schedule = parse_cron("*/15 9-17 * * 1-5")
    assert schedule.matches(NOW.replace(hour=9, minute=45))
    assert not schedule.matches(NOW.replace(hour=9, minute=44))
    assert not schedule.matches(datetime(2026, 12, 6, 10, 0, tzinfo=UTC)), "a Sunday"
    either = parse_cron("0 0 1 * 0")
    assert either.matches(datetime(2026, 12, 6, 0, 0, tzinfo=UTC)), "Sunday"
    assert either.matches(datetime(2026, 12, 1, 0, 0, tzinfo=UTC)), "the 1st"
    assert parse_cron("0 0 * * 7").matches(datetime(2026, 12, 6, 0, 0, tzinfo=UTC))
    assert window_open((parse_cron("0 2 * * *"),), 3600, NOW.replace(hour=2, minute=30))
    assert not window_open((parse_cron("0 2 * * *"),), 3600, NOW.replace(hour=3, minute=0))


@pytest.mark.parametrize(("text", "message"), [
    ("* * * *", "must have 5 fields"),
    ("60 * * * *", "minute: '60' must lie within 0-59"),
    ("* 24 * * *", "hour: '24' must lie within 0-23"),
    ("*/0 * * * *", "minute: step '0' must be a positive number"),
    ("* * * JAN *", "month: 'JAN' is not a number, range, list or *"),
    ("* * 5-1 * *", "day of month: '5-1' must lie within 1-31"),
])  # fmt: skip
def test_a_bad_cron_says_which_field(text: str, message: str) -> None:
    with pytest.raises(CronError, match=message):
        parse_cron(text)
