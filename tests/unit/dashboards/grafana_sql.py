"""A panel's SQL as Grafana's MySQL data source sends it, in three steps as Grafana takes them:

1. template variables (the frontend's `SqlDatasource.interpolateVariable`): a multi-value or
   All variable becomes its values, each quoted as `quoteLiteral` does (`'` doubled, wrapped in
   `'`), joined by `,`;
2. the global substitutions of `sqleng.Interpolate` (`$__unixEpochFrom()`, `$__unixEpochTo()`);
3. the MySQL macro engine (`pkg/tsdb/mysql/macros.go`): `$__timeFilter(col)` becomes
   `col BETWEEN FROM_UNIXTIME(from) AND FROM_UNIXTIME(to)` (from before 1970:
   `DATE_ADD(FROM_UNIXTIME(0), INTERVAL from SECOND)`), `$__timeFrom()` and `$__timeTo()`
   `FROM_UNIXTIME(t)`; any other macro is an error, as in Grafana.

The embedded DuckDB store has no `FROM_UNIXTIME`: for it, step 3 writes the same instants with
DuckDB's `epoch_ms(ms)` (a UTC TIMESTAMP, as the store's own insert path makes them). Every other
character of the text is the same for both stores.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Final

__all__ = [
    "GrafanaQueryError",
    "Target",
    "TimeRange",
    "expand",
    "expand_macros",
    "interpolate_variables",
]

# Grafana's macro pattern (macros.go: `\$([_a-zA-Z0-9]+)\(([^\)]*)\)`).
_MACRO: Final = re.compile(r"\$([_a-zA-Z0-9]+)\(([^\)]*)\)")
# The template service's forms `$name` and `${name}` (the `[[name]]` form is not used here).
_VARIABLE: Final = re.compile(r"\$(\w+)|\$\{(\w+)\}")


class GrafanaQueryError(ValueError):
    """A text Grafana would refuse, or a variable the test did not give."""


class Target(StrEnum):
    """Which store the macros are expanded for."""

    MYSQL = "mysql"
    """Grafana's own text (GreptimeDB, MariaDB)."""
    DUCKDB = "duckdb"
    """The embedded store: the same instants as DuckDB expressions."""


@dataclass(frozen=True, slots=True)
class TimeRange:
    """The dashboard's range in Unix seconds (Grafana's macros use whole seconds) and the
    values selected for each variable."""

    from_s: int
    to_s: int
    variables: Mapping[str, Sequence[str]] = field(default_factory=dict)


def _quote_literal(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def interpolate_variables(sql: str, variables: Mapping[str, Sequence[str]]) -> str:
    """Step 1: every `$name` / `${name}` of a multi-value variable; built-ins (`$__...`) stay."""

    def replace(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        if name.startswith("__"):
            return match.group(0)
        if name not in variables:
            raise GrafanaQueryError(f"variable ${name} has no value in this test")
        values = variables[name]
        if not values:
            raise GrafanaQueryError(f"variable ${name} has no value selected")
        return ",".join(_quote_literal(value) for value in values)

    return _VARIABLE.sub(replace, sql)


def _instant(seconds: int, target: Target) -> str:
    if target is Target.DUCKDB:
        return f"epoch_ms({seconds * 1000})"
    return f"FROM_UNIXTIME({seconds})"


def _time_filter(column: str, time_range: TimeRange, target: Target) -> str:
    start = _instant(time_range.from_s, target)
    if target is Target.MYSQL and time_range.from_s < 0:
        start = f"DATE_ADD(FROM_UNIXTIME(0), INTERVAL {time_range.from_s} SECOND)"
    return f"{column} BETWEEN {start} AND {_instant(time_range.to_s, target)}"


def expand_macros(sql: str, time_range: TimeRange, target: Target = Target.MYSQL) -> str:
    """Steps 2 and 3: the global substitutions, then the macros."""
    sql = sql.replace("$__unixEpochFrom()", str(time_range.from_s))
    sql = sql.replace("$__unixEpochTo()", str(time_range.to_s))

    def replace(match: re.Match[str]) -> str:
        name = match.group(1)
        args = [arg.strip(" ") for arg in match.group(2).split(",")]
        if name == "__timeFilter":
            if not args[0]:
                raise GrafanaQueryError(f"missing time column argument for macro {name}")
            return _time_filter(args[0], time_range, target)
        if name == "__timeFrom":
            return _instant(time_range.from_s, target)
        if name == "__timeTo":
            return _instant(time_range.to_s, target)
        raise GrafanaQueryError(f"unknown macro {name}")

    return _MACRO.sub(replace, sql)


def expand(sql: str, time_range: TimeRange, target: Target = Target.MYSQL) -> str:
    """The text the store receives; GrafanaQueryError when a `$` is left unexpanded."""
    expanded = expand_macros(interpolate_variables(sql, time_range.variables), time_range, target)
    if "$" in expanded:
        raise GrafanaQueryError(f"unexpanded text left in {expanded!r}")
    return expanded
