"""What each dashboard query returns on the fixture (`fixture.py`), in `normalize`d form.

Worked out from the fixture's figures: e.g. pool-a holds 300 physical TFLOPS (3 x 100), 186
requested (node-1 90 + node-2 96), limits 320 of a virtual 600 (2x), so its limits are 106.667 %
of physical (oversubscription in use); gpu-1b averages 98.75 % VRAM, 98.833 % compute
((98 + 99 + 99.5) / 3) and 93 °C, over every default threshold.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from .fixture import CYCLES_MS, GB

__all__ = ["EXPECTED", "FILTERED"]

Row = tuple[Any, ...]


def per_cycle(*rows: Row) -> list[Row]:
    """The same rows at each of the three cycles in the range, time first."""
    return [(ts, *row) for ts in CYCLES_MS for row in rows]


def by_cycle(*cycles: Sequence[Row]) -> list[Row]:
    """Rows that differ between cycles: `cycles[i]` are the rows of cycle i."""
    return [(CYCLES_MS[index], *row) for index, rows in enumerate(cycles) for row in rows]


_POOL_A_NOW = (
    "pool-a",
    "Running",
    3.0,
    300.0,
    600.0,
    186.0,
    62.0,
    31.0,
    320.0,
    106.667,
    240.0 * GB,
    480.0 * GB,
    119.0 * GB,
    49.583,
    24.792,
    166.0 * GB,
    69.167,
)
_POOL_B_NOW = (
    "pool-b",
    "Running",
    1.0,
    30.0,
    None,
    0.0,
    0.0,
    0.0,
    0.0,
    0.0,
    24.0 * GB,
    None,
    0.0,
    0.0,
    0.0,
    0.0,
    0.0,
)
_NODES_NOW = [
    ("node-1", "pool-a", "Running", 2.0, 90.0, 45.0, 22.5, 44.0 * GB, 27.5, 13.75, 2.5),
    ("node-2", "pool-a", "Running", 1.0, 96.0, 96.0, 48.0, 75.0 * GB, 93.75, 46.875, 1.25),
    ("node-3", "pool-b", "Running", 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.5),
]
_GPUS_NOW = [
    (
        "gpu-1a",
        "node-1",
        "pool-a",
        "H100",
        "Running",
        100.0,
        50.0,
        50.0,
        80.0 * GB,
        24.0 * GB,
        30.0,
    ),
    (
        "gpu-1b",
        "node-1",
        "pool-a",
        "H100",
        "Running",
        100.0,
        40.0,
        40.0,
        80.0 * GB,
        20.0 * GB,
        25.0,
    ),
    (
        "gpu-2a",
        "node-2",
        "pool-a",
        "H100",
        "Running",
        100.0,
        96.0,
        96.0,
        80.0 * GB,
        75.0 * GB,
        93.75,
    ),
    ("gpu-3a", "node-3", "pool-b", "L4", "Running", 30.0, 0.0, 0.0, 24.0 * GB, 0.0, 0.0),
]
_WORKERS_NOW = [
    ("team-a", "dev", "w-dev", "low", 1.0, 10.0, 60.0, 4.0 * GB, 8.0 * GB, 1.0),
    ("team-a", "train", "w-train", "high", 2.0, 40.0, 80.0, 20.0 * GB, 40.0 * GB, 1.0),
    ("team-b", "infer", "w-infer", "medium", 1.0, 96.0, 100.0, 75.0 * GB, 78.0 * GB, 1.0),
]

EXPECTED: Final[Mapping[str, list[Row]]] = {
    "variable.pool": [("pool-a",), ("pool-b",)],
    "variable.node": [("node-1",), ("node-2",), ("node-3",)],
    "variable.namespace": [("team-a",), ("team-b",)],
    "variable.workload": [("dev",), ("infer",), ("train",)],
    # overview
    "overview.gpus": [(4.0,)],
    "overview.nodes": [(3.0,)],
    "overview.workers": [(3.0,)],
    "overview.tflops_allocated": [(56.364,)],  # 186 of 330
    "overview.vram_allocated": [(45.076,)],  # 119 GB of 264 GB
    "overview.pools": [_POOL_A_NOW, _POOL_B_NOW],
    "overview.tflops": per_cycle(("pool-a", 186.0, 320.0), ("pool-b", 0.0, 0.0)),
    "overview.allocation_percent": per_cycle(
        ("pool-a", 62.0, 31.0, 49.583, 24.792), ("pool-b", 0.0, 0.0, 0.0, 0.0)
    ),
    "overview.vram": per_cycle(("pool-a", 119.0 * GB, 166.0 * GB), ("pool-b", 0.0, 0.0)),
    "overview.scheduling": by_cycle(
        [("pool-a", 10.0, 2.0), ("pool-b", 0.0, 0.0)],
        [("pool-a", 11.0, 2.0), ("pool-b", 0.0, 0.0)],
        [("pool-a", 12.0, 5.0), ("pool-b", 0.0, 0.0)],
    ),
    # nodes
    "nodes.table": _NODES_NOW,
    "nodes.tflops_allocated": per_cycle(("node-1", 45.0), ("node-2", 96.0), ("node-3", 0.0)),
    "nodes.vram_allocated": per_cycle(("node-1", 27.5), ("node-2", 93.75), ("node-3", 0.0)),
    "nodes.utilisation": by_cycle(
        [("node-1", 79.0, 74.375), ("node-2", 30.0, 25.0), ("node-3", 0.5, 1.0)],
        [("node-1", 84.5, 74.375), ("node-2", 30.0, 25.0), ("node-3", 0.5, 1.0)],
        [("node-1", 89.75, 74.375), ("node-2", 30.0, 25.0), ("node-3", 0.5, 1.0)],
    ),
    "nodes.power": per_cycle(("node-1", 950.0), ("node-2", 200.0), ("node-3", 30.0)),
    # GPUs
    "gpus.table": _GPUS_NOW,
    "gpus.allocated": per_cycle(
        ("gpu-1a", 50.0, 30.0),
        ("gpu-1b", 40.0, 25.0),
        ("gpu-2a", 96.0, 93.75),
        ("gpu-3a", 0.0, 0.0),
    ),
    "gpus.compute": by_cycle(
        [("gpu-1a", 60.0), ("gpu-1b", 98.0), ("gpu-2a", 30.0), ("gpu-3a", 0.5)],
        [("gpu-1a", 70.0), ("gpu-1b", 99.0), ("gpu-2a", 30.0), ("gpu-3a", 0.5)],
        [("gpu-1a", 80.0), ("gpu-1b", 99.5), ("gpu-2a", 30.0), ("gpu-3a", 0.5)],
    ),
    "gpus.memory": per_cycle(
        ("gpu-1a", 40.0 * GB), ("gpu-1b", 79.0 * GB), ("gpu-2a", 20.0 * GB), ("gpu-3a", 0.24 * GB)
    ),
    "gpus.temperature": by_cycle(
        [("gpu-1a", 70.0), ("gpu-1b", 92.0), ("gpu-2a", 65.0), ("gpu-3a", 40.0)],
        [("gpu-1a", 71.0), ("gpu-1b", 93.0), ("gpu-2a", 65.0), ("gpu-3a", 40.0)],
        [("gpu-1a", 72.0), ("gpu-1b", 94.0), ("gpu-2a", 65.0), ("gpu-3a", 40.0)],
    ),
    "gpus.power": per_cycle(
        ("gpu-1a", 300.0), ("gpu-1b", 650.0), ("gpu-2a", 200.0), ("gpu-3a", 30.0)
    ),
    "gpus.pods": [
        ("team-a", "w-dev", "node-1", "gpu-1a", "H100:0", 1.0),
        ("team-a", "w-train", "node-1", "gpu-1a,gpu-1b", "H100:0,H100:1", 2.0),
        ("team-b", "w-infer", "node-2", "gpu-2a", "H100:0", 1.0),
    ],
    # workloads
    "workloads.workers": _WORKERS_NOW,
    "workloads.usage_against_request": [
        (
            "team-a",
            "dev",
            "w-dev",
            "gpu-1a",
            5.0,
            5.0,
            10.0,
            60.0,
            50.0,
            8.333,
            2.0 * GB,
            4.0 * GB,
            8.0 * GB,
            25.0,
        ),
        (
            "team-a",
            "train",
            "w-train",
            "gpu-1a",
            35.0,
            40.0,
            40.0,
            80.0,
            87.5,
            50.0,
            18.0 * GB,
            20.0 * GB,
            40.0 * GB,
            45.0,
        ),
        (
            "team-a",
            "train",
            "w-train",
            "gpu-1b",
            79.0,
            80.0,
            40.0,
            80.0,
            197.5,
            100.0,
            20.0 * GB,
            20.0 * GB,
            40.0 * GB,
            50.0,
        ),
        (
            "team-b",
            "infer",
            "w-infer",
            "gpu-2a",
            30.0,
            30.0,
            96.0,
            100.0,
            31.25,
            30.0,
            20.0 * GB,
            75.0 * GB,
            78.0 * GB,
            25.641,
        ),
    ],
    "workloads.tflops_used": by_cycle(
        [("w-dev", 5.0), ("w-infer", 30.0), ("w-train", 54.0)],
        [("w-dev", 5.0), ("w-infer", 30.0), ("w-train", 57.0)],
        [("w-dev", 5.0), ("w-infer", 30.0), ("w-train", 60.0)],
    ),
    "workloads.tflops_requested": per_cycle(
        ("w-dev", 10.0, 60.0), ("w-infer", 96.0, 100.0), ("w-train", 40.0, 80.0)
    ),
    "workloads.vram_used": by_cycle(
        [("w-dev", 2.0 * GB), ("w-infer", 20.0 * GB), ("w-train", 18.0 * GB)],
        [("w-dev", 2.0 * GB), ("w-infer", 20.0 * GB), ("w-train", 19.0 * GB)],
        [("w-dev", 2.0 * GB), ("w-infer", 20.0 * GB), ("w-train", 20.0 * GB)],
    ),
    "workloads.vram_requested": per_cycle(
        ("w-dev", 4.0 * GB, 8.0 * GB),
        ("w-infer", 75.0 * GB, 78.0 * GB),
        ("w-train", 20.0 * GB, 40.0 * GB),
    ),
    "workloads.throttling": by_cycle(
        [("w-dev", 0.0, 1.0, 1.0), ("w-infer", 0.0, 0.0, 0.0), ("w-train", 10.0, 0.0, 0.0)],
        [("w-dev", 0.0, 1.0, 1.0), ("w-infer", 0.0, 0.0, 0.0), ("w-train", 15.0, 0.0, 0.0)],
        [("w-dev", 0.0, 3.0, 3.0), ("w-infer", 0.0, 0.0, 0.0), ("w-train", 25.0, 0.0, 0.0)],
    ),
    "workloads.throttling_increase": [
        ("team-a", "dev", "w-dev", "gpu-1a", 0.0, 2.0, 2.0),
        ("team-a", "train", "w-train", "gpu-1a", 0.0, 0.0, 0.0),
        ("team-a", "train", "w-train", "gpu-1b", 15.0, 0.0, 0.0),
        ("team-b", "infer", "w-infer", "gpu-2a", 0.0, 0.0, 0.0),
    ],
    # alerts: the default rules over the range
    "alerts.rule.WorkerTFlopsThrottled": [("train", "w-train", "gpu-1b", "node-1", 15.0)],
    "alerts.rule.WorkerVRAMSwitchCountIncreasing": [("dev", "w-dev", "gpu-1a", "node-1", 2.0)],
    "alerts.rule.WorkerAllocationFailed": [("pool-a", 3.0)],
    "alerts.rule.GPUVRAMFull": [("node-1", "pool-a", "gpu-1b", 98.75)],
    "alerts.rule.GPUTFlopsFull": [("node-1", "pool-a", "gpu-1b", 98.833)],
    "alerts.rule.GPUTemperatureHigh": [("node-1", "pool-a", "gpu-1b", 93.0)],
    "alerts.rule.NodeTFlopsAllocationCritical": [("node-2", "pool-a", 4.0)],
    "alerts.rule.NodeTFlopsAllocationWarning": [("node-2", "pool-a", 4.0)],
    # pool-a averages 70.5 % TFLOPS and 60.625 % VRAM over its nodes: no pool rule fires.
    "alerts.rule.PoolTotalTFlopsAllocationCritical": [],
    "alerts.rule.PoolTotalTFlopsAllocationWarning": [],
    "alerts.rule.NodeVRAMAllocationCritical": [],  # node-2 has 6.25 % VRAM left
    "alerts.rule.NodeVRAMAllocationWarning": [("node-2", "pool-a", 6.25)],
    "alerts.rule.PoolVRAMAllocationWarning": [],
    "alerts.rule.EmptyGPU": [("node-3", "pool-b")],
    "alerts.rule.IdleGPU": [("node-3", "pool-b", "gpu-3a", 0.5, 1.0)],
    "alerts.gpu_conditions": per_cycle((1.0, 1.0, 1.0)),
    "alerts.node_conditions": per_cycle((1.0, 1.0, 0.0, 1.0)),
    "alerts.allocation_failures": by_cycle(
        [("pool-a", 2.0), ("pool-b", 0.0)],
        [("pool-a", 2.0), ("pool-b", 0.0)],
        [("pool-a", 5.0), ("pool-b", 0.0)],
    ),
}
"""Every query with every variable at All."""

FILTERED: Final[Sequence[tuple[str, Mapping[str, Sequence[str]], list[Row]]]] = [
    ("overview.gpus", {"pool": ["pool-b"]}, [(1.0,)]),
    ("overview.pools", {"pool": ["pool-a"]}, [_POOL_A_NOW]),
    ("variable.node", {"pool": ["pool-b"]}, [("node-3",)]),
    ("nodes.table", {"node": ["node-1", "node-3"]}, [_NODES_NOW[0], _NODES_NOW[2]]),
    ("gpus.table", {"node": ["node-2"]}, [_GPUS_NOW[2]]),
    ("variable.workload", {"namespace": ["team-a"]}, [("dev",), ("train",)]),
    ("workloads.workers", {"namespace": ["team-b"]}, [_WORKERS_NOW[2]]),
    ("workloads.workers", {"workload": ["train", "dev"]}, _WORKERS_NOW[:2]),
]
"""Queries with some variables narrowed (the others at All): the filter takes effect."""
