"""The packaged default rule list (the chart's `dynamicConfig.alertRules`)."""

from __future__ import annotations

from functools import cache
from importlib import resources
from typing import Any

import yaml

from tensorfusion.domain.alerting.rules import RuleSet, load_rules

__all__ = ["default_rule_definitions", "default_rule_set", "default_rules_text"]

_RESOURCE = "default_alert_rules.yaml"


@cache
def default_rules_text() -> str:
    """The YAML text of the packaged default rules (read-only package data)."""
    return (
        resources.files("tensorfusion.domain.alerting")
        .joinpath(_RESOURCE)
        .read_text(encoding="utf-8")
    )


def default_rule_definitions() -> list[dict[str, Any]]:
    """The default rules as plain mappings (a fresh copy each call)."""
    loaded = yaml.safe_load(default_rules_text())
    assert isinstance(loaded, list)
    return loaded


@cache
def default_rule_set() -> RuleSet:
    """The default rules, validated."""
    return load_rules(default_rule_definitions())
