"""`cronScalingRules` (docs/autoscaling.md): a rule is active from a firing of its `start`
expression until the next firing of its `end` (five-field cron, UTC); while it is, the
workload's resources are its `desiredResources`, and when it ends its own `spec.resources`
come back. A start that last fired more than 31 days ago does not count. Two rules
active at once are refused: none applies, and the workload gets a condition naming them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from tensorfusion.domain.cron import CronError, last_fired, parse_cron
from tensorfusion.domain.model.autoscaling import CronScalingRule

__all__ = ["CronDecision", "active_cron_rule"]


@dataclass(frozen=True, slots=True)
class CronDecision:
    """The rule in force now (None for none) and what is wrong with the rules, if anything."""

    rule: CronScalingRule | None
    problem: str = ""


def _active(rule: CronScalingRule, now: datetime) -> bool:
    start = last_fired(parse_cron(rule.start or ""), now)
    if start is None:
        return False
    end = last_fired(parse_cron(rule.end or ""), now)
    return end is None or start > end


def active_cron_rule(rules: Sequence[CronScalingRule], now: datetime) -> CronDecision:
    """The enabled rule active at `now`; a problem for a malformed rule or an overlap."""
    active: list[CronScalingRule] = []
    for index, rule in enumerate(rules):
        if not rule.enable:
            continue
        name = rule.name or f"cronScalingRules[{index}]"
        if not rule.start or not rule.end or rule.desired_resources is None:
            return CronDecision(None, f"cron rule {name}: needs start, end and desiredResources")
        try:
            if _active(rule, now):
                active.append(rule)
        except CronError as error:
            return CronDecision(None, f"cron rule {name}: {error}")
    if len(active) > 1:
        names = ", ".join(r.name or "(unnamed)" for r in active)
        return CronDecision(None, f"cron rules {names} are active at the same time: none applied")
    return CronDecision(active[0] if active else None)
