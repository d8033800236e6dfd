"""Which autoscaling config a workload runs under, and which cron scaling rule is in force."""

from __future__ import annotations

from datetime import UTC, datetime

from tensorfusion.domain.autoscaling.config_resolution import resolve_config
from tensorfusion.domain.autoscaling.cron_rules import active_cron_rule
from tensorfusion.domain.model.autoscaling import (
    AutoScalingConfig,
    AutoSetResources,
    CronScalingRule,
)
from tensorfusion.domain.model.resources import Resource, Resources
from tensorfusion.domain.model.scheduling import VerticalScalingRule

RULE = VerticalScalingRule.model_validate({
    "name": "inference", "selector": {"matchLabels": {"tier": "inference"}},
    "autoScaling": {"autoSetResources": {"enable": True, "marginFraction": "0.3",
                                         "interval": "1m"},
                    "cronScalingRules": [{"name": "night", "enable": True}]}})  # fmt: skip


def test_the_workload_wins_field_by_field_over_the_first_matching_rule() -> None:
    own = AutoScalingConfig(auto_set_resources=AutoSetResources(enable=True, interval="30s"))
    found = resolve_config(own, [RULE], {"tier": "inference"})
    assert found is not None and found.source == "workload over rule inference"
    merged = found.config.auto_set_resources
    assert merged is not None and (merged.interval, merged.margin_fraction) == ("30s", "0.3")
    assert [r.name for r in found.config.cron_scaling_rules] == ["night"]


def test_a_rule_that_does_not_match_is_not_used() -> None:
    assert resolve_config(None, [RULE], {"tier": "batch"}) is None
    found = resolve_config(None, [RULE], {"tier": "inference"})
    assert found is not None and found.source == "rule inference"


def _rule(name: str, start: str, end: str, enable: bool = True) -> CronScalingRule:
    resources = Resources(requests=Resource.model_validate({"tflops": "10"}))
    return CronScalingRule(name=name, start=start, end=end, enable=enable,
                           desired_resources=resources)  # fmt: skip


AT = datetime(2026, 12, 7, 23, 30, tzinfo=UTC)  # a Monday


def test_a_rule_is_active_between_its_start_and_its_end() -> None:
    night = _rule("night", "0 22 * * *", "0 6 * * *")
    assert active_cron_rule([night], AT).rule == night
    assert active_cron_rule([night], AT.replace(hour=12)).rule is None


def test_overlapping_rules_are_refused_and_a_disabled_one_ignored() -> None:
    night = _rule("night", "0 22 * * *", "0 6 * * *")
    late = _rule("late", "0 23 * * *", "0 1 * * *")
    decision = active_cron_rule([night, late], AT)
    assert decision.rule is None and "night, late are active at the same time" in decision.problem
    off = _rule("late", "0 23 * * *", "0 1 * * *", enable=False)
    assert active_cron_rule([night, off], AT).rule == night


def test_a_malformed_rule_is_a_problem() -> None:
    decision = active_cron_rule([_rule("bad", "0 25 * * *", "0 6 * * *")], AT)
    assert decision.rule is None and decision.problem.startswith("cron rule bad: hour")
    empty = CronScalingRule(name="x", enable=True)
    assert "needs start, end and desiredResources" in active_cron_rule([empty], AT).problem
