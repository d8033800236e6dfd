"""Guide step 3, alerting: receivers, the Alertmanager address, the command, the rules.

The address is checked by the controller's own flag parser (an `-alert-manager-addr` without
`http://` or `https://` is refused there); the rules by the controller's loader of
`config.yaml` (`parse_dynamic_config`), fed the `dynamicConfig` value as the chart renders it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from tensorfusion.domain.alerting.dynamic_config import DynamicConfigError, parse_dynamic_config
from tensorfusion.domain.doctor.results import CheckResult, Status
from tensorfusion.domain.doctor.static_checks_command import (
    command_snippet,
    read_command,
    repaired_command,
)
from tensorfusion.domain.doctor.static_checks_context import (
    ChartValues,
    result,
    to_yaml,
    truthy,
)

__all__ = ["builtin_rules", "command_flags", "external_addr", "receiver_target", "rule_valid"]

_ADDR: Final = "alert-manager-addr"

RECEIVER_SNIPPET: Final = """\
alert:
  alertManagerConfig:
    global: {}
    receivers:
      - name: default-receiver
        webhook_configs:
          - url: https://<your-alert-webhook>
    route:
      receiver: default-receiver
      group_wait: 10s
      group_interval: 5m
      repeat_interval: 3h
"""


def _targets(receiver: Mapping[str, Any]) -> list[str]:
    """The integrations of a receiver that have at least one entry (`webhook_configs`, ...)."""
    return [
        str(key)
        for key, value in receiver.items()
        if str(key).endswith("_configs") and isinstance(value, list) and value
    ]


def receiver_target(chart: ChartValues) -> CheckResult:
    """`alert.receiver-target`: the bundled Alertmanager forwards alerts somewhere."""
    if not truthy(chart.get("alert.enabled")):
        found = "alert.enabled is false: the chart's Alertmanager is off (see alert.external-addr)"
        return result("alert.receiver-target", Status.PASS, found)
    config = chart.get("alert.alertManagerConfig")
    receivers = config.get("receivers") if isinstance(config, Mapping) else None
    named = [r for r in receivers if isinstance(r, Mapping)] if isinstance(receivers, list) else []
    with_target = {str(r.get("name")): _targets(r) for r in named if _targets(r)}
    without = [str(r.get("name")) for r in named if not _targets(r)]
    route = config.get("route") if isinstance(config, Mapping) else None
    root = str(route.get("receiver")) if isinstance(route, Mapping) else ""
    sub_routes = route.get("routes") if isinstance(route, Mapping) else None
    if not with_target:
        listed = ", ".join(without) or "none"
        found = (
            f"no receiver of alert.alertManagerConfig has a target (receivers: {listed}): "
            "no notification leaves the cluster"
        )
        return result("alert.receiver-target", Status.WARN, found, RECEIVER_SNIPPET)
    if root in without and not sub_routes:
        found = (
            f"the route's receiver {root} has no target, and no sub-route sends alerts to "
            f"{', '.join(with_target)}"
        )
        return result("alert.receiver-target", Status.WARN, found, RECEIVER_SNIPPET)
    found = "; ".join(f"{name}: {', '.join(kinds)}" for name, kinds in with_target.items())
    if without:
        found += f" (without a target: {', '.join(without)})"
    return result("alert.receiver-target", Status.PASS, f"receivers with a target: {found}")


def external_addr(chart: ChartValues) -> CheckResult:
    """`alert.external-addr`: an Alertmanager address when the chart's is off, with a scheme."""
    group = read_command(chart.get("controller.command")).group(_ADDR)
    enabled = truthy(chart.get("alert.enabled"))
    fix = ("" if enabled else "alert:\n  enabled: false\n") + command_snippet(
        repaired_command(chart)
    )
    if group is not None and group.error:
        return result("alert.external-addr", Status.FAIL, group.error, fix)
    addresses = group.flags.alert_manager_addr if group is not None and group.flags else ()
    if addresses:
        found = f"the controller sends alerts to {', '.join(addresses)}"
        if enabled:
            found += " (the flag replaces discovery: the chart's own Alertmanager gets none)"
        return result("alert.external-addr", Status.PASS, found)
    if not enabled:
        found = (
            "alert.enabled is false and controller.command has no -alert-manager-addr: "
            "firing alerts reach no Alertmanager"
        )
        return result("alert.external-addr", Status.FAIL, found, fix)
    found = "the controller sends alerts to the chart's Alertmanager pods (discovered)"
    return result("alert.external-addr", Status.PASS, found)


