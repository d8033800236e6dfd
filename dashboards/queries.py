"""The SQL of every dashboard panel and variable: the one place the generator and the tests read.

Each text is written for Grafana's MySQL data source pointed at GreptimeDB. It uses only the
macro `$__timeFilter(col)` and the multi-value variables `$pool`, `$node`, `$namespace` and
`$workload` (Grafana quotes each value), and otherwise SQL that GreptimeDB, the embedded DuckDB
store and MariaDB all read: no dialect functions, `ts AS "time"` for time series, explicit
`ORDER BY` on non-null columns, and no integer division (docs/observability.md).

The controller writes every row of a recording cycle with the cycle's start time, so "now" in a
table or stat is the newest cycle within the dashboard's range: `ts = (SELECT max(ts) ...)`.
The alert panels run the packaged default rules' own queries with `{{ .Conditions }}` replaced by
the dashboard's time range.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Final

from tensorfusion.adapters.package_data import default_alert_rule_definitions

__all__ = [
    "ALERT_RULES",
    "QUERIES",
    "Format",
    "Query",
    "alert_rule_key",
    "query",
]


class Format(StrEnum):
    """Grafana's result format of a SQL query."""

    TABLE = "table"
    TIME_SERIES = "time_series"


@dataclass(frozen=True, slots=True)
class Query:
    """One SQL text, keyed `<dashboard>.<panel>` (`variable.<name>` for variables)."""

    key: str
    sql: str
    format: Format = Format.TABLE


def _latest(table: str) -> str:
    """The newest recording cycle of `table` within the dashboard's range."""
    return f"(SELECT max(ts) FROM {table} WHERE $__timeFilter(ts))"


def _series(table: str, label: str, columns: str, filters: str) -> str:
    """One row per (time, label) of `table` within the range."""
    return (
        f'SELECT ts AS "time", {label}, {columns}\nFROM {table}\n'
        f"WHERE $__timeFilter(ts) AND {filters}\nORDER BY 1, 2"
    )


CYCLE: Final = _latest("tf_pool_metrics")
"""The newest controller cycle (every table of a cycle shares its time)."""

_POOL = "pool IN ($pool)"
_NODE = "pool IN ($pool) AND node IN ($node)"
_WORKER = "pool IN ($pool) AND namespace IN ($namespace) AND workload IN ($workload)"

_VARIABLES = [
    Query(
        "variable.pool",
        "SELECT DISTINCT pool FROM tf_pool_metrics WHERE $__timeFilter(ts) ORDER BY pool",
    ),
    Query(
        "variable.node",
        "SELECT DISTINCT node FROM tf_node_metrics\n"
        f"WHERE $__timeFilter(ts) AND {_POOL} ORDER BY node",
    ),
    Query(
        "variable.namespace",
        "SELECT DISTINCT namespace FROM tf_worker_resources\n"
        f"WHERE $__timeFilter(ts) AND {_POOL} ORDER BY namespace",
    ),
    Query(
        "variable.workload",
        "SELECT DISTINCT workload FROM tf_worker_resources\n"
        f"WHERE $__timeFilter(ts) AND {_POOL} AND namespace IN ($namespace) ORDER BY workload",
    ),
]

