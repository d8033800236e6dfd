"""The nine `tf_*` tables (metrics.md §3) and their DDL for GreptimeDB and DuckDB."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Final

__all__ = [
    "AGENT_SAMPLED_TABLES",
    "DEFAULT_AGENT_SAMPLE_INTERVAL_S",
    "TABLES",
    "TABLE_NAMES",
    "ColumnType",
    "TableSchema",
    "duckdb_create_table",
    "greptime_create_table",
    "table",
    "tables_markdown",
]


class ColumnType(Enum):
    """Store types of a column: (GreptimeDB type, DuckDB type)."""

    FLOAT = ("DOUBLE", "DOUBLE")
    INT = ("BIGINT", "BIGINT")
    BOOL = ("BOOLEAN", "BOOLEAN")
    STRING = ("STRING", "VARCHAR")

    @property
    def greptime(self) -> str:
        """GreptimeDB column type."""
        return self.value[0]

    @property
    def duckdb(self) -> str:
        """DuckDB column type."""
        return self.value[1]


F, N, B, S = ColumnType.FLOAT, ColumnType.INT, ColumnType.BOOL, ColumnType.STRING


@dataclass(frozen=True, slots=True)
class TableSchema:
    """Tags (in primary-key order), typed fields and the time column of one table."""

    name: str
    tags: tuple[str, ...]
    fields: tuple[tuple[str, ColumnType], ...]
    time_column: str = "ts"
    extra_tags: bool = False
    skipping_index: tuple[str, ...] = ()
    fulltext: tuple[str, ...] = ()

    @property
    def field_types(self) -> dict[str, ColumnType]:
        """Field name to type."""
        return dict(self.fields)

    def column_type(self, column: str) -> ColumnType | None:
        """Type of a tag or field column, None when unknown."""
        if column in self.tags:
            return ColumnType.STRING
        return self.field_types.get(column)


def _floats(*names: str) -> tuple[tuple[str, ColumnType], ...]:
    return tuple((name, F) for name in names)


_ALLOCATED = (
    "allocated_tflops",
    "allocated_tflops_percent",
    "allocated_tflops_percent_virtual",
    "allocated_vram_bytes",
    "allocated_vram_percent",
    "allocated_vram_percent_virtual",
)

TABLES: Final[tuple[TableSchema, ...]] = (
    TableSchema(
        "tf_gpu_usage",
        ("node", "pool", "uuid"),
        (
            ("compute_percentage", F),
            ("compute_tflops", F),
            ("memory_bytes", N),
            ("memory_percentage", F),
            *_floats(
                "temperature",
                "power_usage",
                "rx",
                "tx",
                "graphics_clock_mhz",
                "sm_clock_mhz",
                "memory_clock_mhz",
                "video_clock_mhz",
                "nvlink_rx",
                "nvlink_tx",
            ),
            ("mps_daemon_up", N),
            ("mps_daemon_restarts", N),
        ),
    ),
    TableSchema(
        "tf_worker_usage",
        ("workload", "worker", "pod_name", "namespace", "pool", "node", "uuid"),
        (
            ("compute_percentage", F),
            ("compute_tflops", F),
            ("memory_bytes", N),
            ("memory_percentage", F),
            ("compute_throttled_cnt", N),
            ("vram_freezed_cnt", N),
            ("vram_resumed_cnt", N),
            ("enforced_vram_limit_bytes", N),
            ("enforced_compute_percent", F),
            ("usage_known", N),
        ),
        extra_tags=True,
        skipping_index=("worker",),
    ),
    TableSchema(
        "tf_worker_resources",
        ("namespace", "pool", "qos", "worker", "workload"),
        (
            ("gpu_count", N),
            *_floats(
                "tflops_request",
                "tflops_limit",
                "vram_bytes_request",
                "vram_bytes_limit",
                "raw_cost",
            ),
            ("ready", B),
        ),
        extra_tags=True,
        skipping_index=("worker",),
    ),
    TableSchema(
        "tf_node_metrics",
        ("node", "pool", "phase"),
        (*_floats(*_ALLOCATED, "raw_cost"), ("gpu_count", N)),
    ),
    TableSchema(
        "tf_pool_metrics",
        ("pool", "phase"),
        (
            *_floats(
                *_ALLOCATED,
                "limited_tflops",
                "limited_vram_bytes",
                "limited_tflops_percent_virtual",
                "limited_vram_percent_virtual",
            ),
            ("gpu_count", N),
        ),
    ),
    TableSchema(
        "tf_gpu_metrics",
        ("gpu", "node", "pool", "gpu_model", "phase"),
        _floats(
            "capacity_tflops",
            "available_tflops",
            "allocated_tflops",
            "allocated_tflops_percent",
            "capacity_vram_bytes",
            "available_vram_bytes",
            "allocated_vram_bytes",
            "allocated_vram_percent",
        ),
    ),
    TableSchema(
        "tf_gpu_allocation",
        ("pod", "namespace", "pod_uuid", "node", "gpu_model_index", "gpu_name"),
        (("gpu_count", N),),
        extra_tags=True,
        skipping_index=("pod",),
    ),
    TableSchema(
        "tf_system_metrics",
        ("pool",),
        tuple(
            (name, N)
            for name in (
                "total_workers_cnt",
                "total_nodes_cnt",
                "total_allocation_success_cnt",
                "total_allocation_fail_cnt",
                "total_scale_up_cnt",
                "total_scale_down_cnt",
                "total_topo_satisfied_cnt",
                "total_topo_unsatisfied_cnt",
                "total_topo_fallback_cnt",
                "total_topo_search_degraded_cnt",
            )
        ),
    ),
    TableSchema(
        "tf_system_log",
        ("component", "container", "namespace", "pod"),
        (("message", S), ("stream", S), ("timestamp", S), ("level", S)),
        time_column="greptime_timestamp",
        skipping_index=("pod",),
        fulltext=("message",),
    ),
)

TABLE_NAMES: Final[tuple[str, ...]] = tuple(schema.name for schema in TABLES)
AGENT_SAMPLED_TABLES: Final = ("tf_gpu_usage", "tf_worker_usage")
"""The tables the node agents write, one row per GPU or worker each sampling interval."""
DEFAULT_AGENT_SAMPLE_INTERVAL_S: Final = 10.0
"""The agents' sampling interval unless `TF_METRICS_INTERVAL` sets another."""
_BY_NAME: Final[dict[str, TableSchema]] = {schema.name: schema for schema in TABLES}