def command_flags(chart: ChartValues) -> CheckResult:
    """`alert.command-flags`: an overridden `controller.command` keeps every default flag."""
    value = chart.get("controller.command")
    default_value = chart.default("controller.command")
    if value == default_value:
        return result(
            "alert.command-flags", Status.PASS, "controller.command is the chart's default"
        )
    command = read_command(value)
    default = read_command(default_value)
    given = set(command.given())
    missing = [f"-{name}" for name in default.given() if name not in given]
    problems = [*command.problems, *command.errors()]
    if missing:
        problems.insert(
            0, f"controller.command overrides the default and lacks {', '.join(missing)}"
        )
    if problems:
        rejected = [f"-{g.name}" for g in command.groups if g.error and g.name != _ADDR]
        note = (
            f"# left out, the controller rejects them: {', '.join(rejected)}\n" if rejected else ""
        )
        fix = (
            "# the full default list, with your additions\n"
            + note
            + command_snippet(repaired_command(chart))
        )
        return result("alert.command-flags", Status.FAIL, "; ".join(problems), fix)
    added = [f"-{name}" for name in command.given() if name not in set(default.given())]
    found = "controller.command keeps every default flag"
    if added:
        found += f" and adds {', '.join(added)}"
    return result("alert.command-flags", Status.PASS, found)


def _rule_names(rules: Any) -> list[str]:
    if not isinstance(rules, list):
        return []
    names = (rule.get("name") for rule in rules if isinstance(rule, Mapping))
    return [name.strip() for name in names if isinstance(name, str) and name.strip()]


def builtin_rules(chart: ChartValues) -> CheckResult:
    """`alert.builtin-rules`: the chart's rules are still in `dynamicConfig.alertRules`."""
    defaults = _rule_names(chart.default("dynamicConfig.alertRules"))
    present = _rule_names(chart.get("dynamicConfig.alertRules"))
    missing = [name for name in defaults if name not in set(present)]
    if missing:
        found = (
            f"dynamicConfig.alertRules lacks {len(missing)} of the {len(defaults)} built-in rules: "
            f"{', '.join(missing)} (Helm replaces lists: a file with only new rules drops them)"
        )
        fix = (
            "# copy the whole default alertRules list from the chart's values.yaml\n"
            "# (helm show values tensor-fusion --repo https://download.tensor-fusion.ai),\n"
            "# then append your rules:\n"
            "dynamicConfig:\n"
            "  alertRules:\n"
            f"    # ... all {len(defaults)} built-in rules copied from values.yaml ...\n"
            "    - name: <your rule>\n"
        )
        return result("alert.builtin-rules", Status.WARN, found, fix)
    extra = [name for name in present if name not in set(defaults)]
    found = f"all {len(defaults)} built-in rules present"
    if extra:
        found += f", plus {', '.join(extra)}"
    return result("alert.builtin-rules", Status.PASS, found)


def rule_valid(chart: ChartValues) -> CheckResult:
    """`alert.rule-valid`: every rule loads in the controller's validator."""
    text = to_yaml(chart.get("dynamicConfig"))
    try:
        config = parse_dynamic_config(text, "dynamicConfig")
    except DynamicConfigError as error:
        return result("alert.rule-valid", Status.FAIL, str(error), f"fix dynamicConfig: {error}")
    problems = [str(problem) for problem in config.rules.problems]
    if problems:
        found = "; ".join(problems)
        fix = "fix the rule(s) the controller rejects: " + found
        return result("alert.rule-valid", Status.FAIL, found, fix)
    count = len(config.rules.rules)
    warnings = list(config.warnings)
    if warnings:
        return result("alert.rule-valid", Status.WARN, "; ".join(warnings), "; ".join(warnings))
    found = f"all {count} rules in dynamicConfig.alertRules validate"
    return result("alert.rule-valid", Status.PASS, found)
