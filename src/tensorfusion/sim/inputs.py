"""What `tensor-fusion simulate` runs: cluster and workload files, or the openb trace."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from tensorfusion.sim.cluster_file import ClusterFile, load_cluster
from tensorfusion.sim.input_errors import InputError
from tensorfusion.sim.openb import OpenbRun, load_openb
from tensorfusion.sim.right_sizing import run_with_right_sizing
from tensorfusion.sim.runner import SimulationOptions, run_openb, run_simulation
from tensorfusion.sim.workload_file import WorkloadFile, load_workload

__all__ = ["DEFAULT_SEED", "MAX_INFLATION", "TraceSimulation", "simulation_inputs"]

DEFAULT_SEED: Final = 42
MAX_INFLATION: Final = 10.0

Progress = Callable[[int, int], None]


@dataclass(frozen=True, slots=True)
class TraceSimulation:
    """A cluster file and workload trace to simulate, where they came from, and how to run them."""

    cluster: ClusterFile
    workload: WorkloadFile
    source: Path
    openb: OpenbRun | None = None
    inflation: tuple[float, int] | None = None

    def run(
        self, options: SimulationOptions, progress: Progress | None, auto_scale: bool = False
    ) -> dict[str, Any]:
        """Simulate and return the report; `auto_scale` adds the right-sizing what-if
        (`rightSizing`), its progress counting twice the pods."""
        if self.openb is not None:
            return run_openb(self.openb, self.source, options, progress, self.inflation)
        if auto_scale:
            return run_with_right_sizing(self.cluster, self.workload, self.source, options,
                                         progress)  # fmt: skip
        return run_simulation(self.cluster, self.workload, self.source, options, progress)


def simulation_inputs(
    cluster: Path | None,
    workload: Path | None,
    openb: tuple[Path, Path] | None,
    inflate: float | None,
    seed: int | None,
    auto_scale: bool = False,
) -> TraceSimulation:
    """Load the inputs the flags name; InputError on a bad combination or bad file."""
    if openb is not None and auto_scale:
        raise InputError("--auto-scale: not with --openb (the openb trace carries no usage "
                         "profiles to right-size from)")  # fmt: skip
    if openb is None:
        if inflate is not None or seed is not None:
            flag = "--inflate" if inflate is not None else "--seed"
            raise InputError(f"{flag}: only with --openb NODES.csv PODS.csv")
        if cluster is None or workload is None:
            raise InputError(
                "give a cluster file and a workload file, or --openb NODES.csv PODS.csv"
            )
        return TraceSimulation(load_cluster(cluster), load_workload(workload), cluster)
    if cluster is not None or workload is not None:
        raise InputError("--openb: give either --openb NODES.csv PODS.csv or cluster and "
                         "workload files, not both")  # fmt: skip
    if seed is not None and inflate is None:
        raise InputError("--seed: only with --inflate (the seed of the draw)")
    if inflate is not None and not (math.isfinite(inflate) and 0 < inflate <= MAX_INFLATION):
        raise InputError(
            f"--inflate: invalid value {inflate}: a factor above 0 and at most "
            f"{MAX_INFLATION:g} (1.3: the arrived GPU request reaches 130% of the GPUs)"
        )
    chosen = DEFAULT_SEED if seed is None else seed
    run = load_openb(openb[0], openb[1], inflate, chosen)
    inflation = None if inflate is None else (inflate, chosen)
    return TraceSimulation(run.cluster, run.workload, openb[0], run, inflation)
