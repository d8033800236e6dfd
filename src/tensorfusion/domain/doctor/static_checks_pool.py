"""Guide steps 7 and 8 and the log level: the default pool the chart renders from `cluster.pool`.

The rollout policy and the oversubscription are read with the pool's own API model (its
defaults for absent fields, its validation), as the TensorFusionCluster carries them.
"""

from __future__ import annotations

from typing import Any, Final, TypeVar

from pydantic import BaseModel, ValidationError

from tensorfusion.domain.doctor.results import CheckResult, Status
from tensorfusion.domain.doctor.static_checks_context import ChartValues, result, truthy
from tensorfusion.domain.model.errors import issues_from
from tensorfusion.domain.model.pool import Oversubscription, RollingUpdatePolicy

__all__ = ["log_level", "oversell", "rollout_batch", "rollout_window", "workers_clients"]

_Model = TypeVar("_Model", bound=BaseModel)

_POLICY: Final = "cluster.pool.nodePoolRollingUpdatePolicy"
_OVERSUBSCRIPTION: Final = "cluster.pool.capacityConfig.oversubscription"
OVERSELL_LIMITS: Final = {
    "tflopsOversellRatio": 300,
    "vramExpandToHostMem": 40,
    "vramExpandToHostDisk": 20,
}
WORKERS_CLIENTS_SNIPPET: Final = """\
cluster:
  pool:
    nodePoolRollingUpdatePolicy:
      autoUpdateWorker: false
      autoUpdateClient: false
"""
BATCH_SNIPPET: Final = """\
cluster:
  pool:
    nodePoolRollingUpdatePolicy:
      autoUpdateHypervisor: true
      batchPercentage: 20
      batchInterval: 5m
"""
CONSERVATIVE_SNIPPET: Final = """\
cluster:
  pool:
    capacityConfig:
      oversubscription:
        tflopsOversellRatio: 300
        vramExpandToHostMem: 40
        vramExpandToHostDisk: 20
"""


def _no_pool(chart: ChartValues) -> str:
    return (
        "" if truthy(chart.get("cluster.enabled")) else "cluster.enabled is false: no pool rendered"
    )


def _model(model: type[_Model], chart: ChartValues, path: str) -> tuple[_Model | None, str]:
    """The value at `path` read by the pool's model; None when absent; or the model's error."""
    raw: Any = chart.get(path)
    if raw is None:
        return None, ""
    try:
        return model.model_validate(raw), ""
    except ValidationError as error:
        prefix = tuple(path.split("."))
        return None, "; ".join(str(issue) for issue in issues_from(error, prefix))


def workers_clients(chart: ChartValues) -> CheckResult:
    """`rollout.workers-clients`: the controller never restarts applications by itself."""
    if note := _no_pool(chart):
        return result("rollout.workers-clients", Status.PASS, note)
    policy, error = _model(RollingUpdatePolicy, chart, _POLICY)
    if error:
        return result("rollout.workers-clients", Status.SKIP, f"{error} (see rollout.batch)")
    on = [
        f"{_POLICY}.{name} is true"
        for name, value in (
            ("autoUpdateWorker", policy and policy.auto_update_worker),
            ("autoUpdateClient", policy and policy.auto_update_client),
        )
        if value
    ]
    if on:
        found = f"{' and '.join(on)}: a pool change restarts your applications' pods"
        return result("rollout.workers-clients", Status.WARN, found, WORKERS_CLIENTS_SNIPPET)
    return result(
        "rollout.workers-clients", Status.PASS, "workers and clients are not auto-updated"
    )


