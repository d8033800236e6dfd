"""The controller's own Prometheus figures, read from its parts at each scrape.

Reconciles and errors per loop, queue depths, API writes, conflicts (retries) and fenced writes
per writer, informer list/watch counters, the leader flag and failed Lease attempts, the
allocator's size and readiness, and the event loop's lag (`LoopLagProbe`). Nothing is counted
twice: the collector only reads the counters the parts keep.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from tensorfusion.controller.allocator_state import AllocatorState
from tensorfusion.controller.fenced_writes import FencedWriter
from tensorfusion.controller.reconcile_loop import ReconcileLoop
from tensorfusion.runtime.informer import Informer

__all__ = ["LAG_BUCKETS", "SHED_LAG_S", "SHED_OVER_S", "ControllerCollector", "LoopLagProbe"]

LAG_BUCKETS: Final = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
"""Upper bounds (seconds) of the loop-lag histogram; 10 s is the Lease's renew deadline."""
SHED_LAG_S: Final = 0.5
SHED_OVER_S: Final = 2.0
"""CPU-heavy request work is refused (429) while the loop was more than `SHED_LAG_S` late in
the last `SHED_OVER_S` seconds: with the GIL, a busy worker thread takes CPU from the loop."""


@dataclass(slots=True, eq=False)
class LoopLagProbe:
    """How late the event loop wakes a task that sleeps `interval` seconds: the time every
    other coroutine (the Lease renewal among them) waits for the loop."""

    interval: float = 0.1
    window: float = 10.0
    """Seconds the highest lag is taken over (the Lease's renew deadline)."""
    buckets: list[int] = field(default_factory=lambda: [0] * (len(LAG_BUCKETS) + 1))
    total: float = 0.0
    last: float = 0.0
    _recent: deque[tuple[float, float]] = field(default_factory=deque)

    def record(self, at: float, lag: float) -> None:
        """One wake-up `lag` seconds late, at loop time `at`."""
        self.last = lag
        self.total += lag
        self.buckets[next((i for i, b in enumerate(LAG_BUCKETS) if lag <= b), -1)] += 1
        recent = self._recent
        # Kept in decreasing lag order: the first entry is the highest of the window.
        while recent and recent[-1][1] <= lag:
            recent.pop()
        recent.append((at, lag))

    def highest(self, now: float, over: float | None = None) -> float:
        """The highest lag of the last `over` seconds (at most `window`; default `window`)."""
        while self._recent and self._recent[0][0] < now - self.window:
            self._recent.popleft()
        since = now - (self.window if over is None else min(over, self.window))
        # Decreasing lags in time order: the first entry inside the span is its highest.
        return next((lag for at, lag in self._recent if at >= since), 0.0)

    def shedder(self, clock: Callable[[], float]) -> Callable[[], str | None]:
        """`behind` with the shedding bounds (`SHED_LAG_S` over `SHED_OVER_S`), for
        `BoundedOffload(shed=...)`; `clock`: the loop's."""
        return lambda: self.behind(clock(), limit=SHED_LAG_S, over=SHED_OVER_S)

    def behind(self, now: float, *, limit: float, over: float) -> str | None:
        """Why CPU work should wait: the loop was more than `limit` seconds late in the last
        `over` seconds; None when it kept up."""
        lag = self.highest(now, over)
        if lag > limit:
            return f"the event loop is {lag:.1f} s behind (limit {limit:g} s)"
        return None

    async def run(self) -> None:
        """Sleep `interval`, record how late the wake-up came, for ever."""
        loop = asyncio.get_running_loop()
        while True:
            due = loop.time() + self.interval
            await asyncio.sleep(self.interval)
            now = loop.time()
            self.record(now, max(0.0, now - due))

    def metrics(self, now: float) -> Iterable[Metric]:
        """The lag histogram and the window's highest lag."""
        histogram = HistogramMetricFamily(
            "tf_controller_event_loop_lag_seconds",
            "how late the event loop woke a task that sleeps 0.1 s",
        )
        counts, running = [], 0
        for bound, count in zip((*LAG_BUCKETS, float("inf")), self.buckets, strict=True):
            running += count
            counts.append((str(bound) if bound != float("inf") else "+Inf", float(running)))
        histogram.add_metric([], counts, self.total)
        yield histogram
        highest = GaugeMetricFamily(
            "tf_controller_event_loop_lag_max_seconds",
            f"the highest event loop lag of the last {self.window:g} s",
        )
        highest.add_metric([], self.highest(now))
        yield highest


