"""Runs a simulation or a single-pod placement from files: the wiring of the simulator."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from tensorfusion.adapters.package_data import default_alert_rule_set, default_scheduler_config
from tensorfusion.adapters.tsdb.duckdb_store import DuckDBMetricsStore
from tensorfusion.domain.admission.dry_run import PodPreparer
from tensorfusion.domain.alerting.replay import replay_alerts
from tensorfusion.domain.scheduling.native import NativeInputError, NativePlugins
from tensorfusion.domain.scheduling.native.cluster_view import NativeCluster
from tensorfusion.domain.scheduling.scheduler_config import (
    SchedulerConfigError,
    SchedulerSettings,
    ScoreWeights,
    read_scheduler_settings,
)
from tensorfusion.domain.simulate_schedule import UnknownNodesError
from tensorfusion.domain.simulate_schedule import simulate_schedule as explain_pod
from tensorfusion.sim.cluster_file import ClusterFile
from tensorfusion.sim.engine import SimPod, Simulation, SimulationResult
from tensorfusion.sim.inflation import inflation_curve
from tensorfusion.sim.input_errors import InputError
from tensorfusion.sim.metrics_recording import SIM_EPOCH_MS, MetricsRecorder
from tensorfusion.sim.openb import OpenbRun
from tensorfusion.sim.report import build_report
from tensorfusion.sim.virtual_cluster import PolicyOverrides, VirtualCluster, build_cluster
from tensorfusion.sim.workload_file import WorkloadFile

__all__ = [
    "SimulationOptions",
    "new_simulation",
    "run_openb",
    "run_simulation",
    "simulate_schedule",
]


@dataclass(frozen=True, slots=True)
class SimulationOptions:
    """How to run a trace."""

    overrides: PolicyOverrides = field(default_factory=PolicyOverrides)
    sample_interval: float = 60.0
    alerts: bool = True
    metrics_db: Path | None = None
    verify_fast_path: bool = False
    until: float | None = None
    full_retry: bool = False


@dataclass(slots=True)
class _Scheduler:
    settings: SchedulerSettings
    plugins: NativePlugins


def _scheduler(cluster: ClusterFile, path: Path) -> _Scheduler:
    config = cluster.scheduler_config or default_scheduler_config()
    try:
        settings = read_scheduler_settings(config)
    except SchedulerConfigError as exc:
        raise InputError(f"{path}: cluster: {exc}") from None
    return _Scheduler(settings, NativePlugins(settings.node_resources_fit))


def _native(virtual: VirtualCluster, scheduler: _Scheduler) -> NativeCluster:
    native = NativeCluster.from_nodes(scheduler.plugins, virtual.node_objects)
    for name, spec in virtual.nodes.items():
        if spec.requested:
            native.add_requests(name, spec.requested)
    return native


def _preparer(virtual: VirtualCluster) -> PodPreparer:
    objects = virtual.objects
    return PodPreparer(objects.pools, objects.quotas, objects.gpus)


def _policy(virtual: VirtualCluster, weights: ScoreWeights) -> dict[str, Any]:
    allocator = virtual.allocator
    pools = {}
    for name in sorted(virtual.pools):
        settings = allocator.pool(name)
        over = settings.oversubscription
        pools[name] = {
            "placementMode": settings.placement_mode.value,
            "oversubscription": None if over is None else (
                f"tflops x{over.tflops_oversell_ratio / 100:g}, "
                f"VRAM +{over.vram_expand_to_host_mem}% host RAM "
                f"+{over.vram_expand_to_host_disk}% disk"
            ),
        }  # fmt: skip
    return {
        "isolationPolicy": allocator.isolation_policy.value,
        "pools": pools,
        "scoreWeights": {
            "NodeResourcesFit": weights.node_resources_fit,
            "GPUResourcesFit": weights.gpu_resources_fit,
        },
    }


def _open_store(options: SimulationOptions) -> DuckDBMetricsStore:
    try:
        return DuckDBMetricsStore(options.metrics_db, threads=1)
    except Exception as exc:  # duckdb raises its own error types for unusable paths
        raise InputError(
            f"--metrics-db {options.metrics_db}: cannot open a DuckDB file: {exc}"
        ) from None


def new_simulation(
    cluster: ClusterFile,
    workload: WorkloadFile,
    cluster_path: Path,
    options: SimulationOptions | None = None,
    on_sample: Callable[[float, VirtualCluster, list[SimPod]], None] | None = None,
) -> Simulation:
    """The trace on the cluster file's virtual cluster, ready to run (InputError if invalid)."""
    options = options or SimulationOptions()
    scheduler = _scheduler(cluster, cluster_path)
    virtual = build_cluster(cluster, options.overrides)
    return Simulation(
        cluster=virtual,
        workload=workload,
        profile=scheduler.settings.profile,
        native=_native(virtual, scheduler),
        preparer=_preparer(virtual),
        sample_interval=options.sample_interval,
        on_sample=on_sample,
        verify_fast_path=options.verify_fast_path,
        until=options.until,
        full_retry=options.full_retry,
    )


