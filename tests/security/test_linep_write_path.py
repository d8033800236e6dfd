"""Finding 5 of issue 22: the embedded store's write path cannot be poisoned. A bad row (a
string in a numeric column, a time beyond 2^63, an unknown table, an unknown tag) is dropped
alone and counted by reason, the rest of the request lands in the real DuckDB store, and later
writes to the same table still land; the body is parsed off the event loop, 429 beyond."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from prometheus_client import CollectorRegistry

from tensorfusion.api_server import (
    METRICS_WRITE_PATH,
    TokenReviewResult,
    add_metrics_write_route,
    create_api_app,
    metrics_write,
)
from tensorfusion.api_server.metrics_write import MAX_EXTRA_TAGS_PER_TABLE, DroppedRows
from tensorfusion.api_server.offload import BoundedOffload
from tensorfusion.controller.tsdb_store import TermStore, open_term_store
from tensorfusion.domain.metrics.rows import MetricRow
from tensorfusion.domain.settings.controller_environment import TsdbEnvironment
from tests.unit.api_server.fakes import OWN_ACCOUNT, FakeBackend

Client = TestClient[web.Request, web.Application]
PARAMS = {"db": "public", "precision": "ms"}
AUTH = {"Authorization": "Bearer own-token"}
NOW_MS = int(time.time() * 1000)


def _line(uuid: str, fields: str = "temperature=60", ts_ms: int = NOW_MS) -> str:
    return f"tf_gpu_usage,node=n1,uuid={uuid} {fields} {ts_ms}"


@dataclass
class TermSink:
    """The leader's sink: rows go through the term's write buffer into DuckDB."""

    term: TermStore

    async def accept(self, rows: Sequence[MetricRow]) -> bool:
        await self.term.write(rows)
        return True


@dataclass
class Setup:
    client: Client
    term: TermStore
    registry: CollectorRegistry

    def count(self, sql: str) -> int:
        assert self.term.embedded is not None
        [(value,)] = self.term.embedded.query(sql).rows
        return int(value)

    def dropped(self, table: str, reason: str) -> float:
        value = self.registry.get_sample_value(
            "tf_metrics_write_rows_dropped_total", {"table": table, "reason": reason}
        )
        return value or 0.0


async def _setup(tmp_path: Path, offload: BoundedOffload | None = None) -> AsyncIterator[Setup]:
    term = open_term_store(TsdbEnvironment(), embedded_dir=tmp_path / "tsdb", term_id="t1")
    backend = FakeBackend()
    backend.tokens = {"own-token": TokenReviewResult(True, OWN_ACCOUNT)}
    registry = CollectorRegistry()
    app = create_api_app(backend)
    add_metrics_write_route(app, backend, TermSink(term), writers={OWN_ACCOUNT},
                            dropped=DroppedRows(registry), offload=offload)  # fmt: skip
    try:
        async with TestClient(TestServer(app)) as client:
            yield Setup(client, term, registry)
    finally:
        await term.close()


@pytest.fixture
async def setup(tmp_path: Path) -> AsyncIterator[Setup]:
    async for value in _setup(tmp_path):
        yield value


BAD_LINES = {
    "string-in-a-number": (_line("bad", 'temperature="hot"'), "tf_gpu_usage", "wrong_type"),
    "time-beyond-2^63": (_line("bad", ts_ms=2**63 + 5), "tf_gpu_usage", "timestamp_out_of_range"),
    "far-future": (
        _line("bad", ts_ms=NOW_MS + 400 * 86_400_000),
        "tf_gpu_usage",
        "timestamp_out_of_range",
    ),
    "unknown-table": (f"tf_evil,node=n1 temperature=1 {NOW_MS}", "", "unknown_table"),
    "unknown-tag": (
        f"tf_gpu_usage,node=n1,evil=x temperature=1 {NOW_MS}",
        "tf_gpu_usage",
        "unknown_column",
    ),
    "unknown-field": (_line("bad", "evil=1"), "tf_gpu_usage", "unknown_column"),
    "malformed": ("tf_gpu_usage,node=n1 1700000000000", "", "malformed"),
}


@pytest.mark.parametrize(("bad", "table", "reason"), BAD_LINES.values(), ids=BAD_LINES.keys())
async def test_a_bad_row_is_dropped_alone_and_later_writes_still_land(
    setup: Setup, bad: str, table: str, reason: str, caplog: pytest.LogCaptureFixture
) -> None:
    body = "\n".join([_line("GPU-1"), bad, _line("GPU-2")])
    reply = await setup.client.post(METRICS_WRITE_PATH, params=PARAMS, data=body, headers=AUTH)
    assert reply.status == 400, await reply.text()
    answer = await reply.json()
    assert answer["error"]["code"] == "RowsDropped"
    assert answer["written"] == 2 and answer["dropped"] == {reason: 1}
    assert reason in answer["error"]["message"]
    assert setup.dropped(table, reason) == 1
    assert f"dropped 1 rows ({reason}: 1)" in caplog.text
    assert setup.count("SELECT count(*) FROM tf_gpu_usage") == 2
    # Nothing was created for the bad row: no table, no column.
    assert setup.count("SELECT count(*) FROM information_schema.tables WHERE table_name = "
                       "'tf_evil'") == 0  # fmt: skip
    assert setup.count("SELECT count(*) FROM information_schema.columns WHERE column_name "
                       "IN ('evil')") == 0  # fmt: skip
    # The table is not poisoned: the next write lands whole.
    later = "\n".join([_line("GPU-3"), _line("GPU-4", ts_ms=NOW_MS + 1)])
    reply = await setup.client.post(METRICS_WRITE_PATH, params=PARAMS, data=later, headers=AUTH)
    assert reply.status == 204, await reply.text()
    assert setup.count("SELECT count(*) FROM tf_gpu_usage") == 4
    assert len(setup.term.buffer or ()) == 0


async def test_extra_tags_are_bounded_per_table(setup: Setup) -> None:
    lines = [
        f"tf_worker_usage,worker=w,extra_{n}=v memory_bytes=1i {NOW_MS + n}"
        for n in range(MAX_EXTRA_TAGS_PER_TABLE + 1)
    ]
    reply = await setup.client.post(
        METRICS_WRITE_PATH, params=PARAMS, data="\n".join(lines), headers=AUTH
    )
    assert reply.status == 400
    assert (await reply.json())["dropped"] == {"unknown_column": 1}
    assert setup.count("SELECT count(*) FROM tf_worker_usage") == MAX_EXTRA_TAGS_PER_TABLE
    # A tag name admitted before is still taken.
    again = f"tf_worker_usage,worker=w,extra_0=v memory_bytes=2i {NOW_MS + 100}"
    reply = await setup.client.post(METRICS_WRITE_PATH, params=PARAMS, data=again, headers=AUTH)
    assert reply.status == 204


async def test_the_body_is_parsed_off_the_event_loop(
    setup: Setup, monkeypatch: pytest.MonkeyPatch
) -> None:
    threads: list[str] = []
    parse = metrics_write.take_in_body  # type: ignore[attr-defined]

    def recording(*args: object, **kwargs: object) -> object:
        threads.append(threading.current_thread().name)
        return parse(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(metrics_write, "take_in_body", recording)
    reply = await setup.client.post(METRICS_WRITE_PATH, params=PARAMS, data=_line("GPU-1"),
                                    headers=AUTH)  # fmt: skip
    assert reply.status == 204
    assert len(threads) == 1 and threads[0].startswith("offload-metrics-write")
    assert threads[0] != threading.main_thread().name


async def test_a_write_beyond_the_parsing_bound_is_429(tmp_path: Path) -> None:
    offload = BoundedOffload(name="metrics-write", limit=1)
    release = threading.Event()
    async for setup in _setup(tmp_path, offload):
        busy = asyncio.ensure_future(offload.run(lambda: release.wait(30)))
        try:
            reply = await setup.client.post(METRICS_WRITE_PATH, params=PARAMS,
                                            data=_line("GPU-1"), headers=AUTH)  # fmt: skip
            assert reply.status == 429
            assert reply.headers["Retry-After"] == "1"
            assert setup.count("SELECT count(*) FROM tf_gpu_usage") == 0
        finally:
            release.set()
            await busy
        reply = await setup.client.post(METRICS_WRITE_PATH, params=PARAMS, data=_line("GPU-1"),
                                        headers=AUTH)  # fmt: skip
        assert reply.status == 204
    offload.close()
