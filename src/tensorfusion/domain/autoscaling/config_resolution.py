"""Which `autoScalingConfig` a workload runs under (docs/autoscaling.md): its own
`spec.autoScalingConfig` (the webhook writes it from the `autoscale` annotation or the
WorkloadProfile), field by field over the first `verticalScalingRules[]` entry of its pool's
SchedulingConfigTemplate whose selector matches the workload's pod labels. Within
`autoSetResources` each field the workload leaves unset comes from the rule; `cronScalingRules`
and `externalScaler` come whole from the workload when it has them, else from the rule.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tensorfusion.domain.label_selector import selector_matches
from tensorfusion.domain.model.autoscaling import AutoScalingConfig, AutoSetResources
from tensorfusion.domain.model.scheduling import VerticalScalingRule

__all__ = ["ResolvedConfig", "resolve_config"]


@dataclass(frozen=True, slots=True)
class ResolvedConfig:
    """The config in force and where it came from (`workload`, `rule <name>`, or both)."""

    config: AutoScalingConfig
    source: str


def _merged(own: AutoSetResources | None, rule: AutoSetResources | None) -> AutoSetResources | None:
    if own is None or rule is None:
        return own or rule
    fields = {name: getattr(own, name) for name in AutoSetResources.model_fields}
    for name, value in list(fields.items()):
        if value is None:
            fields[name] = getattr(rule, name)
    return AutoSetResources(**fields)


def resolve_config(
    own: AutoScalingConfig | None,
    rules: Sequence[VerticalScalingRule],
    pod_labels: Mapping[str, str],
) -> ResolvedConfig | None:
    """The config in force; None when neither the workload nor a rule has one."""
    rule = next((r for r in rules if r.auto_scaling is not None and (
        r.selector is None or selector_matches(r.selector, pod_labels))), None)  # fmt: skip
    ruled = rule.auto_scaling if rule is not None else None
    if own is None and ruled is None:
        return None
    if ruled is None:
        assert own is not None
        return ResolvedConfig(own, "workload")
    name = f"rule {rule.name or '(unnamed)'}" if rule is not None else ""
    if own is None:
        return ResolvedConfig(ruled, name)
    config = AutoScalingConfig(
        auto_set_resources=_merged(own.auto_set_resources, ruled.auto_set_resources),
        cron_scaling_rules=own.cron_scaling_rules or ruled.cron_scaling_rules,
        external_scaler=own.external_scaler or ruled.external_scaler,
    )
    return ResolvedConfig(config, f"workload over {name}")
