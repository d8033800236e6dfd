"""The default rule list (the chart's `dynamicConfig.alertRules`), parsed from its YAML text.

The text is package data; `tensorfusion.adapters.package_data` reads it and passes it in.
"""

from __future__ import annotations

from typing import Any

import yaml

from tensorfusion.domain.alerting.rules import RuleSet, load_rules

__all__ = ["rule_definitions_from_yaml", "rule_set_from_yaml"]


def rule_definitions_from_yaml(text: str) -> list[dict[str, Any]]:
    """The rules of a YAML rule list as plain mappings (a fresh copy each call)."""
    loaded = yaml.safe_load(text)
    if not isinstance(loaded, list):
        raise ValueError("the default alert rules must be a YAML list of rules")
    return loaded


def rule_set_from_yaml(text: str) -> RuleSet:
    """The rules of a YAML rule list, validated."""
    return load_rules(rule_definitions_from_yaml(text))