_OVERVIEW = [
    Query(
        "overview.gpus",
        f"SELECT sum(gpu_count) AS gpus FROM tf_pool_metrics\nWHERE {_POOL} AND ts = {CYCLE}",
    ),
    Query(
        "overview.nodes",
        "SELECT count(*) AS nodes FROM tf_node_metrics\n"
        f"WHERE {_POOL} AND ts = {_latest('tf_node_metrics')}",
    ),
    Query(
        "overview.workers",
        "SELECT sum(total_workers_cnt) AS workers FROM tf_system_metrics\n"
        f"WHERE {_POOL} AND ts = {_latest('tf_system_metrics')}",
    ),
    Query(
        "overview.tflops_allocated",
        "SELECT sum(allocated_tflops) * 100.0 / NULLIF(sum(capacity_tflops), 0)"
        " AS tflops_allocated\nFROM tf_gpu_metrics\n"
        f"WHERE {_POOL} AND ts = {_latest('tf_gpu_metrics')}",
    ),
    Query(
        "overview.vram_allocated",
        "SELECT sum(allocated_vram_bytes) * 100.0 / NULLIF(sum(capacity_vram_bytes), 0)"
        " AS vram_allocated\nFROM tf_gpu_metrics\n"
        f"WHERE {_POOL} AND ts = {_latest('tf_gpu_metrics')}",
    ),
    Query(
        "overview.pools",
        "SELECT p.pool, p.phase, p.gpu_count AS gpus,\n"
        "  c.physical_tflops,\n"
        "  p.limited_tflops * 100.0 / NULLIF(p.limited_tflops_percent_virtual, 0)"
        " AS virtual_tflops,\n"
        "  p.allocated_tflops, p.allocated_tflops_percent, p.allocated_tflops_percent_virtual,\n"
        "  p.limited_tflops,\n"
        "  p.limited_tflops * 100.0 / NULLIF(c.physical_tflops, 0)"
        " AS tflops_limits_of_physical_percent,\n"
        "  c.physical_vram_bytes,\n"
        "  p.limited_vram_bytes * 100.0 / NULLIF(p.limited_vram_percent_virtual, 0)"
        " AS virtual_vram_bytes,\n"
        "  p.allocated_vram_bytes, p.allocated_vram_percent, p.allocated_vram_percent_virtual,\n"
        "  p.limited_vram_bytes,\n"
        "  p.limited_vram_bytes * 100.0 / NULLIF(c.physical_vram_bytes, 0)"
        " AS vram_limits_of_physical_percent\n"
        "FROM tf_pool_metrics p\n"
        "LEFT JOIN (\n"
        "  SELECT pool, sum(capacity_tflops) AS physical_tflops,"
        " sum(capacity_vram_bytes) AS physical_vram_bytes\n"
        f"  FROM tf_gpu_metrics WHERE ts = {_latest('tf_gpu_metrics')}\n"
        "  GROUP BY pool\n"
        ") c ON c.pool = p.pool\n"
        f"WHERE p.pool IN ($pool) AND p.ts = {CYCLE}\n"
        "ORDER BY p.pool",
    ),
    Query(
        "overview.tflops",
        _series(
            "tf_pool_metrics",
            "pool",
            "allocated_tflops AS allocated, limited_tflops AS limits",
            _POOL,
        ),
        Format.TIME_SERIES,
    ),
    Query(
        "overview.allocation_percent",
        _series(
            "tf_pool_metrics",
            "pool",
            "allocated_tflops_percent AS tflops_of_physical,"
            " allocated_tflops_percent_virtual AS tflops_of_virtual,"
            " allocated_vram_percent AS vram_of_physical,"
            " allocated_vram_percent_virtual AS vram_of_virtual",
            _POOL,
        ),
        Format.TIME_SERIES,
    ),
    Query(
        "overview.vram",
        _series(
            "tf_pool_metrics",
            "pool",
            "allocated_vram_bytes AS allocated, limited_vram_bytes AS limits",
            _POOL,
        ),
        Format.TIME_SERIES,
    ),
    Query(
        "overview.scheduling",
        _series(
            "tf_system_metrics",
            "pool",
            "total_allocation_success_cnt AS allocations, total_allocation_fail_cnt AS failures",
            _POOL,
        ),
        Format.TIME_SERIES,
    ),
]

