"""The controller's own Prometheus figures, read from its parts at each scrape.

Reconciles and errors per loop, queue depths, API writes, conflicts (retries) and fenced writes
per writer, informer list/watch counters, the leader flag and failed Lease attempts, and the
allocator's size and readiness. Nothing is counted twice: the collector only reads the counters
the parts keep.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from tensorfusion.controller.allocator_state import AllocatorState
from tensorfusion.controller.fenced_writes import FencedWriter
from tensorfusion.controller.reconcile_loop import ReconcileLoop
from tensorfusion.runtime.informer import Informer

__all__ = ["ControllerCollector"]


@dataclass(slots=True, eq=False)
class ControllerCollector(Collector):
    """A `prometheus_client` collector over the controller's parts (register it once)."""

    state: AllocatorState
    loops: Sequence[ReconcileLoop[Any]]
    writers: Sequence[tuple[str, FencedWriter]]
    informers: Sequence[Informer]
    is_leader: Callable[[], bool]
    lease_failures: Callable[[], int]

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
