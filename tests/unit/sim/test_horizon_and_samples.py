"""`until` ends a run at a simulated horizon; samples are not measured while nothing changes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tensorfusion.sim.cluster_file import ClusterFile
from tensorfusion.sim.engine import PodOutcome, Simulation, SimulationResult
from tensorfusion.sim.report import build_report
from tensorfusion.sim.runner import SimulationOptions, new_simulation
from tensorfusion.sim.virtual_cluster import VirtualCluster
from tensorfusion.sim.workload_file import WorkloadFile, parse_seconds

from .traces import HARDWARE, POOL, PREFIX

CLUSTER = ClusterFile.model_validate({
    "hardware": HARDWARE,
    "pools": [{"name": POOL, "isDefault": True}],
    "nodes": [{"name": "n", "pool": POOL, "cpu": "16", "memory": "64Gi",
               "gpus": {"model": "big", "count": 1}}],
})  # fmt: skip


def trace(*entries: tuple[str, float, float, str]) -> WorkloadFile:
    """Entries (name, arrival, duration, vram-request) of one pod each."""
    return WorkloadFile.model_validate({
        "workloads": [
            {"name": name, "arrival": arrival, "duration": duration,
             "pod": {"metadata": {"labels": {PREFIX + "enabled": "true"},
                                  "annotations": {PREFIX + "tflops-request": "10",
                                                  PREFIX + "vram-request": vram}},
                     "spec": {"containers": [{"name": "c"}]}}}
            for name, arrival, duration, vram in entries
        ]
    })  # fmt: skip


def run(
    workload: WorkloadFile,
    until: float | None = None,
    recorder: list[float] | None = None,
) -> SimulationResult:
    options = SimulationOptions(alerts=False, until=until)
    simulation = new_simulation(CLUSTER, workload, Path("cluster.yaml"), options)
    if recorder is not None:

        def record(t: float, cluster: VirtualCluster, pods: Any) -> None:
            recorder.append(t)

        simulation.on_sample = record
    return simulation.run()


# A long-running pod, one that waits for it, and one arriving late.
LONG = trace(
    ("first", 0, 100_000, "60Gi"), ("second", 30, 600, "60Gi"), ("late", 50_000, 60, "1Gi")
)


def test_until_ends_the_run_at_the_horizon() -> None:
    result = run(LONG, until=3_600)
    assert result.end_time == 3_600
    by_name = {p.name: p for p in result.pods}
    assert set(by_name) == {"first", "second"}  # "late" arrives after the horizon
    assert by_name["first"].outcome is PodOutcome.RUNNING
    assert by_name["second"].outcome is PodOutcome.WAITING
    assert by_name["second"].message  # explained at the end
    assert max(s.last_t for s in result.samples) == 3_600
    report = build_report(result, new_simulation(CLUSTER, LONG, Path("c")).cluster, {})
    assert report["summary"]["longestPendingWaitSeconds"] == 3_570
    assert report["summary"]["running"] == 1 and report["summary"]["pending"] == 1


def test_a_run_that_ends_before_the_horizon_keeps_its_own_end() -> None:
    short = trace(("only", 0, 600, "1Gi"))
    assert run(short, until=10_000).end_time == 600
    assert run(short).end_time == 600


def test_nothing_is_measured_while_nothing_changes() -> None:
    result = run(LONG)
    # Measured: t=0 and the first sample after each arrival or departure.
    assert [s.t for s in result.samples] == [0, 60, 50_040, 50_100, 100_020, 100_620]
    # Every sample time is accounted for: the full grid up to the end.
    assert sum(s.repeats for s in result.samples) == 100_620 // 60 + 1
    held = result.samples[1]
    assert (held.repeats, held.last_t) == (50_040 // 60 - 1, 49_980)


def test_a_recorder_still_sees_every_sample_time() -> None:
    times: list[float] = []
    result = run(LONG, until=1_200, recorder=times)
    assert times == [60.0 * k for k in range(21)]
    assert [s.t for s in result.samples] == [0, 60]
    assert result.samples[-1].repeats == 20


def test_means_count_a_held_sample_once_per_time_it_stands_for() -> None:
    result = run(trace(("a", 0, 600, "40Gi"), ("b", 0, 6_000, "20Gi")))
    report = build_report(result, new_simulation(CLUSTER, LONG, Path("c")).cluster, {})
    grid = [s for s in result.samples for _ in range(s.repeats)]
    busy = [s.vram_allocated_percent for s in grid if s.running or s.waiting]
    assert len(busy) == 6_000 // 60  # until "b" leaves at 6,000
    expected = round(sum(busy) / len(busy), 2)
    assert expected != round(sum(s.vram_allocated_percent for s in result.samples) / 3, 2)
    assert report["utilisation"]["meanVramAllocatedPercent"] == expected
    timeline = report["timeline"]
    assert [p["t"] for p in timeline] == [0, 540, 600, 5_940, 6_000]
    assert timeline[0]["vramAllocatedPercent"] == timeline[1]["vramAllocatedPercent"]


def test_quiet_stretches_are_skipped_not_walked(monkeypatch: pytest.MonkeyPatch) -> None:
    visited: list[float] = []
    real = Simulation._sample

    def counting(self: Simulation, now: float, step: int) -> None:
        visited.append(now)
        real(self, now, step)

    monkeypatch.setattr(Simulation, "_sample", counting)
    result = run(LONG)
    assert visited == [s.t for s in result.samples]  # 6 of 1,678 sample times


@pytest.mark.parametrize(("text", "seconds"), [("90", 90.0), (" 1.5 ", 1.5), ("1h30m", 5400.0)])
def test_a_duration_text_may_be_plain_seconds(text: str, seconds: float) -> None:
    assert parse_seconds(text) == seconds


@pytest.mark.parametrize("text", ["1e9", "-5", "90x", "9" * 13])
def test_other_duration_texts_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="not a duration"):
        parse_seconds(text)
