"""Recorders: one cycle of a snapshot into rows, into the embedded store, read by the rules."""

from __future__ import annotations

from tensorfusion.adapters.package_data import default_alert_rule_set
from tensorfusion.adapters.tsdb.duckdb_store import DuckDBMetricsStore
from tensorfusion.domain.alerting.replay import replay_alerts
from tensorfusion.domain.allocator.allocator import Allocator
from tensorfusion.domain.cluster_metrics import node_and_pool_figures, worker_figures
from tensorfusion.domain.metrics.recorders import (
    ClusterSnapshot,
    GPUFigures,
    GPUUsageSample,
    NodeFigures,
    PoolCounters,
    PoolFigures,
    WorkerFigures,
    WorkerUsageSample,
    record_interval,
    snapshot_rows,
)
from tensorfusion.domain.metrics.schema import table
from tests.unit.allocator.builders import gpu, request

GIB = 1 << 30


def _snapshot(step: int) -> ClusterSnapshot:
    return ClusterSnapshot(
        gpus=[
            GPUFigures(
                "gpu-a", "node-a", "pool", "A100", "Running", 312_000, 80 * GIB, 15_600, 4 * GIB
            )
        ],
        nodes=[
            NodeFigures(
                "node-a",
                "pool",
                "Running",
                1,
                312_000,
                15_600,
                80 * GIB,
                4 * GIB,
                624_000,
                327_600,
                80 * GIB,
                4 * GIB,
                raw_cost=0.25,
            )
        ],
        pools=[
            PoolFigures(
                "pool",
                "Running",
                1,
                312_000,
                15_600,
                80 * GIB,
                4 * GIB,
                624_000,
                327_600,
                80 * GIB,
                4 * GIB,
            )
        ],
        workers=[
            WorkerFigures(
                "w-0",
                "ns",
                "pool",
                "node-a",
                "uid-1",
                "train",
                "",
                1,
                296.4,
                296.4,
                76.0 * GIB,
                76.0 * GIB,
                True,
                gpus=(("gpu-a", "A100", 0),),
                extra_tags={"team": "ml", "pool": "ignored"},
            )
        ],
        counters=[PoolCounters("pool", 1, 1, allocation_success=step, allocation_fail=step)],
        gpu_usage=[
            GPUUsageSample("node-a", "pool", "GPU-A", 50.0, 312.0, 40 * GIB, 80 * GIB, 95.0)
        ],
        worker_usage=[
            WorkerUsageSample(
                "w-0",
                "ns",
                "pool",
                "node-a",
                "GPU-A",
                "train",
                50.0,
                312.0,
                40 * GIB,
                76 * GIB,
                compute_throttled_cnt=step,
            )
        ],
    )


def test_rows_of_one_cycle() -> None:
    rows = {row.table: row for row in snapshot_rows(_snapshot(3), 1_000)}
    assert set(rows) == {
        "tf_gpu_allocation",
        "tf_gpu_metrics",
        "tf_node_metrics",
        "tf_pool_metrics",
        "tf_worker_resources",
        "tf_system_metrics",
        "tf_gpu_usage",
        "tf_worker_usage",
    }
    assert {row.ts_ms for row in rows.values()} == {1_000}
    node = rows["tf_node_metrics"].fields
    assert node["allocated_tflops_percent"] == 95.0 and node["allocated_vram_percent"] == 95.0
    assert node["allocated_tflops_percent_virtual"] == 47.5 and node["gpu_count"] == 1
    pool = rows["tf_pool_metrics"].fields
    assert pool["limited_tflops"] == 296.4 and pool["limited_tflops_percent_virtual"] == 47.5
    allocation = rows["tf_gpu_allocation"]
    assert allocation.tags["gpu_model_index"] == "A100:0" and allocation.tags["team"] == "ml"
    assert rows["tf_worker_resources"].tags["pool"] == "pool"  # built-in tag wins
    assert rows["tf_worker_resources"].tags["qos"] == "medium"
    assert rows["tf_gpu_usage"].fields["memory_percentage"] == 50.0
    assert rows["tf_gpu_usage"].tags["uuid"] == "gpu-a"
    for row in rows.values():
        schema = table(row.table)
        for name, value in row.fields.items():
            column = schema.column_type(name)
            assert column is not None, (row.table, name)
            assert isinstance(value, {"FLOAT": float, "INT": int, "BOOL": bool}[column.name]), (
                row.table,
                name,
                value,
            )


def test_recorded_intervals_feed_the_default_rules() -> None:
    store = DuckDBMetricsStore(threads=1)
    start = 1_787_220_000_000
    try:
        for step in range(0, 60):
            record_interval(store, _snapshot(step), start + step * 10_000)
        report = replay_alerts(default_alert_rule_set().rules, store, start, start + 590_000)
    finally:
        store.close()
    fired = {event.rule for event in report.events if event.kind == "firing"}
    assert {
        "NodeTFlopsAllocationWarning",
        "NodeVRAMAllocationWarning",
        "GPUTemperatureHigh",
        "WorkerTFlopsThrottled",
        "WorkerAllocationFailed",
    } <= fired
    assert report.errors == []


def test_worker_figures_come_from_the_allocation_record() -> None:
    allocator = Allocator()
    allocator.upsert_gpu(gpu("g1", "n1", capacity=("200", "80Gi")))
    wanted = request("p", ("0", "10Gi"), percent="50", limit=("150", "20Gi"))
    record = allocator.assume(wanted, "n1", ["g1"], 0)
    figures = worker_figures(allocator, record, ready=False, workload="fallback")
    assert (figures.pod, figures.node, figures.workload, figures.ready) == ("p", "n1", "p", False)
    assert (figures.tflops_request, figures.tflops_limit) == (100.0, 150.0)
    assert figures.gpu_ids_annotation == "g1" and figures.gpus == (("g1", "A100", None),)
    nodes, pools = node_and_pool_figures(allocator, {"n1": "Pending"})
    assert nodes[0].phase == "Pending" and pools[0].phase == "Running"
