"""The expansion of `grafana_sql` against what Grafana's MySQL data source writes (its macro
engine, `pkg/tsdb/mysql/macros.go`, and the SQL data sources' variable quoting)."""

from __future__ import annotations

import pytest

from .grafana_sql import (
    GrafanaQueryError,
    Target,
    TimeRange,
    expand,
    expand_macros,
    interpolate_variables,
)

RANGE = TimeRange(1494410783, 1494410983)


def test_time_filter_as_grafana_writes_it() -> None:
    assert expand_macros("WHERE $__timeFilter(dateColumn)", RANGE) == (
        "WHERE dateColumn BETWEEN FROM_UNIXTIME(1494410783) AND FROM_UNIXTIME(1494410983)"
    )
    assert expand_macros("$__timeFrom() $__timeTo()", RANGE) == (
        "FROM_UNIXTIME(1494410783) FROM_UNIXTIME(1494410983)"
    )
    assert expand_macros("$__unixEpochFrom() $__unixEpochTo()", RANGE) == "1494410783 1494410983"


def test_a_range_before_1970_starts_with_date_add() -> None:
    assert expand_macros("$__timeFilter(ts)", TimeRange(-10, 5)) == (
        "ts BETWEEN DATE_ADD(FROM_UNIXTIME(0), INTERVAL -10 SECOND) AND FROM_UNIXTIME(5)"
    )


def test_the_duckdb_target_writes_the_same_instants_with_epoch_ms() -> None:
    assert expand_macros("$__timeFilter( p.ts )", RANGE, Target.DUCKDB) == (
        "p.ts BETWEEN epoch_ms(1494410783000) AND epoch_ms(1494410983000)"
    )


def test_unknown_macros_and_missing_columns_are_errors() -> None:
    with pytest.raises(GrafanaQueryError, match="unknown macro __timeGroup"):
        expand_macros("$__timeGroup(ts, '1m')", RANGE)
    with pytest.raises(GrafanaQueryError, match="missing time column"):
        expand_macros("$__timeFilter()", RANGE)


def test_multi_value_variables_are_quoted_as_grafana_quotes_them() -> None:
    sql = "pool IN ($pool) AND node IN (${node}) AND $__timeFilter(ts)"
    assert interpolate_variables(sql, {"pool": ["a", "o'b"], "node": ["n1"]}) == (
        "pool IN ('a','o''b') AND node IN ('n1') AND $__timeFilter(ts)"
    )


def test_a_variable_without_a_value_or_text_left_unexpanded_fails() -> None:
    with pytest.raises(GrafanaQueryError, match=r"\$pool has no value"):
        expand("pool IN ($pool)", RANGE)
    with pytest.raises(GrafanaQueryError, match="no value selected"):
        expand("pool IN ($pool)", TimeRange(0, 1, {"pool": []}))
    with pytest.raises(GrafanaQueryError, match="unexpanded"):
        expand("x = $__interval", RANGE)
