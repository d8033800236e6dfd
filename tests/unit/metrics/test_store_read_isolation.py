"""Read queries of the stores: one SELECT, read-only, interrupted alone; quoted names."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import pytest

from tensorfusion.adapters.tsdb.duckdb_store import DuckDBMetricsStore, EmbeddedMetricsStore
from tensorfusion.adapters.tsdb.greptime_store import GreptimeSettings, GreptimeStore, sql_string
from tensorfusion.adapters.tsdb.store import (
    QueryResult,
    StoreError,
    StoreQueryError,
    StoreUnavailableError,
)
from tensorfusion.controller.tsdb_store import open_term_store
from tensorfusion.domain.metrics.rows import MetricRow
from tensorfusion.domain.settings.controller_environment import TsdbEnvironment

# Long enough (seconds) that it is always interrupted by the timeouts below.
_LONG_QUERY = "SELECT count(*) FROM range(4000000000) t WHERE t.range % 7 = 10"
_BATCH = 2000


def _rows(batch: int) -> list[MetricRow]:
    return [
        MetricRow(
            "tf_gpu_usage",
            batch * _BATCH + offset,
            {"node": "n", "pool": "p", "uuid": f"gpu-{offset % 8}"},
            {"temperature": 50.0, "memory_percentage": 10.0},
        )
        for offset in range(_BATCH)
    ]


def _dropped(database: DuckDBMetricsStore) -> float:
    """All rows counted as dropped, over every table and reason."""
    return sum(
        sample.value
        for metric in database.rows_dropped.collect()
        for sample in metric.samples
        if sample.name.endswith("_total")
    )


def _count(database: DuckDBMetricsStore) -> int:
    return int(database.query("SELECT count(*) FROM tf_gpu_usage").rows[0][0])


@pytest.mark.parametrize(
    ("query", "kinds"),
    [
        ("SELECT 1; DELETE FROM tf_gpu_usage", "got 2 (SELECT, DELETE)"),
        ("DELETE FROM tf_gpu_usage", "got 1 (DELETE)"),
        ("WITH a AS (SELECT 1) INSERT INTO tf_gpu_usage (ts) SELECT now()", "got 1 (INSERT)"),
        ("COPY tf_gpu_usage TO '/dev/null'", "got 1 (COPY)"),
    ],
)
def test_embedded_read_queries_cannot_write(query: str, kinds: str) -> None:
    database = DuckDBMetricsStore()
    try:
        database.insert_rows(_rows(0))
        wanted = re.escape(f"exactly one SELECT statement; {kinds}")
        with pytest.raises(StoreQueryError, match=wanted):
            database.query(query)
        assert _count(database) == _BATCH
    finally:
        database.close()


def test_embedded_reads_run_in_a_read_only_transaction() -> None:
    database = DuckDBMetricsStore()
    try:
        database.execute("CREATE SEQUENCE counter")
        with pytest.raises(StoreQueryError, match="read-only"):
            database.query("SELECT nextval('counter')")  # a SELECT that would write
        assert database.query("SELECT 1 AS one; ").rows == [(1,)]
        # Each read cursor is a new DuckDB session: it sets the time zone itself.
        assert database.query("SELECT current_setting('TimeZone')").rows == [("UTC",)]
    finally:
        database.close()


async def test_a_timed_out_query_never_costs_concurrent_inserts() -> None:
    database = DuckDBMetricsStore(threads=2)
    store = EmbeddedMetricsStore(database)
    batches = 25
    timeouts = 0

    async def insert() -> None:
        for batch in range(batches):
            await store.write(_rows(batch))

    async def query_until(writer: asyncio.Task[None]) -> None:
        nonlocal timeouts
        delays = (0.2, 0.001, 0.01)
        while not writer.done():
            try:
                await store.query(_LONG_QUERY, delays[timeouts % len(delays)])
            except StoreUnavailableError:
                timeouts += 1

    try:
        writer = asyncio.create_task(insert())
        await asyncio.gather(writer, query_until(writer))
        assert timeouts >= 1
        assert _count(database) == batches * _BATCH
        assert store.health().write_up
        assert _dropped(database) == 0
    finally:
        database.close()


def test_a_failed_insert_is_counted_as_dropped() -> None:
    database = DuckDBMetricsStore()
    try:
        database.insert_rows([MetricRow("tf_gpu_usage", 1, {"node": "n"}, {"temperature": 1.0})])
        wrong_type = MetricRow("tf_gpu_usage", 2, {"node": "n"}, {"temperature": "hot"})
        other = MetricRow("tf_node_metrics", 2, {"node": "n"}, {"total_tflops": 1.0})
        with pytest.raises(
            StoreQueryError, match=r"(?s)insert into tf_gpu_usage failed.*\(1 rows dropped\)"
        ):
            database.insert_rows([wrong_type, other])
        dropped = database.rows_dropped.labels("tf_gpu_usage", "insert_failed")
        assert dropped._value.get() == 1 == _dropped(database)
        assert database.query("SELECT count(*) FROM tf_node_metrics").rows == [(1,)]
    finally:
        database.close()


class _RecordingReader:
    """Stands in for the MySQL reader: records statements, answers nothing."""

    target = "greptime:4002/db"

    def __init__(self) -> None:
        self.statements: list[str] = []
        self.up = True
        self.last_error = ""

    async def connect(self) -> bool:
        return False

    async def query(self, sql: str, timeout_s: float) -> QueryResult:
        self.statements.append(sql)
        return QueryResult((), [])

    async def execute(self, sql: str, timeout_s: float = 30.0) -> None:
        self.statements.append(sql)

    async def close(self) -> None:
        """Nothing to close."""


def _greptime(db: str) -> tuple[GreptimeStore, _RecordingReader]:
    reader = _RecordingReader()
    reader_any: Any = reader
    return GreptimeStore(GreptimeSettings(host="h", db=db), reader=reader_any), reader


def test_sql_string_quotes_for_both_readings() -> None:
    assert sql_string("public") == "'public'"
    assert sql_string("it's\\") == "'it''s\\\\'"


async def test_the_database_name_is_quoted_in_the_schema_check() -> None:
    store, reader = _greptime("tf'; DROP TABLE x; --")
    await store.check_schema()
    assert "table_schema = 'tf''; DROP TABLE x; --'" in reader.statements[0]


async def test_greptime_rule_queries_must_be_one_select() -> None:
    store, reader = _greptime("public")
    with pytest.raises(StoreError, match="the query holds 2 statements"):
        await store.query("SELECT 1; DELETE FROM tf_gpu_usage", 5.0)
    assert reader.statements == []
    await store.query("SELECT 1", 5.0)
    assert reader.statements == ["SELECT 1"]


def test_the_reader_logs_in_as_the_given_user() -> None:
    readonly = GreptimeSettings(host="h", user="tf_reader", password="secret").reader()
    assert (readonly.user, readonly.password, readonly.tls) == ("tf_reader", "secret", False)
    default = GreptimeSettings(host="h", user="tf_reader").reader()
    assert (default.user, default.password) == ("root", "")
    cloud = GreptimeSettings(host="h", is_cloud=True, user="u", password="p").reader()
    assert (cloud.user, cloud.password, cloud.tls) == ("u", "p", True)


async def test_closing_the_term_store_waits_for_a_cancelled_query_before_closing_the_file(
    tmp_path: Any,
) -> None:
    """The database is closed only after every query thread has returned (closing it under a
    running query can deadlock inside DuckDB)."""
    term = open_term_store(TsdbEnvironment(), embedded_dir=tmp_path, term_id="t1")
    store = term.store
    assert isinstance(store, EmbeddedMetricsStore)
    assert term.embedded is not None
    closed_with_queries: list[int] = []
    close_database = term.embedded.close

    def close_and_record() -> None:
        closed_with_queries.append(store.queries_in_flight)
        close_database()

    term.embedded.close = close_and_record  # type: ignore[method-assign]
    query = asyncio.create_task(store.query(_LONG_QUERY, 60))
    deadline = asyncio.get_running_loop().time() + 10
    while not store.queries_in_flight:
        assert asyncio.get_running_loop().time() < deadline
        await asyncio.sleep(0.01)
    query.cancel()
    await term.close()
    assert closed_with_queries == [0]
    assert not list(tmp_path.glob("*.duckdb"))
    with pytest.raises(asyncio.CancelledError):
        await query