def run_simulation(
    cluster: ClusterFile,
    workload: WorkloadFile,
    cluster_path: Path,
    options: SimulationOptions | None = None,
    progress: Callable[[int, int], None] | None = None,
    extra: Callable[[SimulationResult], dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """Run the trace through admission, scheduling, allocation, metrics and alert rules;
    `extra` adds keys to the report from the result."""
    options = options or SimulationOptions()
    simulation = new_simulation(cluster, workload, cluster_path, options)
    store = _open_store(options) if options.alerts else None
    recorder = MetricsRecorder(store) if store is not None else None
    if recorder is not None:
        simulation.on_sample = recorder.record
    try:
        result = simulation.run(progress)
    except NativeInputError as exc:
        raise InputError(f"workload: {exc}") from None
    alerts: list[dict[str, Any]] = []
    if recorder is not None:
        recorder.flush()
    if store is not None:
        replay = replay_alerts(
            default_alert_rule_set().rules, store, SIM_EPOCH_MS,
            SIM_EPOCH_MS + int(result.end_time * 1000) + int(options.sample_interval * 1000),
        )  # fmt: skip
        alerts = [
            {"alertname": e.rule, "state": e.kind, "at": e.as_dict()["time"],
             "severity": e.labels.get("severity", ""), "instance": e.instance,
             "summary": e.summary}
            for e in replay.events
        ]  # fmt: skip
        store.close()
    virtual = simulation.cluster
    report = build_report(result, virtual, _policy(virtual, simulation.profile.weights), alerts)
    if extra is not None:
        report.update(extra(result))
    return report


def run_openb(
    run: OpenbRun,
    source: Path,
    options: SimulationOptions | None = None,
    progress: Callable[[int, int], None] | None = None,
    inflation: tuple[float, int] | None = None,
) -> dict[str, Any]:
    """Simulate an openb trace; with `inflation` (factor, seed) the report gains the
    `inflation` curve of allocated against arrived GPU requests."""
    options = options or SimulationOptions()
    if options.until is None and run.until is not None:
        options = replace(options, until=run.until)

    def curve(result: SimulationResult) -> dict[str, Any]:
        if inflation is None:
            return {}
        placed = [p.placed_at is not None for p in result.pods]
        requests = run.gpu_requests[: len(placed)]
        return {"inflation": inflation_curve(requests, placed, run.cluster_gpus, *inflation)}

    return run_simulation(run.cluster, run.workload, source, options, progress, curve)


def simulate_schedule(
    cluster: ClusterFile,
    cluster_path: Path,
    pod: dict[str, Any],
    nodes: list[str] | None = None,
    mutate: bool = True,
) -> dict[str, Any]:
    """The `/api/simulate-schedule` body for one pod against the cluster file (nothing kept).

    Raises PreparationError (invalid annotations, not a GPU worker) and InputError.
    """
    scheduler = _scheduler(cluster, cluster_path)
    virtual = build_cluster(cluster)
    try:
        return explain_pod(
            pod, _preparer(virtual), _native(virtual, scheduler), virtual.allocator,
            profile=scheduler.settings.profile, nodes=nodes, mutate=mutate,
        )  # fmt: skip
    except UnknownNodesError as exc:
        raise InputError(f"--nodes: {exc}") from None