_NODES = [
    Query(
        "nodes.table",
        "SELECT node, pool, phase, gpu_count AS gpus, allocated_tflops,"
        " allocated_tflops_percent,\n  allocated_tflops_percent_virtual, allocated_vram_bytes,"
        " allocated_vram_percent,\n  allocated_vram_percent_virtual, raw_cost\n"
        f"FROM tf_node_metrics\nWHERE {_NODE} AND ts = {_latest('tf_node_metrics')}\n"
        "ORDER BY node",
    ),
    Query(
        "nodes.tflops_allocated",
        _series("tf_node_metrics", "node", "allocated_tflops_percent AS tflops_allocated", _NODE),
        Format.TIME_SERIES,
    ),
    Query(
        "nodes.vram_allocated",
        _series("tf_node_metrics", "node", "allocated_vram_percent AS vram_allocated", _NODE),
        Format.TIME_SERIES,
    ),
    Query(
        "nodes.utilisation",
        'SELECT ts AS "time", node, avg(compute_percentage) AS compute,'
        " avg(memory_percentage) AS memory\nFROM tf_gpu_usage\n"
        f"WHERE $__timeFilter(ts) AND {_NODE}\nGROUP BY ts, node\nORDER BY 1, 2",
        Format.TIME_SERIES,
    ),
    Query(
        "nodes.power",
        'SELECT ts AS "time", node, sum(power_usage) AS power\nFROM tf_gpu_usage\n'
        f"WHERE $__timeFilter(ts) AND {_NODE}\nGROUP BY ts, node\nORDER BY 1, 2",
        Format.TIME_SERIES,
    ),
]

_GPUS = [
    Query(
        "gpus.table",
        "SELECT gpu, node, pool, gpu_model, phase, capacity_tflops, allocated_tflops,\n"
        "  allocated_tflops_percent, capacity_vram_bytes, allocated_vram_bytes,"
        " allocated_vram_percent\n"
        f"FROM tf_gpu_metrics\nWHERE {_NODE} AND ts = {_latest('tf_gpu_metrics')}\n"
        "ORDER BY node, gpu",
    ),
    Query(
        "gpus.allocated",
        _series(
            "tf_gpu_metrics",
            "gpu",
            "allocated_tflops_percent AS tflops_allocated,"
            " allocated_vram_percent AS vram_allocated",
            _NODE,
        ),
        Format.TIME_SERIES,
    ),
    Query(
        "gpus.compute",
        _series("tf_gpu_usage", "uuid", "compute_percentage AS compute", _NODE),
        Format.TIME_SERIES,
    ),
    Query(
        "gpus.memory",
        _series("tf_gpu_usage", "uuid", "memory_bytes AS memory", _NODE),
        Format.TIME_SERIES,
    ),
    Query(
        "gpus.temperature",
        _series("tf_gpu_usage", "uuid", "temperature", _NODE),
        Format.TIME_SERIES,
    ),
    Query(
        "gpus.power",
        _series("tf_gpu_usage", "uuid", "power_usage AS power", _NODE),
        Format.TIME_SERIES,
    ),
    Query(
        "gpus.pods",
        "SELECT namespace, pod, node, gpu_name, gpu_model_index, gpu_count AS gpus\n"
        f"FROM tf_gpu_allocation\nWHERE node IN ($node) AND ts = {CYCLE}\n"
        "ORDER BY namespace, pod",
    ),
]