def table(name: str) -> TableSchema:
    """The schema of a table by name; KeyError names the known tables."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise KeyError(f"unknown table {name!r}; known: {', '.join(TABLE_NAMES)}") from None


def greptime_create_table(schema: TableSchema, ttl: str) -> str:
    """`CREATE TABLE IF NOT EXISTS` for GreptimeDB (metrics.md §8 step 1)."""
    lines: list[str] = []
    for tag in schema.tags:
        index = "SKIPPING INDEX" if tag in schema.skipping_index else "INVERTED INDEX"
        lines.append(f"  {tag} STRING {index}")
    for name, column_type in schema.fields:
        if name in schema.fulltext:
            lines.append(
                f"  {name} STRING FULLTEXT INDEX WITH "
                "(analyzer = 'English', case_sensitive = 'false')"
            )
        else:
            lines.append(f"  {name} {column_type.greptime}")
    lines.append(f"  {schema.time_column} TIMESTAMP(9) NOT NULL TIME INDEX")
    lines.append(f"  PRIMARY KEY ({', '.join(schema.tags)})")
    body = ",\n".join(lines)
    return (
        f"CREATE TABLE IF NOT EXISTS {schema.name} (\n{body}\n) ENGINE = mito "
        f"WITH (ttl = '{ttl}', merge_mode = 'last_non_null')"
    )


def duckdb_create_table(schema: TableSchema) -> str:
    """`CREATE TABLE IF NOT EXISTS` for the embedded store.

    The time column is a DuckDB `TIMESTAMP` holding UTC at millisecond precision: window
    filters against `TIMESTAMP` literals and `now()` then prune row groups by their min/max,
    which a `TIMESTAMP_MS` column does not allow (see docs/metrics.md).
    """
    columns = [f"{tag} VARCHAR" for tag in schema.tags]
    columns += [f"{name} {column_type.duckdb}" for name, column_type in schema.fields]
    columns.append(f"{schema.time_column} TIMESTAMP NOT NULL")
    return f"CREATE TABLE IF NOT EXISTS {schema.name} ({', '.join(columns)})"


def tables_markdown() -> str:
    """The tables of `TABLES` as Markdown: per table its tags, fields and time column with their
    GreptimeDB and DuckDB types (docs/metrics.md, "Tables", is this text)."""
    out: list[str] = []
    for schema in TABLES:
        notes = []
        if schema.extra_tags:
            notes.append("plus the extra tags of `metricsExtraPodLabels`")
        if schema.skipping_index:
            notes.append(f"skipping index on {', '.join(f'`{c}`' for c in schema.skipping_index)}")
        if schema.fulltext:
            notes.append(f"full-text index on {', '.join(f'`{c}`' for c in schema.fulltext)}")
        out.append(f"### `{schema.name}`\n")
        if notes:
            out.append(f"Primary key: the tags in order; {'; '.join(notes)}.\n")
        out.append("| column | kind | GreptimeDB | DuckDB |")
        out.append("|---|---|---|---|")
        string = ColumnType.STRING
        out += [f"| `{tag}` | tag | {string.greptime} | {string.duckdb} |" for tag in schema.tags]
        out += [
            f"| `{name}` | field | {kind.greptime} | {kind.duckdb} |"
            for name, kind in schema.fields
        ]
        out.append(f"| `{schema.time_column}` | time | TIMESTAMP(9) | TIMESTAMP |")
        out.append("")
    return "\n".join(out)