@dataclass(slots=True, eq=False)
class ControllerCollector(Collector):
    """A `prometheus_client` collector over the controller's parts (register it once)."""

    state: AllocatorState
    loops: Sequence[ReconcileLoop[Any]]
    writers: Sequence[tuple[str, FencedWriter]]
    informers: Sequence[Informer]
    is_leader: Callable[[], bool]
    lease_failures: Callable[[], int]
    loop_lag: LoopLagProbe | None = None
    clock: Callable[[], float] | None = None
    """The loop's clock for the lag window (`loop.time`); None: no lag figures."""

    def collect(self) -> Iterable[Metric]:
        """The figures of this moment."""
        yield from self._loops()
        yield from self._writers()
        yield from self._informers()
        leader = GaugeMetricFamily("tf_controller_leader", "1 while this replica leads")
        leader.add_metric([], 1.0 if self.is_leader() else 0.0)
        yield leader
        lease = CounterMetricFamily(
            "tf_controller_lease_failures", "failed attempts to take or renew the Lease"
        )
        lease.add_metric([], float(self.lease_failures()))
        yield lease
        yield from self._allocator()
        if self.loop_lag is not None and self.clock is not None:
            yield from self.loop_lag.metrics(self.clock())

    def _loops(self) -> Iterable[Metric]:
        reconciles = CounterMetricFamily(
            "tf_controller_reconciles", "reconciles that ended, by loop and result",
            labels=["loop", "result"],
        )  # fmt: skip
        depth = GaugeMetricFamily(
            "tf_controller_queue_depth", "keys waiting in a loop's queue", labels=["loop"]
        )
        for loop in self.loops:
            stats = loop.stats
            reconciles.add_metric([loop.name, "success"], stats.reconciles - stats.errors)
            reconciles.add_metric([loop.name, "error"], stats.errors)
            depth.add_metric([loop.name], loop.queue.depth)
        yield reconciles
        yield depth

    def _writers(self) -> Iterable[Metric]:
        writes = CounterMetricFamily(
            "tf_controller_api_writes", "writes to the API server, by writer and result",
            labels=["writer", "result"],
        )  # fmt: skip
        for name, writer in self.writers:
            stats = writer.stats
            results = {"accepted": stats.writes, "conflict": stats.conflicts,
                       "failed": stats.failures, "fenced": stats.fenced}  # fmt: skip
            for result, value in results.items():
                writes.add_metric([name, result], value)
        yield writes

    def _informers(self) -> Iterable[Metric]:
        events = CounterMetricFamily(
            "tf_controller_informer_events", "list, watch and error counts of each informer",
            labels=["informer", "kind"],
        )  # fmt: skip
        synced = GaugeMetricFamily(
            "tf_controller_informer_synced", "1 once the cache holds its first list",
            labels=["informer"],
        )  # fmt: skip
        for informer in self.informers:
            stats = informer.stats
            kinds = {"list": stats.lists, "watch": stats.watches, "event": stats.events,
                     "expired": stats.expired, "error": stats.errors}  # fmt: skip
            for kind, value in kinds.items():
                events.add_metric([informer.name, kind], value)
            synced.add_metric([informer.name], 1.0 if informer.has_synced else 0.0)
        yield events
        yield synced

    def _allocator(self) -> Iterable[Metric]:
        ready = GaugeMetricFamily(
            "tf_controller_allocator_ready", "1 once the allocator was rebuilt on this leader"
        )
        ready.add_metric([], 1.0 if self.state.ready else 0.0)
        yield ready
        size = GaugeMetricFamily(
            "tf_controller_allocator_objects", "what the allocator holds", labels=["kind"]
        )
        allocator = self.state.allocator
        if allocator is not None:
            size.add_metric(["gpus"], len(allocator.gpus))
            size.add_metric(["nodes"], len(allocator.nodes))
            size.add_metric(["allocations"], len(allocator.records))
        yield size
        refused = CounterMetricFamily(
            "tf_controller_allocations_refused",
            "restored allocations refused because they would over-commit a GPU",
        )
        refused.add_metric([], float(self.state.refused))
        yield refused
        problems = GaugeMetricFamily(
            "tf_controller_object_problems",
            "objects the allocator could not read or pods it holds no allocation for",
        )
        problems.add_metric([], float(len(self.state.problems)))
        yield problems