_WORKLOADS = [
    Query(
        "workloads.workers",
        "SELECT namespace, workload, worker, qos, gpu_count AS gpus, tflops_request,"
        " tflops_limit,\n  vram_bytes_request, vram_bytes_limit, ready\n"
        f"FROM tf_worker_resources\nWHERE {_WORKER} AND ts = {CYCLE}\n"
        "ORDER BY namespace, worker",
    ),
    Query(
        "workloads.usage_against_request",
        "SELECT u.namespace, u.workload, u.worker, u.uuid,\n"
        "  u.avg_tflops, u.max_tflops, r.tflops_request, r.tflops_limit,\n"
        "  u.avg_tflops * 100.0 / NULLIF(r.tflops_request, 0)"
        " AS avg_tflops_of_request_percent,\n"
        "  u.max_tflops * 100.0 / NULLIF(r.tflops_limit, 0) AS max_tflops_of_limit_percent,\n"
        "  u.max_vram_bytes, r.vram_bytes_request, r.vram_bytes_limit,\n"
        "  u.max_vram_bytes * 100.0 / NULLIF(r.vram_bytes_limit, 0)"
        " AS max_vram_of_limit_percent\n"
        "FROM (\n"
        "  SELECT namespace, workload, worker, uuid, avg(compute_tflops) AS avg_tflops,\n"
        "    max(compute_tflops) AS max_tflops, max(memory_bytes) AS max_vram_bytes\n"
        f"  FROM tf_worker_usage\n  WHERE $__timeFilter(ts) AND {_WORKER}\n"
        "  GROUP BY namespace, workload, worker, uuid\n"
        ") u\n"
        "LEFT JOIN (\n"
        "  SELECT namespace, worker, max(tflops_request) AS tflops_request,"
        " max(tflops_limit) AS tflops_limit,\n"
        "    max(vram_bytes_request) AS vram_bytes_request,"
        " max(vram_bytes_limit) AS vram_bytes_limit\n"
        "  FROM tf_worker_resources WHERE $__timeFilter(ts)\n"
        "  GROUP BY namespace, worker\n"
        ") r ON r.namespace = u.namespace AND r.worker = u.worker\n"
        "ORDER BY u.namespace, u.worker, u.uuid",
    ),
    Query(
        "workloads.tflops_used",
        'SELECT ts AS "time", worker, avg(compute_tflops) AS used_per_gpu\n'
        f"FROM tf_worker_usage\nWHERE $__timeFilter(ts) AND {_WORKER}\n"
        "GROUP BY ts, worker\nORDER BY 1, 2",
        Format.TIME_SERIES,
    ),
    Query(
        "workloads.tflops_requested",
        _series(
            "tf_worker_resources",
            "worker",
            "tflops_request AS request_per_gpu, tflops_limit AS limit_per_gpu",
            _WORKER,
        ),
        Format.TIME_SERIES,
    ),
    Query(
        "workloads.vram_used",
        'SELECT ts AS "time", worker, max(memory_bytes) AS used_per_gpu_max\n'
        f"FROM tf_worker_usage\nWHERE $__timeFilter(ts) AND {_WORKER}\n"
        "GROUP BY ts, worker\nORDER BY 1, 2",
        Format.TIME_SERIES,
    ),
    Query(
        "workloads.vram_requested",
        _series(
            "tf_worker_resources",
            "worker",
            "vram_bytes_request AS request_per_gpu, vram_bytes_limit AS limit_per_gpu",
            _WORKER,
        ),
        Format.TIME_SERIES,
    ),
    Query(
        "workloads.throttling",
        'SELECT ts AS "time", worker, sum(compute_throttled_cnt) AS compute_throttled,\n'
        "  sum(vram_freezed_cnt) AS vram_freezes, sum(vram_resumed_cnt) AS vram_resumes\n"
        f"FROM tf_worker_usage\nWHERE $__timeFilter(ts) AND {_WORKER}\n"
        "GROUP BY ts, worker\nORDER BY 1, 2",
        Format.TIME_SERIES,
    ),
    Query(
        "workloads.throttling_increase",
        "SELECT namespace, workload, worker, uuid,\n"
        "  max(compute_throttled_cnt) - min(compute_throttled_cnt) AS compute_throttled,\n"
        "  max(vram_freezed_cnt) - min(vram_freezed_cnt) AS vram_freezes,\n"
        "  max(vram_resumed_cnt) - min(vram_resumed_cnt) AS vram_resumes\n"
        f"FROM tf_worker_usage\nWHERE $__timeFilter(ts) AND {_WORKER}\n"
        "GROUP BY namespace, workload, worker, uuid\nORDER BY namespace, worker, uuid",
    ),
]


def _rules() -> list[dict[str, Any]]:
    return default_alert_rule_definitions()


