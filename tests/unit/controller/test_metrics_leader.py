"""The leader's metrics work on a real embedded DuckDB file: a new file per term, rows of
every cycle, the store condition, an unwritable file reported and recovered without restart
(rows kept meanwhile), the buffer cap, a store that cannot be opened, and counters seeded from
a remote store before they are written."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import pytest
from lightkube import AsyncClient
from prometheus_client import CollectorRegistry

from tensorfusion.adapters.tsdb.duckdb_store import DuckDBMetricsStore
from tensorfusion.adapters.tsdb.greptime_writer import WriterMetrics
from tensorfusion.adapters.tsdb.store import (
    QueryResult,
    StoreHealth,
    StoreUnavailableError,
)
from tensorfusion.controller.allocator_state import AllocatorState
from tensorfusion.controller.metrics_leader import LeaderMetricsService, MetricsProcess
from tensorfusion.controller.metrics_recorder import COUNTER_COLUMNS
from tensorfusion.controller.tsdb_condition import StoreCondition
from tensorfusion.controller.tsdb_store import EmbeddedWriteBuffer, TermStore
from tensorfusion.domain.alerting.dynamic_config import DynamicConfig
from tensorfusion.domain.backoff import Backoff
from tensorfusion.domain.metrics.conditions import Dialect
from tensorfusion.domain.metrics.rows import MetricRow
from tensorfusion.domain.settings.controller_environment import ControllerEnvironment

from .test_allocator_state import FakeCache, gpu, state_with, worker

INTERVAL = DynamicConfig(metrics_record_interval="50ms", metrics_record_interval_ms=50)


@dataclass
class Informers:
    clusters: FakeCache = field(default_factory=FakeCache)


@dataclass
class Process:
    state: AllocatorState
    env: ControllerEnvironment = field(default_factory=ControllerEnvironment)
    informers: Informers = field(default_factory=Informers)

    @property
    def client(self) -> AsyncClient:
        return cast(AsyncClient, None)

    def fence(self) -> float:
        return 10.0


class Conditions:
    """Keeps every condition the service publishes."""

    def __init__(self) -> None:
        self.seen: list[StoreCondition] = []

    async def publish(self, condition: StoreCondition) -> int:
        self.seen.append(condition)
        return 1

    @property
    def last(self) -> StoreCondition | None:
        return self.seen[-1] if self.seen else None


async def eventually(check: Callable[[], bool], what: str, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        await asyncio.sleep(0.01)


def recovered_process() -> Process:
    state = state_with(gpus=FakeCache(gpu("a1"), gpu("a2")),
                       pods=FakeCache(worker("p1", "a1", "Running")))  # fmt: skip
    state.recover()
    return Process(state)


@dataclass
class Running:
    service: LeaderMetricsService
    conditions: Conditions
    registry: CollectorRegistry
    cycles: list[int]
    task: asyncio.Task[None] | None = None

    def start(self, process: MetricsProcess) -> None:
        self.task = asyncio.create_task(self.service.work(process))

    async def stop(self) -> None:
        assert self.task is not None
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task

    def sample(self, name: str, **labels: str) -> float:
        return self.registry.get_sample_value(name, labels) or 0.0


@pytest.fixture
async def running(tmp_path: Path) -> AsyncIterator[Callable[..., Running]]:
    made: list[Running] = []

    def make(**options: Any) -> Running:
        cycles: list[int] = []

        def clock() -> float:
            now = time.time()
            cycles.append(int(now * 1000))
            return now

        conditions = Conditions()
        registry = CollectorRegistry()
        options.setdefault("embedded_dir", tmp_path / "tsdb")
        service = LeaderMetricsService(
            dynamic_config=lambda: INTERVAL, registry=registry,
            publisher_factory=lambda process: conditions, clock=clock, **options,
        )  # fmt: skip
        run = Running(service, conditions, registry, cycles)
        made.append(run)
        return run

    yield make
    for run in made:
        if run.task is not None and not run.task.done():
            await run.stop()


def node_rows(service: LeaderMetricsService) -> list[int]:
    term = service.term
    assert term is not None and term.embedded is not None
    result = term.embedded.query("SELECT epoch_ms(ts) FROM tf_node_metrics ORDER BY ts")
    return [int(row[0]) for row in result.rows]


async def test_a_term_records_into_a_new_embedded_file_and_reports_it(
    running: Callable[..., Running], tmp_path: Path
) -> None:
    run = running()
    run.start(recovered_process())
    store = await asyncio.wait_for(run.service.wait_store(), 20)
    term = run.service.term
    assert term is not None and term.path is not None and term.path.parent == tmp_path / "tsdb"
    assert term.path.name.startswith("metrics-") and term.path.exists()
    await eventually(lambda: len(node_rows(run.service)) >= 3, "three recorded cycles")
    assert run.conditions.last is not None
    assert (run.conditions.last.status, run.conditions.last.reason) == ("True", "Embedded")
    assert str(term.path) in run.conditions.last.message
    workers = await store.query("SELECT worker, ready FROM tf_worker_resources LIMIT 1", 5)
    assert workers.rows[0][0] == "p1"
    assert run.service.seeded  # a new file: the counters start at 0 at once
    assert run.sample("tf_metrics_recorder_store_up", direction="write") == 1
    assert run.sample("tf_metrics_rows_written_total") > 0  # the term's series are exposed
    first_path = term.path
    await run.stop()
    assert run.service.term is None and not first_path.exists()
    assert run.sample("tf_metrics_rows_written_total") == 0  # the ended term's series are gone
    waiting = asyncio.ensure_future(run.service.wait_store())
    await asyncio.sleep(0)
    assert not waiting.done()
    run.start(recovered_process())  # a new term: a new, empty file
    await asyncio.wait_for(waiting, 20)
    second = run.service.term
    assert second is not None and second.path is not None and second.path != first_path


def _make_wal_a_directory(database: DuckDBMetricsStore, wal: Path) -> None:
    """Checkpoint (DuckDB then removes its WAL), then put a directory where the WAL goes:
    the next commit cannot open its WAL and fails, as on an unwritable disk."""
    while True:
        database.execute("CHECKPOINT")
        try:
            wal.mkdir()
            return
        except FileExistsError:  # a cycle wrote meanwhile: checkpoint again
            continue


async def test_an_unwritable_file_is_reported_and_recovers_without_losing_rows(
    running: Callable[..., Running],
) -> None:
    run = running()
    run.start(recovered_process())
    await asyncio.wait_for(run.service.wait_store(), 20)
    term = run.service.term
    assert term is not None and term.embedded is not None and term.path is not None
    await eventually(lambda: run.conditions.last is not None and run.conditions.last.ready,
                     "the store ready")  # fmt: skip
    wal = term.path.with_name(term.path.name + ".wal")
    _make_wal_a_directory(term.embedded, wal)
    outage_starts = len(run.cycles)
    await eventually(
        lambda: run.conditions.last is not None and run.conditions.last.reason == "WriteFailed",
        "the write failure in the condition",
    )
    assert run.conditions.last is not None and run.conditions.last.status == "False"
    assert ".wal" in run.conditions.last.message
    await eventually(lambda: term.buffered_rows() > 0 and len(run.cycles) > outage_starts + 2,
                     "rows kept in the buffer")  # fmt: skip
    assert run.sample("tf_metrics_recorder_store_up", direction="write") == 0
    outage_ends = len(run.cycles)
    wal.rmdir()
    await eventually(
        lambda: run.conditions.last is not None and run.conditions.last.ready,
        "the condition True again without a restart",
    )
    await eventually(lambda: term.buffered_rows() == 0, "the buffer written")
    stored = set(node_rows(run.service))
    during = run.cycles[outage_starts:outage_ends]
    assert during and all(ts in stored for ts in during), "rows of the outage were lost"
    assert run.sample("tf_metrics_rows_dropped_total", table="tf_node_metrics",
                      reason="buffer_full") == 0  # fmt: skip


def row(ts_ms: int, table: str = "tf_node_metrics") -> MetricRow:
    return MetricRow(table, ts_ms, {"node": "n", "pool": "p"}, {"gpu_count": 1})


async def test_the_buffer_drops_the_oldest_rows_beyond_its_cap_and_counts_them(
    tmp_path: Path,
) -> None:
    registry = CollectorRegistry()
    database = DuckDBMetricsStore(tmp_path / "cap.duckdb")
    try:
        buffer = EmbeddedWriteBuffer(database, max_rows=5, metrics=WriterMetrics(registry),
                                     backoff=Backoff(initial=1e-9, maximum=1e-9))  # fmt: skip
        wal = tmp_path / "cap.duckdb.wal"
        _make_wal_a_directory(database, wal)
        assert not await buffer.write([row(1, "tf_pool_metrics"), row(2), row(3)])
        assert not await buffer.write([row(4), row(5), row(6), row(7)])
        assert len(buffer) == 5 and not buffer.up and "cap.duckdb.wal" in buffer.last_error
        # The oldest rows went first, whatever their table.
        assert buffer.dropped == {"tf_pool_metrics": 1, "tf_node_metrics": 1}
        dropped = registry.get_sample_value(
            "tf_metrics_rows_dropped_total", {"table": "tf_node_metrics", "reason": "buffer_full"}
        )
        assert dropped == 1
        wal.rmdir()
        assert await buffer.write([])
        kept = database.query("SELECT epoch_ms(ts) FROM tf_node_metrics ORDER BY ts").rows
        assert [int(r[0]) for r in kept] == [3, 4, 5, 6, 7]
        assert database.query("SELECT count(*) FROM tf_pool_metrics").rows[0][0] == 0
        assert buffer.up and len(buffer) == 0
    finally:
        database.close()


async def test_a_store_that_cannot_be_opened_is_reported_and_retried(
    running: Callable[..., Running], tmp_path: Path
) -> None:
    blocked = tmp_path / "not-a-directory"
    blocked.write_text("a file where the store's directory should be")
    run = running(embedded_dir=blocked, open_retry_max_s=0.2)
    run.start(recovered_process())
    await eventually(lambda: run.conditions.last is not None, "a condition")
    assert run.conditions.last is not None
    assert (run.conditions.last.status, run.conditions.last.reason) == ("False", "Unreachable")
    assert "cannot be opened" in run.conditions.last.message
    os.unlink(blocked)
    await asyncio.wait_for(run.service.wait_store(), 20)
    await eventually(lambda: run.conditions.last is not None and run.conditions.last.ready,
                     "the store ready after the retry")  # fmt: skip


class RemoteStore:
    """A GreptimeDB-like store: the seed query fails until told, rows are kept."""

    kind = "greptimedb"
    dialect = Dialect.GREPTIME

    def __init__(self) -> None:
        self.rows: list[MetricRow] = []
        self.seed_ready = False
        self.schema_problems: list[str] = []

    async def start(self) -> None:
        """Nothing to start."""

    async def close(self) -> None:
        """Nothing to close."""

    async def query(self, sql: str, timeout_s: float) -> QueryResult:
        if "tf_system_metrics" in sql:
            if not self.seed_ready:
                raise StoreUnavailableError("db:4002/public: connection refused")
            return QueryResult(("pool", *COUNTER_COLUMNS), [("shared", 41, 5, 0, 0, 0, 0, 2, 3)])
        return QueryResult(("up",), [(1,)])

    async def write(self, rows: Sequence[MetricRow]) -> None:
        self.rows.extend(rows)

    async def apply_ttl(self, ttl: str) -> None:
        """Nothing to apply."""

    def health(self) -> StoreHealth:
        return StoreHealth("greptimedb", "db:4002/public",
                           detail={"schemaProblems": list(self.schema_problems)})  # fmt: skip


def system_fields(rows: list[MetricRow]) -> list[Mapping[str, Any]]:
    return [r.fields for r in rows if r.table == "tf_system_metrics"]


async def test_counters_are_seeded_from_the_store_before_they_are_written(
    running: Callable[..., Running],
) -> None:
    remote = RemoteStore()
    run = running(open_store=lambda process, ttl: TermStore(remote, "db:4002/public",
                                                            CollectorRegistry()))  # fmt: skip
    run.start(recovered_process())
    await eventually(lambda: len(system_fields(remote.rows)) >= 2, "two cycles")
    assert all("total_allocation_success_cnt" not in f for f in system_fields(remote.rows))
    assert not run.service.seeded
    assert run.conditions.last == StoreCondition("True", "Connected", "GreptimeDB db:4002/public")
    remote.seed_ready = True
    await eventually(lambda: run.service.seeded, "the counters seeded")
    await eventually(
        lambda: "total_allocation_success_cnt" in system_fields(remote.rows)[-1], "counters"
    )
    latest = system_fields(remote.rows)[-1]
    assert latest["total_allocation_success_cnt"] == 41
    assert latest["total_allocation_fail_cnt"] == 5 and latest["total_workers_cnt"] == 1
    assert (latest["total_scale_up_cnt"], latest["total_scale_down_cnt"]) == (2, 3)
    remote.schema_problems = ["tf_gpu_usage.memory_bytes: expected BIGINT, found BIGINT UNSIGNED"]
    await eventually(
        lambda: run.conditions.last is not None and run.conditions.last.reason == "SchemaMismatch",
        "the schema mismatch in the condition",
    )


class BrokenStart(RemoteStore):
    async def start(self) -> None:
        raise RuntimeError("a bug while starting")


async def test_a_store_that_fails_to_start_keeps_its_term_and_is_reported(
    running: Callable[..., Running],
) -> None:
    broken = BrokenStart()
    run = running(open_store=lambda process, ttl: TermStore(broken, "db:4002/public",
                                                            CollectorRegistry()))  # fmt: skip
    run.start(recovered_process())
    assert await asyncio.wait_for(run.service.wait_store(), 20) is broken
    await eventually(lambda: run.conditions.last is not None, "a condition")
    assert run.conditions.last is not None and not run.conditions.last.ready
    assert "did not start: RuntimeError: a bug while starting" in run.conditions.last.message
    await eventually(lambda: len(broken.rows) > 0, "cycles recording all the same")
    assert run.task is not None and not run.task.done()
