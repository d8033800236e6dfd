"""The usage histories in real rounds, on the embedded store (DuckDB): the store's buckets are the
histogram's; an outage of the read of new rows changes nothing, even with a filled history;
late rows within the overlap are counted once; a new leader fills the same history; too many
new rows fill the histories again; a workload that goes away is forgotten; a workload that
arrives mid-term is filled alone."""

from __future__ import annotations

import asyncio
import contextlib
import random
from dataclasses import replace
from typing import Any, cast

import pytest

from tensorfusion.adapters.tsdb.store import MetricsStore, QueryResult, StoreUnavailableError
from tensorfusion.controller import autoscaler as autoscaler_module
from tensorfusion.controller.autoscaler import Autoscaler
from tensorfusion.domain.autoscaling.usage_histogram import TFLOPS_SCALE, VRAM_SCALE
from tensorfusion.domain.autoscaling.usage_history import WorkloadHistory
from tensorfusion.domain.autoscaling.usage_query import PercentileSet, _bucket

from .test_autoscaler_round import AUTO, GIB, NOW, Setup, _usage_rows, _workload

KEY = ("ml", "infer")
SET = PercentileSet((0.5, 0.95, 0.99), (0.5, 0.95, 0.99))


class Flaky:
    """The store, with the reads of new rows (the query without GROUP BY) failing."""

    def __init__(self, store: MetricsStore) -> None:
        self.store = store
        self.dialect = store.dialect
        self.failing = True
        self.asked: list[str] = []

    async def query(self, sql: str, timeout_s: float) -> QueryResult:
        self.asked.append(sql)
        if self.failing and "GROUP BY" not in sql:
            raise StoreUnavailableError("connection reset")
        return await self.store.query(sql, timeout_s)


def _shift(rows: list[Any], ms: int) -> list[Any]:
    """The rows stamped `ms` later."""
    return [replace(row, ts_ms=row.ts_ms + ms) for row in rows]


def _samples(setup: Setup) -> int:
    return setup.autoscaler.histories.workloads[KEY].compute.samples


def test_the_store_buckets_values_as_the_histogram_does() -> None:
    setup = Setup()
    chance = random.Random(28)
    values = [0.0, 0.0005, 0.001, 1.0, 312.0, 989.5, 1e6]
    values += [chance.uniform(0, 2000) for _ in range(300)]
    values += [TFLOPS_SCALE.bounds(k)[0] for k in range(1, 400, 7)]  # the edges
    listed = ", ".join(f"(CAST('{v!r}' AS DOUBLE))" for v in values)
    sql = f"SELECT v, {_bucket('v', TFLOPS_SCALE.floor)} FROM (VALUES {listed}) AS t(v)"
    for value, bucket in setup.database.query(sql).rows:
        assert bucket == TFLOPS_SCALE.index(value), value
    sizes = [float(chance.randrange(0, 200 * GIB)) for _ in range(300)] + [2.0**20, 2.0**33]
    listed = ", ".join(f"(CAST('{v!r}' AS DOUBLE))" for v in sizes)
    sql = f"SELECT v, {_bucket('v', VRAM_SCALE.floor)} FROM (VALUES {listed}) AS t(v)"
    for value, bucket in setup.database.query(sql).rows:
        assert bucket == VRAM_SCALE.index(value), value


async def test_an_outage_of_the_read_of_new_rows_changes_nothing() -> None:
    setup = Setup(_workload("infer", AUTO))
    setup.database.insert_rows(_usage_rows("infer", "infer-0", 20.0, 4 * GIB))
    flaky = Flaky(setup.store)
    [outcome] = await setup.autoscaler.round(cast(MetricsStore, flaky))
    # The fill alone holds 94 samples (those before the cut): enough, but not the whole window.
    assert _samples(setup) == 94
    assert outcome.reason == "MetricsUnavailable", outcome.message
    assert setup.allocator.records["infer-0"].request.request.tflops_milli == 100_000
    flaky.failing = False
    [outcome] = await setup.autoscaler.round(cast(MetricsStore, flaky))  # due again at once
    assert outcome.reason == "Resized", outcome.message
    assert _samples(setup) == 100
    assert setup.allocator.records["infer-0"].request.request.tflops_milli == 23_000


