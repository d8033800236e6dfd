"""The static checks of `tensor-fusion doctor` (doctor.md): the guide's steps on merged values.

`static_checks` runs every check of the spec's static table, in the table's order, on values
merged as Helm merges them (`values_merge.merge_layers`). Each check reuses the code the
product runs (flag parser, rule validator, scheduler-config derivation, pool model).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

from tensorfusion.domain.doctor import static_checks_alerting as alerting
from tensorfusion.domain.doctor import static_checks_ha as ha
from tensorfusion.domain.doctor import static_checks_metrics as metrics
from tensorfusion.domain.doctor import static_checks_pool as pool
from tensorfusion.domain.doctor import static_checks_scheduling as scheduling
from tensorfusion.domain.doctor import static_checks_versions as versions
from tensorfusion.domain.doctor.results import CheckResult
from tensorfusion.domain.doctor.static_checks_context import (
    DEFAULT_RELEASE,
    STEPS,
    ChartValues,
)

__all__ = ["CHECKS", "static_checks"]

CHECKS: Final[Mapping[str, Callable[[ChartValues], CheckResult]]] = {
    "ha.replicas": ha.replicas,
    "ha.leader-elect": ha.leader_elect,
    "ha.anti-affinity": ha.anti_affinity,
    "ha.anti-affinity-labels": ha.anti_affinity_labels,
    "metrics.store": metrics.store,
    "metrics.cloud-auth": metrics.cloud_auth,
    "metrics.password-in-values": metrics.password_in_values,
    "metrics.standalone-in-production": metrics.standalone_in_production,
    "alert.receiver-target": alerting.receiver_target,
    "alert.external-addr": alerting.external_addr,
    "alert.command-flags": alerting.command_flags,
    "alert.builtin-rules": alerting.builtin_rules,
    "alert.rule-valid": alerting.rule_valid,
    "versions.pinned": versions.pinned,
    "migration.replicas": scheduling.migration_replicas,
    "migration.failure-policy": scheduling.failure_policy,
    "scheduler.config": scheduling.scheduler_config,
    "rollout.workers-clients": pool.workers_clients,
    "rollout.batch": pool.rollout_batch,
    "rollout.window": pool.rollout_window,
    "capacity.oversell": pool.oversell,
    "logging.level": pool.log_level,
}
"""Each check id (doctor.md's static table, in order) and the function that runs it."""

assert list(CHECKS) == list(STEPS)


def static_checks(
    values: Mapping[str, Any],
    *,
    value_sources: Mapping[str, str],
    default_values: Mapping[str, Any],
    app_version: str,
    release: str = DEFAULT_RELEASE,
) -> list[CheckResult]:
    """Every static check on merged `values`, in the table's order.

    `value_sources` maps a dotted key path to where its value came from ("chart", a values
    file's name, "--set"): `merge_layers(...).sources`. `default_values` are the chart's own
    values.yaml, `app_version` its Chart.yaml appVersion, `release` the Helm release name.
    """
    chart = ChartValues(values, value_sources, default_values, app_version, release)
    return [check(chart) for check in CHECKS.values()]
