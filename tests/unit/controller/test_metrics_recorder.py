"""The controller-side recorder: one snapshot of the allocator and the worker pods per cycle,
counters continued from the store, gauges only until then."""

from __future__ import annotations

from typing import Any

from tensorfusion.adapters.tsdb.store import QueryResult
from tensorfusion.controller.metrics_recorder import (
    COUNTER_COLUMNS,
    ClusterRecorder,
    parse_seed,
    pod_ready,
    seed_query,
)
from tensorfusion.domain.annotations import KEYS
from tensorfusion.domain.metrics.extra_tags import extra_tags
from tensorfusion.domain.metrics.rows import MetricRow

from .test_allocator_state import FakeCache, gpu, state_with, worker

TS = 1_767_225_600_000


def ready_worker(name: str, gpus: str, ready: bool, **labels: str) -> dict[str, Any]:
    pod = worker(name, gpus, "Running")
    pod["metadata"]["labels"].update(labels)
    pod["status"]["conditions"] = [
        {"type": "PodScheduled", "status": "True"},
        {"type": "Ready", "status": "True" if ready else "False"},
    ]
    return pod


def recorder_for(pods: FakeCache, **options: Any) -> tuple[ClusterRecorder, Any]:
    gpu_nodes = FakeCache({"metadata": {"name": "node-a"}, "status": {"phase": "Provisioning"}})
    pools = FakeCache({"metadata": {"name": "shared"}, "status": {"phase": "Pending"}})
    state = state_with(gpus=FakeCache(gpu("a1"), gpu("a2")), pods=pods, gpu_nodes=gpu_nodes,
                       pools=pools)  # fmt: skip
    recorder = ClusterRecorder(
        lambda: state.allocator, gpu_nodes=gpu_nodes, pools=pools, pods=pods, **options
    )
    return recorder, state


def by_table(rows: list[MetricRow], table: str) -> list[MetricRow]:
    return [row for row in rows if row.table == table]


def test_nothing_is_recorded_before_the_allocator_is_recovered() -> None:
    recorder, state = recorder_for(FakeCache())
    assert recorder.snapshot({}) is None
    state.recover()
    assert recorder.snapshot({}) is not None


def test_one_cycle_reads_the_allocator_the_phases_and_the_pods() -> None:
    pods = FakeCache(
        ready_worker("p1", "a1", True, **{KEYS.workload: "train", "team": "ml"}),
        ready_worker("p2", "a2", False),
    )
    recorder, state = recorder_for(pods)
    state.recover()
    snapshot = recorder.snapshot({"team": "team", "other": "absent", "pool-label": "pool"})
    assert snapshot is not None
    rows = recorder.rows(snapshot, TS)
    assert {row.ts_ms for row in rows} == {TS}
    resources = {row.tags["worker"]: row for row in by_table(rows, "tf_worker_resources")}
    assert resources["p1"].fields["ready"] is True and resources["p2"].fields["ready"] is False
    assert resources["p1"].tags["workload"] == "train" and resources["p1"].tags["team"] == "ml"
    assert "team" not in resources["p2"].tags
    assert resources["p1"].fields["tflops_request"] == 100.0
    assert resources["p1"].tags["pool"] == "shared"  # a built-in tag is never overridden
    [node] = by_table(rows, "tf_node_metrics")
    assert node.tags == {"node": "node-a", "pool": "shared", "phase": "Provisioning"}
    assert round(float(node.fields["allocated_tflops_percent"]), 3) == round(200 / 624 * 100, 3)
    [pool] = by_table(rows, "tf_pool_metrics")
    assert pool.tags == {"pool": "shared", "phase": "Pending"}
    assert len(by_table(rows, "tf_gpu_metrics")) == 2
    assert len(by_table(rows, "tf_gpu_allocation")) == 2


def test_counters_are_left_out_until_seeded_then_continue_from_the_store() -> None:
    counted = {"shared": {"total_allocation_fail_cnt": 2}}
    recorder, state = recorder_for(FakeCache(ready_worker("p1", "a1", True)),
                                   counts=lambda: counted)  # fmt: skip
    state.recover()
    snapshot = recorder.snapshot({})
    assert snapshot is not None
    [system] = by_table(recorder.rows(snapshot, TS), "tf_system_metrics")
    assert system.fields == {"total_workers_cnt": 1, "total_nodes_cnt": 1}
    assert not recorder.seeded
    stored = QueryResult(
        ("pool", *COUNTER_COLUMNS),
        [
            ("shared", 41, 7, None, 0, 0, 0, 4, 0),
            ("gone", 1, 1, 1, 1, 1, 1, 1, 1),
            (None, 9, 9, 9, 9, 9, 9, 9, 9),
        ],
    )
    recorder.seed_from(parse_seed(stored))
    snapshot = recorder.snapshot({})
    assert snapshot is not None
    [system] = by_table(recorder.rows(snapshot, TS), "tf_system_metrics")
    assert system.fields["total_allocation_success_cnt"] == 41
    assert system.fields["total_allocation_fail_cnt"] == 9
    assert system.fields["total_topo_satisfied_cnt"] == 0
    assert system.fields["total_scale_up_cnt"] == 4 and system.fields["total_workers_cnt"] == 1


def test_pod_readiness_extra_tags_and_the_seed_query() -> None:
    assert pod_ready({"status": {"conditions": [{"type": "Ready", "status": "True"}]}})
    assert not pod_ready({"status": {"conditions": [{"type": "Ready", "status": "Unknown"}]}})
    assert not pod_ready({"status": {"phase": "Running"}})
    assert extra_tags({"a": "1", "b": "", "c": "3"}, {"a": "tag_a", "b": "tag_b", "c": "node"}) == {
        "tag_a": "1"
    }
    sql = seed_query()
    assert sql.startswith("SELECT pool, max(total_allocation_success_cnt) AS ")
    assert sql.endswith("FROM tf_system_metrics GROUP BY pool")
    assert "max(total_scale_up_cnt) AS total_scale_up_cnt" in sql
