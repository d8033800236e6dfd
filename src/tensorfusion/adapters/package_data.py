"""The YAML files shipped in `tensorfusion.data`, read once and handed to the domain."""

from __future__ import annotations

from functools import cache
from importlib import resources
from typing import Any, Final

from tensorfusion.domain.alerting.default_rules import (
    rule_definitions_from_yaml,
    rule_set_from_yaml,
)
from tensorfusion.domain.alerting.rules import RuleSet
from tensorfusion.domain.scheduling.scheduler_config import scheduler_config_from_yaml

__all__ = [
    "CONSOLE_ASSETS",
    "console_asset",
    "default_alert_rule_definitions",
    "default_alert_rule_set",
    "default_alert_rules_text",
    "default_scheduler_config",
]

CONSOLE_ASSETS: Final = frozenset({"index.html", "console.js", "console.css"})
"""The web console's files (`tensorfusion/data/console`), the only names served."""
_ALERT_RULES = "default_alert_rules.yaml"
_SCHEDULER_CONFIG = "default_scheduler_config.yaml"


def console_asset(name: str) -> bytes | None:
    """A file of the web console by name; None for a name not in `CONSOLE_ASSETS` (checked
    before the cache, so a caller's names never grow it)."""
    return _console_file(name) if name in CONSOLE_ASSETS else None


@cache
def _console_file(name: str) -> bytes:
    return resources.files("tensorfusion.data").joinpath("console", name).read_bytes()


@cache
def _text(name: str) -> str:
    return resources.files("tensorfusion.data").joinpath(name).read_text(encoding="utf-8")


def default_alert_rules_text() -> str:
    """The YAML text of the default alert rules (the chart's `dynamicConfig.alertRules`)."""
    return _text(_ALERT_RULES)


def default_alert_rule_definitions() -> list[dict[str, Any]]:
    """The default alert rules as plain mappings (a fresh copy each call)."""
    return rule_definitions_from_yaml(default_alert_rules_text())


@cache
def default_alert_rule_set() -> RuleSet:
    """The default alert rules, validated."""
    return rule_set_from_yaml(default_alert_rules_text())


def default_scheduler_config() -> dict[str, Any]:
    """The chart's default `schedulerConfig` (a fresh copy each call)."""
    return scheduler_config_from_yaml(_text(_SCHEDULER_CONFIG), _SCHEDULER_CONFIG)
