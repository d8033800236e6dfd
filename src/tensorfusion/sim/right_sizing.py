"""The right-sizing what-if (`simulate --auto-scale`, docs/simulator.md): the trace as given,
then again with each workload's pods placed at the request the autoscaler would have given them
(`RightSizer`), and what changed (`right_sizing_section`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from tensorfusion.domain.scheduling.native import NativeInputError
from tensorfusion.sim.cluster_file import ClusterFile
from tensorfusion.sim.engine import SimulationResult
from tensorfusion.sim.input_errors import InputError
from tensorfusion.sim.report import build_report
from tensorfusion.sim.right_sizer import RightSizer
from tensorfusion.sim.right_sizing_report import right_sizing_section
from tensorfusion.sim.runner import SimulationOptions, new_simulation, run_simulation
from tensorfusion.sim.workload_file import WorkloadFile

__all__ = ["run_with_right_sizing"]

Progress = Callable[[int, int], None]


def run_with_right_sizing(
    cluster: ClusterFile,
    workload: WorkloadFile,
    cluster_path: Path,
    options: SimulationOptions,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """The report of the trace as given, with the key `rightSizing`: the trace run again with
    the right-sized requests (no metrics or alerts), compared. `progress` counts both runs'
    arrivals against twice the pods."""
    baseline: list[SimulationResult] = []

    def keep(result: SimulationResult) -> dict[str, Any]:
        baseline.append(result)
        return {}

    def first(done: int, total: int) -> None:
        if progress is not None:
            progress(done, 2 * total)

    def second(done: int, total: int) -> None:
        if progress is not None:
            progress(total + done, 2 * total)

    report = run_simulation(cluster, workload, cluster_path, options,
                            first if progress else None, keep)  # fmt: skip
    sizer = RightSizer(workload, {p.name: p.vertical_scaling_rules for p in cluster.pools})
    plain = replace(options, alerts=False, metrics_db=None, verify_fast_path=False)
    simulation = new_simulation(cluster, workload, cluster_path, plain)
    simulation.resize = sizer
    try:
        resized = simulation.run(second if progress else None)
    except NativeInputError as exc:
        raise InputError(f"workload: {exc}") from None
    virtual = simulation.cluster
    report["rightSizing"] = right_sizing_section(
        baseline=baseline[0], baseline_report=report,
        resized_report=build_report(resized, virtual, report["policy"]),
        plan_of=sizer.plan_of, plans=sorted(sizer.plans.values(), key=lambda p: p.entry),
        cluster=virtual,
    )  # fmt: skip
    return report
