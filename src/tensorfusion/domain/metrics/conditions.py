"""Expansion of `{{ .Conditions }}`: the only dialect difference between the two stores."""

from __future__ import annotations

from enum import StrEnum

from tensorfusion.domain.timestamps import format_sql_timestamp

__all__ = ["Dialect", "simulated_conditions", "wall_conditions"]


class Dialect(StrEnum):
    """SQL dialect of a metrics store."""

    GREPTIME = "greptime"
    DUCKDB = "duckdb"


def wall_conditions(dialect: Dialect, interval_text: str, interval_ms: int) -> str:
    """The predicate restricting `ts` to the last interval on the wall clock."""
    if dialect is Dialect.GREPTIME:
        return f"ts >= now() - '{interval_text}'::INTERVAL"
    return f"ts >= (now() AT TIME ZONE 'UTC') - INTERVAL '{interval_ms} milliseconds'"


def simulated_conditions(now_ms: int, interval_ms: int) -> str:
    """Explicit bounds for a simulated clock (either store)."""
    start = format_sql_timestamp(now_ms - interval_ms)
    end = format_sql_timestamp(now_ms)
    return f"(ts >= TIMESTAMP '{start}' AND ts <= TIMESTAMP '{end}')"