ALERT_RULES: Final[Mapping[str, Mapping[str, Any]]] = {rule["name"]: rule for rule in _rules()}
"""The packaged default rules by name (the chart's `dynamicConfig.alertRules`)."""


def alert_rule_key(name: str) -> str:
    """The query key of a default rule's panel."""
    return f"alerts.rule.{name}"


def _threshold(name: str) -> str:
    value = ALERT_RULES[name]["threshold"]
    return f"{value:g}" if isinstance(value, float) else str(value)


def _rule_sql(name: str) -> str:
    """A default rule's query over the dashboard's range instead of its evaluation window."""
    text = str(ALERT_RULES[name]["query"]).strip()
    text = text.replace("{{ .Conditions }}", "$__timeFilter(ts)")
    text = text.replace("{{ .Threshold }}", _threshold(name))
    if "{{" in text:
        raise ValueError(
            f"default rule {name}: a template action other than .Conditions and "
            f".Threshold is left in its query"
        )
    return text


def _count_rule(expression: str, comparison: str, rule: str, alias: str) -> str:
    """How many rows meet a default rule's condition at its threshold."""
    condition = f"{expression} {comparison} {_threshold(rule)}"
    return f"sum(CASE WHEN {condition} THEN 1 ELSE 0 END) AS {alias}"


def _counts_per_cycle(table: str, counts: list[str]) -> str:
    return (
        'SELECT ts AS "time",\n  '
        + ",\n  ".join(counts)
        + f"\nFROM {table}\nWHERE $__timeFilter(ts)\nGROUP BY ts\nORDER BY 1"
    )


_TFLOPS_LEFT = "100.0 - allocated_tflops_percent"
_VRAM_LEFT = "100.0 - allocated_vram_percent"

_ALERTS = [
    *(Query(alert_rule_key(name), _rule_sql(name)) for name in ALERT_RULES),
    Query(
        "alerts.gpu_conditions",
        _counts_per_cycle(
            "tf_gpu_usage",
            [
                _count_rule("temperature", ">", "GPUTemperatureHigh", "gpus_over_temperature"),
                _count_rule("memory_percentage", ">", "GPUVRAMFull", "gpus_vram_full"),
                _count_rule("compute_percentage", ">", "GPUTFlopsFull", "gpus_compute_full"),
            ],
        ),
        Format.TIME_SERIES,
    ),
    Query(
        "alerts.node_conditions",
        _counts_per_cycle(
            "tf_node_metrics",
            [
                _count_rule(
                    _TFLOPS_LEFT, "<", "NodeTFlopsAllocationCritical", "nodes_tflops_critical"
                ),
                _count_rule(_TFLOPS_LEFT, "<", "NodeTFlopsAllocationWarning", "nodes_tflops_low"),
                _count_rule(_VRAM_LEFT, "<", "NodeVRAMAllocationCritical", "nodes_vram_critical"),
                _count_rule(_VRAM_LEFT, "<", "NodeVRAMAllocationWarning", "nodes_vram_low"),
            ],
        ),
        Format.TIME_SERIES,
    ),
    Query(
        "alerts.allocation_failures",
        _series(
            "tf_system_metrics", "pool", "total_allocation_fail_cnt AS failures", "pool IS NOT NULL"
        ),
        Format.TIME_SERIES,
    ),
]


def _by_key(queries: Iterable[Query]) -> dict[str, Query]:
    found: dict[str, Query] = {}
    for item in queries:
        if item.key in found:
            raise ValueError(f"two queries are keyed {item.key}")
        found[item.key] = item
    return found


QUERIES: Final[Mapping[str, Query]] = _by_key(
    [*_VARIABLES, *_OVERVIEW, *_NODES, *_GPUS, *_WORKLOADS, *_ALERTS]
)
"""Every SQL text of the dashboards, by key."""


def query(key: str) -> Query:
    """The query keyed `key`; KeyError names it."""
    try:
        return QUERIES[key]
    except KeyError:
        raise KeyError(f"no dashboard query {key!r}") from None
