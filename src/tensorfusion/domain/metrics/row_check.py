"""What a row written from outside must be to be stored (metrics.md §9.3).

A row names a `tf_*` table of the schema, only its tags (plus, on the tables marked "+extra",
extra tags the caller admits), only its fields with their types, and a time inside the window.
A row that is not is dropped alone with one of the `DropReason`s; the rest of a batch is kept.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Final

from tensorfusion.domain.metrics.rows import FieldValue, MetricRow
from tensorfusion.domain.metrics.schema import TABLES, ColumnType, TableSchema

__all__ = [
    "MAX_FUTURE_MS",
    "MAX_TAG_VALUE_CHARS",
    "MIN_TS_MS",
    "NS_RANGE_MS",
    "DropReason",
    "RowProblem",
    "check_row",
]

MIN_TS_MS: Final = 946_684_800_000
"""2000-01-01T00:00:00Z: an earlier time is a unit mistake, not a measurement."""
MAX_FUTURE_MS: Final = 86_400_000
"""A day ahead of the receiver's clock: clock skew, never a row that sorts after all others."""
NS_RANGE_MS: Final = (-(2**63) // 1_000_000 + 1, (2**63 - 1) // 1_000_000)
"""Times a store holds in int64 nanoseconds (GreptimeDB's `TIMESTAMP(9)`): 1677 to 2262."""
MAX_TAG_VALUE_CHARS: Final = 1024
_INT64_MIN: Final = -(2**63)
_INT64_MAX: Final = 2**63 - 1
_TAG_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")
_PYTHON_TYPE: Final = {ColumnType.FLOAT: float, ColumnType.INT: int, ColumnType.BOOL: bool,
                       ColumnType.STRING: str}  # fmt: skip


@dataclass(frozen=True, slots=True)
class _Columns:
    schema: TableSchema
    tags: frozenset[str]
    fields: dict[str, ColumnType]
    exact: dict[str, type]
    """Field name to the Python type stored as it is."""


_TABLES: Final = {
    schema.name: _Columns(
        schema,
        frozenset(schema.tags),
        schema.field_types,
        {name: _PYTHON_TYPE[kind] for name, kind in schema.fields},
    )
    for schema in TABLES
}


class DropReason(StrEnum):
    """Why a row was not stored (the `reason` label of `tf_metrics_rows_dropped`)."""

    MALFORMED = "malformed"
    UNKNOWN_TABLE = "unknown_table"
    UNKNOWN_COLUMN = "unknown_column"
    WRONG_TYPE = "wrong_type"
    TIMESTAMP_OUT_OF_RANGE = "timestamp_out_of_range"
    TAG_TOO_LONG = "tag_too_long"
    REJECTED = "rejected"
    """The store refused the row itself (a data error the checks above did not foresee)."""


@dataclass(frozen=True, slots=True)
class RowProblem:
    """Why one row is dropped: the reason (a counter label) and a message naming the value."""

    reason: DropReason
    message: str


ExtraTagCheck = Callable[[str, str], bool]
"""(table, tag name) -> whether an extra tag of that name is admitted on that table."""


def _any_name(_table: str, name: str) -> bool:
    return _TAG_NAME.fullmatch(name) is not None


def _field_value(
    schema: TableSchema, name: str, value: FieldValue
) -> tuple[FieldValue | None, RowProblem | None]:
    """The value as its column stores it, or the problem."""
    column_type = _TABLES[schema.name].fields.get(name)
    if column_type is None:
        return None, RowProblem(
            DropReason.UNKNOWN_COLUMN, f"{schema.name} has no field {name[:100]!r}"
        )
    if column_type is ColumnType.BOOL and isinstance(value, bool):
        return value, None
    if column_type is ColumnType.STRING and isinstance(value, str):
        return value, None
    if column_type is ColumnType.FLOAT and isinstance(value, float):
        return value, None  # NaN and infinities are left out when the row is encoded
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, int) and not isinstance(value, bool) and _INT64_MIN <= value <= _INT64_MAX:
        if column_type is ColumnType.FLOAT:
            return float(value), None
        if column_type is ColumnType.INT:
            return value, None
    shown = repr(value)[:100]
    return None, RowProblem(
        DropReason.WRONG_TYPE,
        f"{schema.name}.{name}: {shown} is not a {column_type.name.lower()}"
        + (" in the 64-bit range" if isinstance(value, int | float) else ""),
    )


def _tags_problem(
    columns: _Columns, tags: Mapping[str, str], extra_tag_ok: ExtraTagCheck
) -> RowProblem | None:
    schema = columns.schema
    for name, value in tags.items():
        if name not in columns.tags and not (schema.extra_tags and extra_tag_ok(schema.name, name)):
            return RowProblem(DropReason.UNKNOWN_COLUMN, f"{schema.name} has no tag {name[:100]!r}")
        if len(value) > MAX_TAG_VALUE_CHARS:
            return RowProblem(
                DropReason.TAG_TOO_LONG,
                f"{schema.name}.{name}: {len(value)} characters, over {MAX_TAG_VALUE_CHARS}",
            )
    return None


def _time_problem(row: MetricRow, now_ms: int | None) -> RowProblem | None:
    if now_ms is None:
        low, high, window = *NS_RANGE_MS, "the range of int64 nanoseconds"
    else:
        low, high, window = MIN_TS_MS, now_ms + MAX_FUTURE_MS, f"[{MIN_TS_MS}, now + 1 day]"
    if low <= row.ts_ms <= high:
        return None
    return RowProblem(
        DropReason.TIMESTAMP_OUT_OF_RANGE,
        f"{row.table}: time {row.ts_ms} ms is outside {window} (check the precision)",
    )


def check_row(
    row: MetricRow, *, now_ms: int | None, extra_tag_ok: ExtraTagCheck | None = None
) -> MetricRow | RowProblem:
    """The row as the store takes it (an int in a float column as a float, a whole float in an
    integer column as an int), or why it is dropped. The time must lie between 2000 and a day
    after `now_ms` (the receiver's clock), or with `now_ms` None (a writer on a clock of its
    own, the simulator's) in int64 nanoseconds. `extra_tag_ok` admits the extra tags of the
    "+extra" tables; by default any name of at most 63 letters, digits and underscores."""
    columns = _TABLES.get(row.table)
    if columns is None:
        return RowProblem(
            DropReason.UNKNOWN_TABLE, f"{row.table[:100]!r} is not a table of the schema"
        )
    problem = _time_problem(row, now_ms)
    if problem is not None:
        return problem
    problem = _tags_problem(columns, row.tags, extra_tag_ok or _any_name)
    if problem is not None:
        return problem
    exact = columns.exact
    fields: dict[str, FieldValue] | None = None
    for name, value in row.fields.items():
        if type(value) is exact.get(name) and not (type(value) is int and not _in_int64(value)):
            if fields is not None:
                fields[name] = value
            continue
        stored, problem = _field_value(columns.schema, name, value)
        if problem is not None:
            return problem
        assert stored is not None
        if fields is None:
            fields = dict(row.fields)
        fields[name] = stored
    if fields is None:
        return row
    return MetricRow(row.table, row.ts_ms, row.tags, fields)


def _in_int64(value: int) -> bool:
    return _INT64_MIN <= value <= _INT64_MAX