def rollout_batch(chart: ChartValues) -> CheckResult:
    """`rollout.batch`: hypervisor updates in small batches."""
    if note := _no_pool(chart):
        return result("rollout.batch", Status.PASS, note)
    policy, error = _model(RollingUpdatePolicy, chart, _POLICY)
    if error:
        return result("rollout.batch", Status.FAIL, error, BATCH_SNIPPET)
    if policy is None or not policy.auto_update_hypervisor:
        return result("rollout.batch", Status.PASS, "hypervisor auto-update is off")
    if policy.batch_percentage == 100:
        found = (
            f"hypervisor auto-update with batchPercentage 100: every node's hypervisor restarts "
            f"at once (batchInterval {policy.batch_interval})"
        )
        return result("rollout.batch", Status.WARN, found, BATCH_SNIPPET)
    if policy.batch_percentage == 0:
        return result(
            "rollout.batch", Status.PASS, "hypervisor auto-update paused (batchPercentage 0)"
        )
    found = (
        f"hypervisor auto-update in batches of {policy.batch_percentage}% every "
        f"{policy.batch_interval}"
    )
    return result("rollout.batch", Status.PASS, found)


def rollout_window(chart: ChartValues) -> CheckResult:
    """`rollout.window`: a maintenance window is recorded, enforced only on the pool's opt-in."""
    if note := _no_pool(chart):
        return result("rollout.window", Status.PASS, note)
    policy, error = _model(RollingUpdatePolicy, chart, _POLICY)
    if error:
        return result("rollout.window", Status.SKIP, f"{error} (see rollout.batch)")
    window = policy.maintenance_window if policy is not None else None
    if window is None or not window.includes:
        return result("rollout.window", Status.PASS, "no maintenance window")
    cluster_name = chart.get("cluster.name") or "tensor-fusion"
    pool = f"{cluster_name}-{chart.get('cluster.pool.name') or 'shared'}"
    found = (
        f"maintenance window {', '.join(window.includes)} is recorded, not enforced: updates "
        "roll out at any time unless the pool opts in"
    )
    fix = f"kubectl annotate gpupool {pool} tensor-fusion.ai/honour-maintenance-window=true"
    return result("rollout.window", Status.PASS, found, fix)


def oversell(chart: ChartValues) -> CheckResult:
    """`capacity.oversell`: conservative oversubscription."""
    if note := _no_pool(chart):
        return result("capacity.oversell", Status.PASS, note)
    ratios, error = _model(Oversubscription, chart, _OVERSUBSCRIPTION)
    if error:
        return result("capacity.oversell", Status.FAIL, error, CONSERVATIVE_SNIPPET)
    if ratios is None:
        found = "no oversubscription: virtual capacity equals physical capacity"
        return result("capacity.oversell", Status.PASS, found)
    values = {
        "tflopsOversellRatio": ratios.tflops_oversell_ratio,
        "vramExpandToHostMem": ratios.vram_expand_to_host_mem,
        "vramExpandToHostDisk": ratios.vram_expand_to_host_disk,
    }
    shown = [f"{name} {values[name]} (at most {limit})" for name, limit in OVERSELL_LIMITS.items()]
    over = [text for text, (name, limit) in zip(shown, OVERSELL_LIMITS.items(), strict=True)
            if values[name] > limit]  # fmt: skip
    tflops = f"{values['tflopsOversellRatio'] / 100:g}x the physical TFLOPS"
    if over:
        found = f"{_OVERSUBSCRIPTION}: {', '.join(over)}; schedulable TFLOPS = {tflops}"
        return result("capacity.oversell", Status.WARN, found, CONSERVATIVE_SNIPPET)
    found = f"{', '.join(f'{name} {values[name]}' for name in OVERSELL_LIMITS)} ({tflops})"
    return result("capacity.oversell", Status.PASS, found)


def log_level(chart: ChartValues) -> CheckResult:
    """`logging.level`: the node agents log at info (the chart renders TF_LOG_LEVEL=info)."""
    if note := _no_pool(chart):
        return result("logging.level", Status.PASS, note)
    found = (
        "TF_LOG_LEVEL=info: the chart writes it into the default pool's hypervisor pod "
        "template, and no value changes it"
    )
    return result("logging.level", Status.PASS, found)
