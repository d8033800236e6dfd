"""Guide steps 5 and 6: migration next to the device plugin, the webhook, the scheduler config.

`scheduler.config` runs the controller's own code on the rendered `schedulerConfig`: the
ConfigMap reader (`scheduler_config_from_yaml`), the settings reader and the derivation of the
kube-scheduler configuration; their errors are its findings, their warnings WARN.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from tensorfusion.domain.doctor.results import CheckResult, Status
from tensorfusion.domain.doctor.static_checks_context import (
    ChartValues,
    describe,
    result,
    to_yaml,
    truthy,
)
from tensorfusion.domain.native_resources import DEFAULT_NATIVE_RESOURCES
from tensorfusion.domain.scheduling.kube_scheduler_config import (
    EXTENDERS_ERROR,
    derive_kube_scheduler_config,
)
from tensorfusion.domain.scheduling.scheduler_config import (
    GPU_PLUGINS,
    SchedulerConfigError,
    find_profile,
    read_scheduler_settings,
    scheduler_config_from_yaml,
)
from tensorfusion.domain.settings.controller_flags import ControllerFlags

__all__ = ["failure_policy", "migration_replicas", "scheduler_config"]

_POLICY: Final = "controller.admissionWebhooks.failurePolicy"
REPLICAS_SNIPPET: Final = "controller:\n  replicaCount: 2\n"
FAIL_POLICY_SNIPPET: Final = "controller:\n  admissionWebhooks:\n    failurePolicy: Fail\n"


def _migration_modes(chart: ChartValues) -> list[str]:
    """What makes the webhook see every pod (the chart's `tf.migrationMode`)."""
    modes: list[str] = []
    if truthy(chart.get("controller.nvidiaOperatorProgressiveMigration")):
        modes.append("controller.nvidiaOperatorProgressiveMigration")
    if truthy(chart.get("dynamicConfig.autoMigration.enable")):
        modes.append("dynamicConfig.autoMigration.enable")
    return modes


def _policy(chart: ChartValues) -> Any:
    """The webhook's failurePolicy as rendered (`| default "Fail"`)."""
    value = chart.get(_POLICY)
    return value if truthy(value) else "Fail"


def migration_replicas(chart: ChartValues) -> CheckResult:
    """`migration.replicas`: progressive migration only with two controller replicas."""
    modes = _migration_modes(chart)
    if not modes:
        found = "progressive migration is off: the webhook sees only pods labelled for it"
        return result("migration.replicas", Status.PASS, found)
    count = chart.replicas()
    on = " and ".join(modes)
    if count is None or count < 2:
        found = (
            f"{on} on with controller.replicaCount "
            f"{describe(chart.get('controller.replicaCount'))}: the webhook sees every pod "
            f"creation (failurePolicy {_policy(chart)}), so while the one controller restarts "
            "no pod in the cluster is admitted normally"
        )
        return result("migration.replicas", Status.FAIL, found, REPLICAS_SNIPPET)
    return result("migration.replicas", Status.PASS, f"{on} on with {count} controller replicas")


def failure_policy(chart: ChartValues) -> CheckResult:
    """`migration.failure-policy`: the webhook fails closed."""
    policy = _policy(chart)
    if policy == "Fail":
        return result("migration.failure-policy", Status.PASS, "failurePolicy is Fail")
    if policy == "Ignore":
        found = (
            f"{_POLICY} is Ignore: a TensorFusion pod created while the webhook is down starts "
            "without its GPU allocation"
        )
        return result("migration.failure-policy", Status.WARN, found, FAIL_POLICY_SNIPPET)
    found = (
        f"{_POLICY} is {describe(policy)}, neither Fail nor Ignore: the API server rejects "
        "the MutatingWebhookConfiguration"
    )
    return result("migration.failure-policy", Status.FAIL, found, FAIL_POLICY_SNIPPET)


def _enabled_plugins(profile: Mapping[str, Any]) -> set[str]:
    plugins = profile.get("plugins")
    names: set[str] = set()
    if not isinstance(plugins, Mapping):
        return names
    for point in plugins.values():
        enabled = point.get("enabled") if isinstance(point, Mapping) else None
        for plugin in enabled if isinstance(enabled, list) else []:
            if isinstance(plugin, Mapping) and isinstance(plugin.get("name"), str):
                names.add(plugin["name"])
    return names


def _controller_verdict(config: Mapping[str, Any]) -> tuple[list[str], list[str]]:
    """The errors and warnings of the controller's derivation and settings reader; past an
    `extenders` error, the errors of the rest too."""
    extender = f"http://{ControllerFlags().scheduler_extender_bind_address}/scheduler"
    try:
        _, warnings = derive_kube_scheduler_config(
            config,
            extender_url=extender,
            managed_resources=tuple(DEFAULT_NATIVE_RESOURCES),
            kubeconfig="",
        )
        settings = read_scheduler_settings(config)
    except SchedulerConfigError as error:
        if str(error) != EXTENDERS_ERROR:
            return [str(error)], []
        problems, warnings = _controller_verdict(
            {key: value for key, value in config.items() if key != "extenders"}
        )
        return [EXTENDERS_ERROR, *problems], warnings
    return [], [*settings.warnings, *warnings]


def scheduler_config(chart: ChartValues) -> CheckResult:
    """`scheduler.config`: the controller can start kube-scheduler from `schedulerConfig`."""
    default = chart.default("schedulerConfig")
    fix = "# copy the whole default block from the chart's values.yaml, then edit it\n" + to_yaml(
        {"schedulerConfig": default}
    )
    try:
        config = scheduler_config_from_yaml(
            to_yaml(chart.get("schedulerConfig")), "schedulerConfig"
        )
    except SchedulerConfigError as error:
        return result("scheduler.config", Status.FAIL, str(error), fix)
    problems, warnings = _controller_verdict(config)
    name = ""
    try:
        index, profile = find_profile(config)
    except SchedulerConfigError:
        pass  # reported by the derivation
    else:
        name = str(profile.get("schedulerName"))
        missing = sorted(GPU_PLUGINS - _enabled_plugins(profile))
        if missing:
            problems.append(
                f"schedulerConfig.profiles[{index}].plugins enables no {' and no '.join(missing)}"
            )
    if problems:
        return result("scheduler.config", Status.FAIL, "; ".join(problems), fix)
    if warnings:
        return result("scheduler.config", Status.WARN, "; ".join(warnings), fix)
    found = f"profile {name} with {' and '.join(sorted(GPU_PLUGINS))}, as the controller reads it"
    return result("scheduler.config", Status.PASS, found)
