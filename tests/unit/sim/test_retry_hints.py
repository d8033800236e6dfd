"""Retrying waiting pods against the nodes a departure freed (queueing hints) places every pod
exactly as retrying every waiting pod against every node does, with fewer decisions."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given, settings

from tensorfusion.sim.cluster_file import ClusterFile, load_cluster
from tensorfusion.sim.engine import SimulationResult
from tensorfusion.sim.runner import SimulationOptions, new_simulation
from tensorfusion.sim.workload_file import WorkloadFile, load_workload
from tests.hypothesis_budget import examples

from .traces import clusters, workloads

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
Placement = tuple[str, str, str | None, tuple[str, ...], float | None, str | None]


def run(
    cluster: ClusterFile, workload: WorkloadFile, full_retry: bool, verify: bool = False
) -> SimulationResult:
    options = SimulationOptions(alerts=False, full_retry=full_retry, verify_fast_path=verify)
    return new_simulation(cluster, workload, Path("cluster.yaml"), options).run()


def placements(result: SimulationResult) -> list[Placement]:
    return [(p.key, p.outcome.value, p.node, p.gpus, p.placed_at, p.message) for p in result.pods]


@settings(max_examples=examples(60), deadline=None)
@given(cluster=clusters(), workload=workloads())
def test_hinted_retry_places_every_pod_as_a_full_retry(
    cluster: ClusterFile, workload: WorkloadFile
) -> None:
    full = run(cluster, workload, full_retry=True)
    hinted = run(cluster, workload, full_retry=False, verify=True)
    assert placements(hinted) == placements(full)
    assert hinted.decisions <= full.decisions
    # Each decision against the freed nodes only chose what a decision over all nodes chose.
    assert hinted.fast_path is not None
    assert hinted.fast_path.mismatches == 0, hinted.fast_path.examples


def test_the_example_needs_far_fewer_decisions_for_the_same_placements() -> None:
    cluster = load_cluster(EXAMPLES / "cluster.yaml")
    workload = load_workload(EXAMPLES / "workload.yaml")
    full = run(cluster, workload, full_retry=True)
    hinted = run(cluster, workload, full_retry=False)
    assert placements(hinted) == placements(full)
    assert sum(p.placed_at is not None and p.placed_at > p.arrival for p in hinted.pods) > 50
    assert hinted.decisions * 4 < full.decisions
