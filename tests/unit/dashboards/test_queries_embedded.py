"""Every dashboard query, expanded as Grafana expands it, on the embedded DuckDB store.

The fixture's rows go in through the embedded write path (line protocol, `ingest_lines`, as
the node agents and the controller's writer send them); each query runs through the store's
async read path (`EmbeddedMetricsStore.query`: one SELECT, read-only, on its own cursor). The
macros are written with DuckDB's `epoch_ms` where Grafana writes `FROM_UNIXTIME`
(`grafana_sql.Target.DUCKDB`); the rest of the text is what Grafana sends.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

import pytest

from dashboards.queries import QUERIES, Format
from tensorfusion.adapters.tsdb.duckdb_store import DuckDBMetricsStore, EmbeddedMetricsStore
from tensorfusion.domain.metrics.line_protocol import encode_rows

from .expected import EXPECTED, FILTERED
from .fixture import TIME_RANGE, all_rows, normalize
from .grafana_sql import Target, TimeRange, expand


@pytest.fixture(scope="module")
def database() -> Iterator[DuckDBMetricsStore]:
    store = DuckDBMetricsStore(threads=1)
    rows = all_rows()
    assert store.ingest_lines(encode_rows(rows)) == len(rows)
    yield store
    store.close()


async def run(
    database: DuckDBMetricsStore, key: str, variables: Mapping[str, Sequence[str]] | None = None
) -> tuple[tuple[str, ...], list[tuple[object, ...]]]:
    time_range = TIME_RANGE
    if variables:
        time_range = TimeRange(
            TIME_RANGE.from_s, TIME_RANGE.to_s, {**TIME_RANGE.variables, **variables}
        )
    sql = expand(QUERIES[key].sql, time_range, Target.DUCKDB)
    result = await EmbeddedMetricsStore(database).query(sql, 10.0)
    return result.columns, normalize(result.rows)


def test_every_query_has_expected_rows() -> None:
    assert set(EXPECTED) == set(QUERIES)


@pytest.mark.parametrize("key", list(QUERIES))
async def test_query_returns_the_fixture_rows(database: DuckDBMetricsStore, key: str) -> None:
    columns, rows = await run(database, key)
    assert rows == EXPECTED[key]
    if QUERIES[key].format is Format.TIME_SERIES:
        assert columns[0] == "time"


@pytest.mark.parametrize(
    ("key", "variables", "expected"), FILTERED, ids=[f"{key}-{sorted(v)}" for key, v, _ in FILTERED]
)
async def test_a_narrowed_variable_filters(
    database: DuckDBMetricsStore,
    key: str,
    variables: Mapping[str, Sequence[str]],
    expected: list[tuple[object, ...]],
) -> None:
    _, rows = await run(database, key, variables)
    assert rows == expected