async def test_an_outage_after_the_fill_keeps_the_history_until_a_read_succeeds() -> None:
    setup = Setup(_workload("infer", {**AUTO, "interval": "10s"}))
    setup.database.insert_rows(_usage_rows("infer", "infer-0", 20.0, 4 * GIB, count=20))
    [outcome] = await setup.autoscaler.round(setup.store)
    assert outcome.reason == "NoChange" and "20 samples" in outcome.message
    # 20 more samples of a second worker, 3 s apart up to NOW + 12 s, written during the outage.
    more = _usage_rows("infer", "infer-1", 20.0, 4 * GIB, count=20)
    setup.database.insert_rows([replace(row, ts_ms=int((NOW - 45 + 3 * k) * 1000))
                                for k, row in enumerate(more)])  # fmt: skip
    flaky = Flaky(setup.store)
    setup.autoscaler.clock = lambda: NOW + 15
    [outcome] = await setup.autoscaler.round(cast(MetricsStore, flaky))
    assert outcome.reason == "MetricsUnavailable" and _samples(setup) == 20
    flaky.failing = False
    setup.autoscaler.clock = lambda: NOW + 25
    [outcome] = await setup.autoscaler.round(cast(MetricsStore, flaky))
    assert outcome.reason == "Resized" and _samples(setup) == 40


async def test_late_rows_within_the_overlap_are_counted_once() -> None:
    setup = Setup(_workload("infer", {**AUTO, "interval": "10s"}))
    setup.database.insert_rows(_usage_rows("infer", "infer-0", 20.0, 4 * GIB))
    await setup.autoscaler.round(setup.store)
    assert _samples(setup) == 100
    # Written now: one stamped 45 s ago (within the 60 s overlap), one 5 minutes ago.
    late = _shift(_usage_rows("infer", "infer-0", 90.0, 4 * GIB, count=1), -45_000)
    too_late = _shift(_usage_rows("infer", "infer-0", 90.0, 4 * GIB, count=1), -300_000)
    setup.database.insert_rows(late + too_late)
    for step in (10, 20):
        setup.autoscaler.clock = lambda step=step: NOW + step  # type: ignore[misc]
        await setup.autoscaler.round(setup.store)
        assert _samples(setup) == 101  # the late row once; the too late one not at all
    leader = Setup(_workload("infer", {**AUTO, "interval": "10s"}))
    leader.database = setup.database
    leader.autoscaler.clock = lambda: NOW + 20
    await leader.autoscaler.round(setup.store)
    assert _samples(leader) == 102  # the next fill counts it


async def test_a_new_leader_fills_the_history_the_old_one_kept() -> None:
    setup = Setup(_workload("infer", {**AUTO, "interval": "10s"}))
    chance = random.Random(7)
    rows = []
    for i in range(400):
        sample = _usage_rows("infer", "infer-0", chance.uniform(1, 90),
                             chance.randrange(GIB, 20 * GIB), count=1)  # fmt: skip
        rows += _shift(sample, -i * 10_000)
    for i, value in enumerate((0.5, 0.505, 0.51, 95.0, 95.5, 96.0)):  # several in one bucket
        rows += _shift(_usage_rows("infer", "infer-0", value, GIB, count=1), -i * 10_000 - 5_000)
    setup.database.insert_rows(rows)
    await setup.autoscaler.round(setup.store)
    written = []
    for step in range(1, 7):  # a minute of rounds, a new sample every 10 s
        fresh = _shift(_usage_rows("infer", "infer-0", chance.uniform(1, 90), 3 * GIB, count=1),
                       step * 10_000)  # fmt: skip
        written += fresh
        setup.database.insert_rows(fresh)
        setup.autoscaler.clock = lambda step=step: NOW + step * 10  # type: ignore[misc]
        await setup.autoscaler.round(setup.store)
    kept = setup.autoscaler.histories.workloads[KEY]
    leader = Autoscaler(workloads=setup.autoscaler.workloads, pods=setup.autoscaler.pods,
                        pools=setup.autoscaler.pools, templates=setup.autoscaler.templates,
                        state=setup.autoscaler.state, store=setup.autoscaler.store,
                        writer=setup.autoscaler.writer, recorder=setup.autoscaler.recorder,
                        clock=lambda: NOW + 60)  # fmt: skip
    await leader.round(setup.store)
    filled = leader.histories.workloads[KEY]
    assert filled.compute.samples == kept.compute.samples == 412
    assert filled.usage(SET) == kept.usage(SET)
    asked = [0.0, 0.01, 0.5, 0.95, 1.0]
    for resource in ("compute", "vram"):
        ours, theirs = getattr(filled, resource), getattr(kept, resource)
        assert ours.percentiles(asked) == theirs.percentiles(asked)
    values = [row.fields["compute_tflops"] for row in rows + written]
    assert filled.compute.percentiles([0.0, 1.0]) == [min(values), max(values)]


