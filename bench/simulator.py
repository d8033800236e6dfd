"""Simulator benchmark: the bundled example scaled 1x, 10x and 50x, wall time and decisions.

Nodes and pods are scaled together: every node group and every trace entry gets k times its
replicas, and the entries' arrival intervals are divided by k, so the arrival rate per node
stays the same (the quota of the `research` namespace is left as it is). The scheduling run
(`--no-alerts`) is measured at every scale; the default run, which also records the tf_*
metrics every sample interval and replays the alert rules over them, at 1x and 10x, and at
50x until a wall-time cap. Then the openb workload-inflation experiment (`--openb ... --inflate
1.3 --seed 42 --no-alerts`, section `simulator-openb`; `--openb-only` runs just that). Run:
`python bench/simulator.py` (pinned to one core).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchmark_doc import write_section
from tensorfusion.domain.alerting.replay import replay_alerts
from tensorfusion.domain.vocabulary import PlacementMode
from tensorfusion.sim import runner
from tensorfusion.sim.cluster_file import ClusterFile, load_cluster
from tensorfusion.sim.metrics_recording import MetricsRecorder
from tensorfusion.sim.openb import load_openb
from tensorfusion.sim.runner import SimulationOptions, run_openb, run_simulation
from tensorfusion.sim.virtual_cluster import PolicyOverrides
from tensorfusion.sim.workload_file import WorkloadFile, load_workload

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
SCALES = (1, 10, 50)
TARGET_SECONDS = 60.0


def scaled(k: int) -> tuple[ClusterFile, WorkloadFile]:
    """The bundled example with k times the nodes and k times the pods."""
    cluster = load_cluster(EXAMPLES / "cluster.yaml")
    workload = load_workload(EXAMPLES / "workload.yaml")
    nodes = [n.model_copy(update={"replicas": n.replicas * k}) for n in cluster.nodes]
    entries = [
        e.model_copy(update={"replicas": e.replicas * k, "interval": e.interval / k})
        for e in workload.workloads
    ]
    return (
        cluster.model_copy(update={"nodes": nodes}),
        workload.model_copy(update={"workloads": entries}),
    )


@dataclass
class Run:
    """One measured run."""

    scale: int
    nodes: int
    pods: int
    seconds: float
    decisions: int
    placed: int
    simulated_seconds: float
    recording_seconds: float = 0.0
    replay_seconds: float = 0.0
    stopped_at: int | None = None  # pods arrived when the wall-time cap stopped the run


class _CapReachedError(Exception):
    def __init__(self, arrived: int) -> None:
        super().__init__(arrived)
        self.arrived = arrived


@dataclass
class Phase:
    """Wall seconds spent in some functions (a nested call is counted once)."""

    seconds: float = 0.0
    depth: int = 0

    def timed(self, function: Callable[..., Any]) -> Callable[..., Any]:
        """`function`, adding its wall time to this phase."""

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            self.depth += 1
            try:
                return function(*args, **kwargs)
            finally:
                self.depth -= 1
                if not self.depth:
                    self.seconds += time.perf_counter() - started

        return wrapper


def measure(k: int, alerts: bool, cap: float | None = None) -> Run:
    """Run the scaled example once (`cap`: stop after that many wall seconds)."""
    cluster, workload = scaled(k)
    pods = sum(e.replicas for e in workload.workloads)
    nodes = sum(n.replicas for n in cluster.nodes)
    recording, replay = Phase(), Phase()
    record, flush = MetricsRecorder.record, MetricsRecorder.flush
    MetricsRecorder.record = recording.timed(record)  # type: ignore[method-assign]
    MetricsRecorder.flush = recording.timed(flush)  # type: ignore[method-assign]
    vars(runner)["replay_alerts"] = replay.timed(replay_alerts)
    started = time.perf_counter()

    def progress(arrived: int, total: int) -> None:
        if cap is not None and time.perf_counter() - started > cap:
            raise _CapReachedError(arrived)

    try:
        report = run_simulation(
            cluster, workload, EXAMPLES / "cluster.yaml", SimulationOptions(alerts=alerts),
            progress,
        )  # fmt: skip
    except _CapReachedError as capped:
        return Run(k, nodes, pods, time.perf_counter() - started, 0, 0, 0.0,
                   recording.seconds, replay.seconds, capped.arrived)  # fmt: skip
    finally:
        MetricsRecorder.record, MetricsRecorder.flush = record, flush  # type: ignore[method-assign]
        vars(runner)["replay_alerts"] = replay_alerts
    summary = report["summary"]
    return Run(k, nodes, pods, time.perf_counter() - started, summary["decisions"],
               summary["placed"], summary["simulatedSeconds"], recording.seconds,
               replay.seconds)  # fmt: skip


def _verdict(run: Run) -> str:
    if run.scale != max(SCALES):
        return ""
    return "meets" if run.stopped_at is None and run.seconds < TARGET_SECONDS else "MISSES"


def report(plain: list[Run], default: list[Run], cap: float) -> str:
    """The docs/benchmarks.md section."""
    base = plain[0]
    lines = [
        "## Simulator (`bench/simulator.py`)",
        "",
        "The bundled example (`examples/cluster.yaml`, `examples/workload.yaml`) with nodes and",
        "pods scaled together (k times the replicas, arrival intervals divided by k), one core.",
        f"Targets: 50x under {TARGET_SECONDS:.0f} s, decisions growing linearly with pods.",
        "",
        "Scheduling run (`--no-alerts`): admission dry run, decisions, allocation, samples.",
        "",
        "| scale | nodes | pods | wall s | decisions | decisions per pod | placed | "
        "simulated span | target |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in plain:
        per_pod = r.decisions / r.pods
        linear = r.decisions / base.decisions / (r.pods / base.pods)
        lines.append(
            f"| {r.scale}x | {r.nodes:,} | {r.pods:,} | {r.seconds:.1f} | {r.decisions:,} | "
            f"{per_pod:.2f} ({linear:.2f}x of 1x) | {r.placed:,} | "
            f"{r.simulated_seconds / 3600:.1f} h | {_verdict(r)} |"
        )
    lines += [
        "",
        "Default run (metrics recorded every 60 s of simulated time while pods run, alert",
        f"rules replayed over them; 50x stopped after {cap:.0f} s of wall time):",
        "",
        "| scale | wall s | of which recording metrics | of which alert replay | target |",
        "|---|---|---|---|---|",
    ]
    for r in default:
        wall = f"{r.seconds:.1f}"
        if r.stopped_at is not None:
            wall = f"> {cap:.0f}, not finished ({r.stopped_at:,} of {r.pods:,} pods arrived)"
        lines.append(
            f"| {r.scale}x | {wall} | {r.recording_seconds:.1f} | {r.replay_seconds:.1f} | "
            f"{_verdict(r)} |"
        )
    tenfold = next((r for r in default if r.scale == 10 and r.stopped_at is None), None)
    plain_ten = next(r for r in plain if r.scale == 10)
    if tenfold is not None:
        lines += [
            "",
            f"Where the default run's time goes (10x): {tenfold.recording_seconds:.1f} s "
            f"recording the tf_* metrics ({tenfold.recording_seconds / tenfold.seconds:.0%}), "
            f"{tenfold.replay_seconds:.1f} s replaying the 15 default alert rules "
            f"({tenfold.replay_seconds / tenfold.seconds:.0%}), against "
            f"{plain_ten.seconds:.1f} s for the whole scheduling run. Both grow with GPUs "
            "times sample times (and the replay's queries with the store's size), and the "
            "50x trace spans about 5 times the simulated hours of the 10x one (the research "
            "namespace's quota of 24 workers drains its 1,500 pods slowly), so the default "
            "50x run MISSES the target by far; `--no-alerts` meets it. Open: a recorder that "
            "writes only what changed, and a replay that evaluates rules incrementally.",
        ]
    return "\n".join(lines)


OPENB = Path(__file__).resolve().parent.parent.parent / "shared" / "data" / "openb"
NODES = OPENB / "openb_node_list_gpu_node.csv"
TASKS = OPENB / "openb_pod_list_default.csv"
FACTOR = 1.3


@dataclass
class InflationRun:
    """Wall time, decisions, pods and the report's `inflation` curve of one run."""

    mode: PlacementMode | None
    seed: int
    seconds: float
    decisions: int
    pods: int
    curve: dict[str, Any]


