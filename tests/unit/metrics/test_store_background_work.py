"""Store background work survives the unexpected: the GreptimeDB schema pass and writer, rows
that cannot be encoded, and a DuckDB query whose caller is cancelled."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from tensorfusion.adapters.tsdb import greptime_store
from tensorfusion.adapters.tsdb.duckdb_store import (
    DuckDBMetricsStore,
    EmbeddedMetricsStore,
    ReadCursor,
)
from tensorfusion.adapters.tsdb.greptime_store import GreptimeSettings, GreptimeStore
from tensorfusion.adapters.tsdb.greptime_writer import LineProtocolWriter, WriteEndpoint
from tensorfusion.adapters.tsdb.store import QueryResult
from tensorfusion.domain.backoff import Backoff
from tensorfusion.domain.metrics.rows import MetricRow

# About 15 s on two cores when nothing interrupts it.
_LONG_QUERY = "SELECT count(*) FROM range(4000000000) t WHERE t.range % 7 = 10"


async def _eventually(check: Callable[[], bool], what: str, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


class _BrokenOnceReader:
    """Stands in for the MySQL reader: the first connect fails with an unexpected error."""

    target = "greptime:4002/public"

    def __init__(self) -> None:
        self.connects = 0
        self.statements: list[str] = []
        self.up = True
        self.last_error = ""

    async def connect(self) -> bool:
        self.connects += 1
        if self.connects == 1:
            raise RuntimeError("driver bug")
        return False

    async def query(self, sql: str, timeout_s: float) -> QueryResult:
        self.statements.append(sql)
        return QueryResult((), [])

    async def execute(self, sql: str, timeout_s: float = 30.0) -> None:
        self.statements.append(sql)

    async def close(self) -> None:
        """Nothing to close."""


async def test_the_schema_pass_survives_an_unexpected_error(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(greptime_store, "_SCHEMA_RETRY_S", 0.01)
    reader = _BrokenOnceReader()
    reader_any: Any = reader
    store = GreptimeStore(GreptimeSettings(host="h"), reader=reader_any)
    with caplog.at_level(logging.ERROR, "tensorfusion.adapters.tsdb.greptime_store"):
        await store.start()
        try:
            await _eventually(lambda: any("ttl" in s for s in reader.statements), "the TTL pass")
            assert reader.connects == 2
            detail = store.health().detail
            assert detail["schemaLoopErrors"] == 1
            assert detail["schemaLoopLastError"] == ""  # the retry went through
        finally:
            await store.close()
    assert "schema pass failed unexpectedly" in caplog.text and "driver bug" in caplog.text


async def test_a_row_that_utf8_cannot_encode_is_dropped_alone() -> None:
    writer = LineProtocolWriter(WriteEndpoint("http://127.0.0.1:9/write"))
    rows = [
        MetricRow("tf_gpu_usage", 1, {"node": "a"}, {"temperature": 1.0}),
        MetricRow("tf_gpu_usage", 2, {"node": "a\udc80"}, {"temperature": 2.0}),
        MetricRow("tf_gpu_usage", 3, {"node": "b"}, {"temperature": 3.0}),
    ]
    writer.write(rows)  # never raises
    assert [entry.line for entry in writer.buffer.peek_batch(10, 1 << 20)] == [
        "tf_gpu_usage,node=a temperature=1.0 1",
        "tf_gpu_usage,node=b temperature=3.0 3",
    ]
    dropped = writer.metrics.rows_dropped.labels("tf_gpu_usage", "unencodable")
    assert dropped._value.get() == 1


async def test_the_writer_survives_an_unexpected_error(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    writer = LineProtocolWriter(
        WriteEndpoint("http://127.0.0.1:9/write"),
        batch_age_s=0.0,
        backoff=Backoff(initial=0.01, maximum=0.05),
    )
    posts = 0

    async def post(batch: list[Any]) -> str:
        nonlocal posts
        posts += 1
        if posts == 1:
            raise RuntimeError("encoder bug")
        return "ok"

    monkeypatch.setattr(writer, "_post", post)
    with caplog.at_level(logging.ERROR, "tensorfusion.adapters.tsdb.greptime_writer"):
        await writer.start()
        try:
            writer.write([MetricRow("tf_gpu_usage", 1, {"node": "a"}, {"temperature": 1.0})])
            await _eventually(lambda: len(writer.buffer) == 0, "the batch sent on retry")
        finally:
            await writer.close(flush_timeout_s=0)
    assert posts == 2 and writer.metrics.write_errors._value.get() == 1
    assert "unexpected error" in caplog.text and "encoder bug" in caplog.text


async def test_a_cancelled_query_is_interrupted() -> None:
    """Regression: a rule removed mid-query left DuckDB running it to the end (~15 s)."""
    database = DuckDBMetricsStore(threads=2)
    store = EmbeddedMetricsStore(database)
    readers: list[ReadCursor] = []
    finished = threading.Event()
    make_reader = database.reader

    def watched_reader() -> ReadCursor:
        reader = make_reader()
        run_query = reader.query

        def query(sql: str) -> QueryResult:
            try:
                return run_query(sql)
            finally:
                finished.set()

        reader.query = query  # type: ignore[method-assign]
        readers.append(reader)
        return reader

    database.reader = watched_reader  # type: ignore[method-assign]
    caller = asyncio.create_task(store.query(_LONG_QUERY, 60.0))
    try:
        await asyncio.sleep(0.3)  # the query is running in its thread
        assert not finished.is_set()
        caller.cancel()
        with pytest.raises(asyncio.CancelledError):
            await caller
        stopped = await asyncio.to_thread(finished.wait, 3.0)
        assert stopped, "the cancelled query was not interrupted"
    finally:
        while not finished.is_set():  # never leave a 15 s query behind a failed check
            readers[0].interrupt()
            await asyncio.to_thread(finished.wait, 0.05)
        database.close()
