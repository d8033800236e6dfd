"""Finding 5 of issue 22: the write buffers never keep rows that the store refuses for their
data. The embedded buffer finds the refused rows, drops them alone with a count and a log line
that says so, and goes on; an outage keeps every row and is retried with backoff. The
GreptimeDB writer drops a row that does not fit the schema before it is buffered."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from prometheus_client import CollectorRegistry

from tensorfusion.adapters.tsdb.duckdb_store import DuckDBMetricsStore
from tensorfusion.adapters.tsdb.greptime_writer import LineProtocolWriter, WriteEndpoint
from tensorfusion.adapters.tsdb.greptime_writer import WriterMetrics as Metrics
from tensorfusion.adapters.tsdb.store import StoreDataError, StoreUnavailableError
from tensorfusion.adapters.tsdb.write_buffer import insert_isolating
from tensorfusion.controller.tsdb_store import EmbeddedWriteBuffer
from tensorfusion.domain.backoff import Backoff
from tensorfusion.domain.metrics.rows import MetricRow

NOW_MS = 1_700_000_000_000


def _row(ts_ms: int = NOW_MS, **fields: object) -> MetricRow:
    return MetricRow("tf_gpu_usage", ts_ms, {"node": "n", "uuid": f"u{ts_ms}"},
                     fields or {"temperature": 1.0})  # type: ignore[arg-type]  # fmt: skip


def test_isolation_rejects_only_the_rows_refused_alone() -> None:
    calls: list[list[int]] = []

    def insert(chunk: list[int]) -> None:
        calls.append(chunk)
        if any(item % 40 == 7 for item in chunk):
            raise StoreDataError(f"bad value in {len(chunk)} rows")

    outcome = insert_isolating(insert, list(range(100)))
    assert [item for item, _ in outcome.rejected] == [7, 47, 87]
    assert outcome.inserted == 97 and outcome.pending == [] and outcome.error is None
    assert len(calls) < 40  # halves, not one insert per row


def test_an_outage_during_isolation_keeps_every_row_not_inserted() -> None:
    def insert(chunk: list[int]) -> None:
        if 3 in chunk:
            raise StoreDataError("bad value")
        if 6 in chunk:
            raise StoreUnavailableError("disk gone")

    outcome = insert_isolating(insert, list(range(8)))
    assert [item for item, _ in outcome.rejected] == [3]
    assert outcome.inserted == 3  # 0, 1, 2; then 4, 5 went with the failing half
    assert outcome.pending == [4, 5, 6, 7]
    assert isinstance(outcome.error, StoreUnavailableError)


@pytest.fixture
def database(tmp_path: Path) -> Iterator[DuckDBMetricsStore]:
    store = DuckDBMetricsStore(tmp_path / "m.duckdb")
    yield store
    store.close()


def _count(database: DuckDBMetricsStore) -> int:
    [(value,)] = database.query("SELECT count(*) FROM tf_gpu_usage").rows
    return int(value)


async def test_the_embedded_buffer_drops_poisoned_rows_alone_and_goes_on(
    database: DuckDBMetricsStore, caplog: pytest.LogCaptureFixture
) -> None:
    registry = CollectorRegistry()
    buffer = EmbeddedWriteBuffer(database, metrics=Metrics(registry))
    poisoned = [
        _row(NOW_MS + 1, temperature="hot"),  # a string in a numeric column
        _row(2**63 + 5),  # beyond int64
        _row(NOW_MS + 2, memory_bytes=2**64),  # an integer beyond int64
    ]
    assert await buffer.write([_row(NOW_MS), *poisoned, _row(NOW_MS + 3)])
    assert len(buffer) == 0 and buffer.up
    assert _count(database) == 2
    rejected = registry.get_sample_value(
        "tf_metrics_rows_dropped_total", {"table": "tf_gpu_usage", "reason": "rejected"}
    )
    assert rejected == 3
    assert "dropped 3 rows of tf_gpu_usage" in caplog.text
    assert "kept" not in caplog.text
    # The table takes later rows.
    assert await buffer.write([_row(NOW_MS + 4)])
    assert _count(database) == 3


def _make_wal_a_directory(database: DuckDBMetricsStore, wal: Path) -> None:
    database.execute("CHECKPOINT")
    wal.mkdir()


async def test_an_outage_keeps_the_rows_and_retries_them(
    database: DuckDBMetricsStore, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    registry = CollectorRegistry()
    buffer = EmbeddedWriteBuffer(database, metrics=Metrics(registry),
                                 backoff=Backoff(initial=1e-9, maximum=1e-9))  # fmt: skip
    wal = tmp_path / "m.duckdb.wal"
    _make_wal_a_directory(database, wal)
    assert not await buffer.write([_row(NOW_MS), _row(NOW_MS + 1)])
    assert len(buffer) == 2 and not buffer.up
    assert "2 rows kept and retried with backoff" in caplog.text
    assert "dropped" not in caplog.text
    labels = {"table": "tf_gpu_usage", "reason": "rejected"}
    assert registry.get_sample_value("tf_metrics_rows_dropped_total", labels) is None
    wal.rmdir()
    assert await buffer.write([_row(NOW_MS + 2)])
    assert _count(database) == 3 and len(buffer) == 0


async def test_during_the_backoff_rows_only_queue(
    database: DuckDBMetricsStore, tmp_path: Path
) -> None:
    registry = CollectorRegistry()
    buffer = EmbeddedWriteBuffer(database, metrics=Metrics(registry),
                                 backoff=Backoff(initial=3600.0, maximum=3600.0))  # fmt: skip
    wal = tmp_path / "m.duckdb.wal"
    _make_wal_a_directory(database, wal)
    assert not await buffer.write([_row(NOW_MS)])
    wal.rmdir()
    assert not await buffer.write([_row(NOW_MS + 1)])  # not tried: the backoff runs
    assert registry.get_sample_value("tf_metrics_write_errors_total") == 1
    assert len(buffer) == 2 and _count(database) == 0


def test_the_writer_drops_a_row_that_does_not_fit_before_buffering() -> None:
    metrics = Metrics(CollectorRegistry())
    writer = LineProtocolWriter(WriteEndpoint("http://127.0.0.1:9/"), metrics=metrics)
    writer.write([
        _row(NOW_MS),
        _row(NOW_MS + 1, temperature="hot"),
        _row(2**63 + 5),
        MetricRow("tf_evil", NOW_MS, {}, {"x": 1.0}),
    ])  # fmt: skip
    assert len(writer.buffer) == 1
    dropped = metrics.rows_dropped
    assert dropped.labels("tf_gpu_usage", "wrong_type")._value.get() == 1
    assert dropped.labels("tf_gpu_usage", "timestamp_out_of_range")._value.get() == 1
    assert dropped.labels("", "unknown_table")._value.get() == 1


async def test_the_writer_counts_a_partial_write_truthfully(
    caplog: pytest.LogCaptureFixture,
) -> None:
    answer = {"error": {"code": "RowsDropped", "message": "1 rows dropped (wrong_type: 1)"},
              "written": 2, "dropped": {"wrong_type": 1}}  # fmt: skip

    async def handler(_: web.Request) -> web.Response:
        return web.json_response(answer, status=400)

    app = web.Application()
    app.router.add_post("/write", handler)
    async with TestServer(app) as server:
        metrics = Metrics(CollectorRegistry())
        writer = LineProtocolWriter(WriteEndpoint(str(server.make_url("/write"))),
                                    metrics=metrics)  # fmt: skip
        await writer.start()
        try:
            writer.write([_row(NOW_MS + n) for n in range(3)])
            assert await writer.flush(10.0)
        finally:
            await writer.close()
    assert metrics.rows_written._value.get() == 2
    assert metrics.rows_dropped.labels("", "wrong_type")._value.get() == 1
    assert metrics.rows_dropped.labels("tf_gpu_usage", "rejected")._value.get() == 0
    assert "wrote 2 rows of a batch of 3 and dropped 1" in caplog.text