def inflation_run(seed: int, mode: PlacementMode | None = None) -> InflationRun:
    """`tensor-fusion simulate --openb ... --inflate 1.3 --seed SEED --no-alerts` in-process
    (`mode`: the `--placement-mode` what-if, None for the pool's default)."""
    started = time.perf_counter()
    run = load_openb(NODES, TASKS, FACTOR, seed)
    options = SimulationOptions(overrides=PolicyOverrides(placement_mode=mode), alerts=False)
    report = run_openb(run, NODES, options, None, (FACTOR, seed))
    return InflationRun(mode, seed, time.perf_counter() - started,
                        report["summary"]["decisions"], report["summary"]["pods"],
                        report["inflation"])  # fmt: skip


def openb_report(run: InflationRun) -> str:
    """The docs/benchmarks.md section of the openb experiment."""
    verdict = "meets" if run.seconds < TARGET_SECONDS else "MISSES"
    last = run.curve["points"][-1]
    return "\n".join(
        [
            "## Simulator on the openb trace (`bench/simulator.py`)",
            "",
            "`tensor-fusion simulate --openb NODES.csv PODS.csv --inflate 1.3 --seed 42 "
            "--no-alerts` in-process, one core (1,213 nodes, 6,212 GPUs, default placement mode).",
            f"Target: under {TARGET_SECONDS:.0f} s.",
            "",
            "| pods | wall s | decisions | arrived | allocated | target |",
            "|---|---|---|---|---|---|",
            f"| {run.pods:,} | {run.seconds:.1f} | {run.decisions:,} | "
            f"{last['arrivedPercent']:.1f} % | {last['allocatedPercent']:.1f} % | {verdict} |",
            "",
            "What keeps it there: the fast walk opens only nodes with `count` GPUs holding the",
            "compute percent (or TFLOPs) and VRAM asked, so the nodes whose GPUs are full are",
            "never opened (openb's sharing tasks ask no VRAM, which alone pruned nothing), and",
            "pods with equal native requirements share each node's filter outcome and",
            "NodeResourcesFit score until the node changes (`PodRequirements.class_key`).",
            "Placement quality per mode: section `placement-quality`.",
        ]
    )


def main() -> None:
    """Run the benchmark, print the figures and record them in docs/benchmarks.md."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cap", type=float, default=120.0, help="wall seconds for 50x alerts")
    parser.add_argument("--no-write", action="store_true", help="do not update the docs")
    parser.add_argument("--openb-only", action="store_true", help="only the openb experiment")
    options = parser.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    openb = openb_report(inflation_run(42))
    print(openb)
    if not options.no_write:
        write_section("simulator-openb", openb)
    if options.openb_only:
        return
    plain = [measure(k, alerts=False) for k in SCALES]
    default = [measure(k, alerts=True, cap=options.cap if k == 50 else None) for k in SCALES]
    text = report(plain, default, options.cap)
    print(text)
    if not options.no_write:
        write_section("simulator", text)


if __name__ == "__main__":
    main()
