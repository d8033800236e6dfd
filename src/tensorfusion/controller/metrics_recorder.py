"""The controller-side recorders of one cycle (metrics.md §3.3-§3.8, §5).

`ClusterRecorder.rows` builds the cycle's `ClusterSnapshot` from the leader's allocator
(`domain.cluster_metrics`), the GPUNode and GPUPool phases and the worker pods (`ready` from
the pod's Ready condition, `workload` from its label, extra tags from
`metricsExtraPodLabels`), and turns it into rows that all carry the cycle's timestamp.

Counters of `tf_system_metrics` never go backwards (§5): the leader first reads the latest
stored value of each counter per pool (`seed_query`, `seed_from`) and continues from there;
until that read succeeds it writes the gauge fields only. With the embedded store (a new file
per leader) the counters start at 0 at once (`seed_from({})`). What this process counted
itself comes from `counts` (the extender's allocation outcomes, keyed by column name).

`raw_cost` is written as 0 in this version: the pricing of metrics.md §4 is not computed yet.
"""

from __future__ import annotations

import logging
from collections import Counter as Tally
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any, Final

from tensorfusion.adapters.tsdb.store import QueryResult
from tensorfusion.domain.allocator.allocator import Allocator
from tensorfusion.domain.annotations import KEYS
from tensorfusion.domain.cluster_metrics import gpu_figures, node_and_pool_figures, worker_figures
from tensorfusion.domain.metrics.extra_tags import BUILT_IN_TAGS, extra_tags
from tensorfusion.domain.metrics.recorders import (
    ClusterSnapshot,
    PoolCounters,
    WorkerFigures,
    snapshot_rows,
)
from tensorfusion.domain.metrics.rows import MetricRow
from tensorfusion.domain.object_views import labels_of, name_of, status_of, uid_of
from tensorfusion.runtime.informer import ObjectCache

__all__ = [
    "COUNTER_COLUMNS",
    "ClusterRecorder",
    "parse_seed",
    "pod_ready",
    "seed_query",
]

_log = logging.getLogger(__name__)

COUNTER_COLUMNS: Final = (
    "total_allocation_success_cnt",
    "total_allocation_fail_cnt",
    "total_topo_satisfied_cnt",
    "total_topo_unsatisfied_cnt",
    "total_topo_fallback_cnt",
    "total_topo_search_degraded_cnt",
    "total_scale_up_cnt",
    "total_scale_down_cnt",
)
"""The cumulative counters of tf_system_metrics, seeded from the store."""
_GAUGE_COLUMNS: Final = ("total_workers_cnt", "total_nodes_cnt")
_FIELD_OF: Final = {
    "total_allocation_success_cnt": "allocation_success",
    "total_allocation_fail_cnt": "allocation_fail",
    "total_topo_satisfied_cnt": "topo_satisfied",
    "total_topo_unsatisfied_cnt": "topo_unsatisfied",
    "total_topo_fallback_cnt": "topo_fallback",
    "total_topo_search_degraded_cnt": "topo_search_degraded",
    "total_scale_up_cnt": "scale_up",
    "total_scale_down_cnt": "scale_down",
}

Counts = Callable[[], Mapping[str, Mapping[str, int]]]
"""Pool -> counter column -> what this process counted since it started."""


def pod_ready(pod: Mapping[str, Any]) -> bool:
    """The pod's Ready condition is True."""
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if isinstance(condition, Mapping) and condition.get("type") == "Ready":
            return condition.get("status") == "True"
    return False


def seed_query() -> str:
    """The latest stored value of each counter per pool (counters only grow, so the maximum
    is the latest). Plain SQL that GreptimeDB and DuckDB both run."""
    columns = ", ".join(f"max({column}) AS {column}" for column in COUNTER_COLUMNS)
    return f"SELECT pool, {columns} FROM tf_system_metrics GROUP BY pool"


def parse_seed(result: QueryResult) -> dict[str, dict[str, int]]:
    """Pool -> counter column -> stored value (NULL and non-numbers read as 0)."""
    seeded: dict[str, dict[str, int]] = {}
    for row in result.mappings():
        pool = row.get("pool")
        if not pool:
            continue
        values: dict[str, int] = {}
        for column in COUNTER_COLUMNS:
            value = row.get(column)
            try:
                values[column] = int(value) if value is not None else 0
            except (TypeError, ValueError):
                values[column] = 0
        seeded[str(pool)] = values
    return seeded


