"""One metric row: table, time, tags and typed fields; a number read back from the store."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["FieldValue", "MetricRow", "positive_number"]

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


def positive_number(value: object) -> float:
    """A number the store answered, read leniently: a value that is not a finite positive
    number (None, text, NaN, a negative) reads as 0."""
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return 0.0
    return number if math.isfinite(number) and number > 0 else 0.0
