"""One metric row: table, time, tags and typed fields."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["FieldValue", "MetricRow"]

FieldValue = float | int | bool | str


@dataclass(frozen=True, slots=True)
class MetricRow:
    """A row of a `tf_*` table; `ts_ms` is Unix milliseconds (UTC).

    Field types follow metrics.md §1: counters and byte counts `int`, other numbers `float`,
    `bool`, `str`. Empty tag values mean "tag left out".
    """

    table: str
    ts_ms: int
    tags: Mapping[str, str]
    fields: Mapping[str, FieldValue]