class ClusterRecorder:
    """Rows of one recording cycle from the allocator and the caches."""

    def __init__(
        self,
        allocator: Callable[[], Allocator | None],
        *,
        gpu_nodes: ObjectCache,
        pools: ObjectCache,
        pods: ObjectCache,
        counts: Counts | None = None,
    ) -> None:
        self._allocator = allocator
        self._gpu_nodes = gpu_nodes
        self._pools = pools
        self._pods = pods
        self._counts = counts or dict
        self._seed: dict[str, dict[str, int]] | None = None
        self._warned_tags: set[str] = set()

    @property
    def seeded(self) -> bool:
        """Whether counters are written (the stored values were read, or the store is new)."""
        return self._seed is not None

    def seed_from(self, stored: Mapping[str, Mapping[str, int]]) -> None:
        """Continue the counters from the stored values (empty: from 0)."""
        self._seed = {pool: dict(values) for pool, values in stored.items()}
        _log.info("metrics counters continue from the store for %d pools", len(self._seed))

    def snapshot(self, extra_pod_labels: Mapping[str, str]) -> ClusterSnapshot | None:
        """What this cycle records; None until the allocator has been recovered."""
        allocator = self._allocator()
        if allocator is None:
            return None
        self._warn_built_in(extra_pod_labels)
        phases = {
            **_phases(self._pools.list()),
            **_phases(self._gpu_nodes.list()),
        }
        nodes, pools = node_and_pool_figures(allocator, phases)
        workers = self._workers(allocator, extra_pod_labels)
        workers_per_pool = Tally(worker.pool for worker in workers)
        nodes_per_pool = Tally(node.pool for node in nodes)
        names = sorted({*allocator.pools, *(pool.name for pool in pools)} - {""})
        counts = self._counts()
        counters = [
            PoolCounters(
                pool=name,
                workers=workers_per_pool.get(name, 0),
                nodes=nodes_per_pool.get(name, 0),
                **self._counter_values(name, counts.get(name, {})),
            )
            for name in names
        ]
        return ClusterSnapshot(
            gpus=gpu_figures(allocator), nodes=nodes, pools=pools, workers=workers,
            counters=counters,
        )  # fmt: skip

    def _counter_values(self, pool: str, counted: Mapping[str, int]) -> dict[str, int]:
        base = (self._seed or {}).get(pool, {})
        return {
            _FIELD_OF[column]: int(base.get(column, 0)) + int(counted.get(column, 0))
            for column in COUNTER_COLUMNS
        }

    def _workers(
        self, allocator: Allocator, extra_pod_labels: Mapping[str, str]
    ) -> list[WorkerFigures]:
        workers: list[WorkerFigures] = []
        for pod in self._pods.list():
            record = allocator.records.get(uid_of(pod))
            if record is None:
                continue
            labels = labels_of(pod)
            figures = worker_figures(
                allocator, record, ready=pod_ready(pod), workload=str(labels.get(KEYS.workload, ""))
            )
            tags = extra_tags(labels, extra_pod_labels)
            if tags:
                figures = _with_tags(figures, tags)
            workers.append(figures)
        return workers

    def _warn_built_in(self, mapping: Mapping[str, str]) -> None:
        for key, tag in mapping.items():
            if tag in BUILT_IN_TAGS and tag not in self._warned_tags:
                self._warned_tags.add(tag)
                _log.warning(
                    "metricsExtraPodLabels: %s -> %s ignored: %s is a built-in tag", key, tag, tag
                )

    def rows(self, snapshot: ClusterSnapshot, ts_ms: int) -> list[MetricRow]:
        """Every row of the cycle; `tf_system_metrics` with gauges only until seeded."""
        rows = snapshot_rows(snapshot, ts_ms)
        if self.seeded:
            return rows
        return [_gauges_only(row) if row.table == "tf_system_metrics" else row for row in rows]


def _phases(objects: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    phases: dict[str, str] = {}
    for obj in objects:
        name = name_of(obj)
        phase = status_of(obj).get("phase")
        if name and phase:
            phases[name] = str(phase)
    return phases


def _with_tags(figures: WorkerFigures, tags: Mapping[str, str]) -> WorkerFigures:
    return replace(figures, extra_tags=dict(tags))


def _gauges_only(row: MetricRow) -> MetricRow:
    return MetricRow(
        row.table,
        row.ts_ms,
        row.tags,
        {name: value for name, value in row.fields.items() if name in _GAUGE_COLUMNS},
    )