async def test_a_new_term_forgets_the_last_one() -> None:
    setup = Setup(_workload("infer", AUTO))
    setup.database.insert_rows(_usage_rows("infer", "infer-0", 20.0, 4 * GIB))
    stale = WorkloadHistory(86_400.0, int(NOW * 1000))
    setup.autoscaler.histories.adopt({KEY: stale})
    setup.autoscaler.histories.cut_ms = int(NOW * 1000)
    task = asyncio.ensure_future(setup.autoscaler.run())
    try:
        for _ in range(1000):  # the first round, within 10 s
            if KEY in setup.autoscaler.last_round:
                break
            await asyncio.sleep(0.01)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    assert setup.autoscaler.histories.workloads[KEY] is not stale
    assert _samples(setup) == 100


async def test_too_many_new_rows_fill_the_histories_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(autoscaler_module, "MAX_RECENT_ROWS", 7)
    setup = Setup(_workload("infer", {**AUTO, "interval": "10s"}))
    setup.database.insert_rows(_usage_rows("infer", "infer-0", 20.0, 4 * GIB))
    await setup.autoscaler.round(setup.store)  # 6 rows after the cut
    later = _usage_rows("infer", "infer-0", 20.0, 4 * GIB, count=10)
    setup.database.insert_rows(_shift(later, 100_000))  # 10 more, from NOW + 10 s to + 100 s
    setup.autoscaler.clock = lambda: NOW + 100
    [outcome] = await setup.autoscaler.round(setup.store)  # 16 rows after the cut: filled again
    assert outcome.reason == "NoChange", outcome.message
    assert _samples(setup) == 110
    assert setup.autoscaler.histories.cut_ms == int((NOW + 100) * 1000) - 60_000


async def test_a_workload_that_goes_away_is_forgotten() -> None:
    setup = Setup(_workload("infer", AUTO))
    setup.database.insert_rows(_usage_rows("infer", "infer-0", 20.0, 4 * GIB))
    await setup.autoscaler.round(setup.store)
    assert KEY in setup.autoscaler.histories.workloads
    cast(Any, setup.autoscaler.workloads).items.clear()
    assert await setup.autoscaler.round(setup.store) == []
    assert setup.autoscaler.histories.workloads == {}
    assert setup.autoscaler.histories.seen == set()


async def test_a_workload_arriving_mid_term_is_filled_alone() -> None:
    setup = Setup(_workload("infer", AUTO), _workload("train", AUTO))
    cache = cast(Any, setup.autoscaler.workloads)
    train = cache.items.pop()
    setup.database.insert_rows(_usage_rows("infer", "infer-0", 20.0, 4 * GIB)
                               + _usage_rows("train", "train-0", 40.0, 8 * GIB))  # fmt: skip
    await setup.autoscaler.round(setup.store)
    cache.items.append(train)
    spy = Flaky(setup.store)
    spy.failing = False
    setup.autoscaler.clock = lambda: NOW + 10
    [outcome] = await setup.autoscaler.round(cast(MetricsStore, spy))
    assert outcome.key == ("ml", "train") and outcome.reason == "Resized"
    fills = [sql for sql in spy.asked if "GROUP BY" in sql]
    assert fills and all("workload IN ('train')" in sql for sql in fills)
    assert setup.autoscaler.histories.workloads[("ml", "train")].compute.samples == 100
    assert setup.allocator.records["train-0"].request.request.tflops_milli == 46_000


class FailingFill(Flaky):
    """The store, with the fills (the grouped queries) failing."""

    async def query(self, sql: str, timeout_s: float) -> QueryResult:
        self.asked.append(sql)
        if self.failing and "GROUP BY" in sql:
            raise StoreUnavailableError("connection reset")
        return await self.store.query(sql, timeout_s)


async def test_a_failed_fill_is_not_tried_again_before_its_backoff() -> None:
    setup = Setup(_workload("infer", AUTO))
    setup.database.insert_rows(_usage_rows("infer", "infer-0", 20.0, 4 * GIB))
    store = FailingFill(setup.store)
    [outcome] = await setup.autoscaler.round(cast(MetricsStore, store))
    assert outcome.reason == "MetricsUnavailable"
    asked = len(store.asked)
    store.failing = False
    setup.autoscaler.clock = lambda: NOW + 5  # within the first 10 s of backoff
    [outcome] = await setup.autoscaler.round(cast(MetricsStore, store))
    assert outcome.reason == "MetricsUnavailable" and "retried in" in outcome.message
    assert len(store.asked) == asked  # the store was not asked again
    setup.autoscaler.clock = lambda: NOW + 11
    [outcome] = await setup.autoscaler.round(cast(MetricsStore, store))
    assert outcome.reason == "Resized", outcome.message
