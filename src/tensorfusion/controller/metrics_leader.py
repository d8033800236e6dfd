"""The leader's metrics work (metrics.md §2-§10): the store of the term, the recorders every
`metricsRecordInterval`, and condition `TimeSeriesDatabaseReady`.

`LeaderMetricsService.work` is a leader-only task (`LeaderWork`). One term:

1. opens the store chosen by `TSDB_*` (GreptimeDB, else a new embedded DuckDB file; an embedded
   file that cannot be created is retried with backoff, the condition saying why);
2. starts it (GreptimeDB: tables created and the schema checked by the store, retried while it
   is down; embedded: the nine tables exist once the file is open and are queried once);
3. every cycle, from the interval of the replica's current `config.yaml` (read anew each
   cycle, so a reload applies at the next one): continues the counters from the store first
   (§5), records one snapshot of the allocator and the worker pods, probes the store with a
   query, and brings the condition on every TensorFusionCluster up to date (a write only on
   a transition). `metricsTTL` changes are applied to the store.

Nothing here ever ends the process because of the store: writes are buffered with a cap and
their drops counted, failed reads only change the condition. `wait_store` hands the term's
store to the alert evaluator, which reads the same store.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, Final, Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from tensorfusion.adapters.kube.client import KubeClient
from tensorfusion.adapters.tsdb.store import MetricsStore, StoreError
from tensorfusion.controller.allocator_state import AllocatorState
from tensorfusion.controller.metrics_recorder import ClusterRecorder, Counts, parse_seed, seed_query
from tensorfusion.controller.tsdb_condition import (
    ClusterConditionWriter,
    ClusterObjects,
    StoreCondition,
    judge_store,
)
from tensorfusion.controller.tsdb_store import (
    DEFAULT_EMBEDDED_DIR,
    TermStore,
    open_term_store,
)
from tensorfusion.domain.alerting.dynamic_config import DynamicConfig
from tensorfusion.domain.metrics.rows import MetricRow
from tensorfusion.domain.metrics.schema import TABLES
from tensorfusion.domain.settings.controller_environment import ControllerEnvironment

__all__ = ["ConditionPublisher", "LeaderMetricsService", "MetricsProcess"]

_log = logging.getLogger(__name__)
PROBE_SQL: Final = "SELECT 1 AS up"
_FAILURE_LOG_EVERY_S: Final = 60.0


class _Informers(Protocol):
    @property
    def clusters(self) -> ClusterObjects: ...


class MetricsProcess(Protocol):
    """What the service reads of the controller process (`app.controller.ControllerProcess`)."""

    @property
    def client(self) -> KubeClient: ...

    @property
    def env(self) -> ControllerEnvironment: ...

    @property
    def state(self) -> AllocatorState: ...

    @property
    def informers(self) -> _Informers: ...

    def fence(self) -> float: ...


class ConditionPublisher(Protocol):
    """Writes the condition where it belongs (`ClusterConditionWriter`); never raises."""

    async def publish(self, condition: StoreCondition) -> int: ...


StoreOpener = Callable[[MetricsProcess, str], TermStore]
"""(process, metricsTTL) -> the store of a new term; raises when it cannot be opened."""
PublisherFactory = Callable[[MetricsProcess], ConditionPublisher]


class _TermCollector(Collector):
    """Exposes the series of the current term's store on the process registry."""

    def __init__(self) -> None:
        self.registry: CollectorRegistry | None = None

    def collect(self) -> Iterable[Metric]:
        registry = self.registry
        return list(registry.collect()) if registry is not None else []


class LeaderMetricsService:
    """The metrics store, the recorders and the store condition of each leadership term."""

    def __init__(
        self,
        *,
        dynamic_config: Callable[[], DynamicConfig] = DynamicConfig,
        registry: CollectorRegistry | None = None,
        embedded_dir: str | Path = DEFAULT_EMBEDDED_DIR,
        open_store: StoreOpener | None = None,
        publisher_factory: PublisherFactory | None = None,
        counts: Counts | None = None,
        probe_timeout_s: float = 10.0,
        open_retry_max_s: float = 60.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """`dynamic_config` returns the replica's current configuration (the replica config's
        `config`); `embedded_dir` is where the embedded store puts its file of each term."""
        self._dynamic_config = dynamic_config
        self.registry = registry if registry is not None else CollectorRegistry()
        self._embedded_dir = Path(embedded_dir)
        self._open_store = open_store or self._default_open
        self._publisher_factory = publisher_factory or _cluster_writer
        self._counts = counts
        self._probe_timeout_s = probe_timeout_s
        self._open_retry_max_s = open_retry_max_s
        self._clock = clock
        self._term: TermStore | None = None
        self._ready = asyncio.Event()
        self.condition: StoreCondition | None = None
        self._last_failure_log = float("-inf")
        self.last_cycle_ms: int | None = None
        self.seeded = False
        self._collector = _TermCollector()
        self.registry.register(self._collector)
        self._store_up = Gauge(
            "tf_metrics_recorder_store_up",
            "Metrics store usable by the leader (1) or not (0), for reads and writes",
            ["direction"],
            registry=self.registry,
        )
        self._cycles = Counter(
            "tf_metrics_recorder_cycles",
            "Recording cycles by result (ok, not_ready, error)",
            ["result"],
            registry=self.registry,
        )
        self._rows = Counter(
            "tf_metrics_recorder_rows", "Rows handed to the store", registry=self.registry
        )
        self._buffered = Gauge(
            "tf_metrics_recorder_buffered_rows",
            "Rows waiting for the store (written later, or dropped beyond the cap)",
            registry=self.registry,
        )

    # ------------------------------------------------------------------ public

    @property
    def term(self) -> TermStore | None:
        """The store of the current term (None while not leading)."""
        return self._term

    async def wait_store(self) -> MetricsStore:
        """The current term's store, once it has started (for the alert evaluator)."""
        while True:
            term = self._term
            if term is not None and self._ready.is_set():
                return term.store
            await self._ready.wait()
            if self._term is None:  # ended meanwhile: wait for the next term
                await asyncio.sleep(0)

    async def accept(self, rows: Sequence[MetricRow]) -> bool:
        """Rows from the write path (node agents): written through the current term's buffer;
        False, nothing taken, while no store has started."""
        term = self._term
        if term is None or not self._ready.is_set():
            return False
        await term.write(rows)
        return True

    def status(self) -> dict[str, Any]:
        """The store, its condition and the buffer, for status output."""
        term = self._term
        condition = self.condition
        return {
            "store": None
            if term is None
            else {"kind": term.kind, "target": term.target, "bufferedRows": term.buffered_rows()},
            "condition": None
            if condition is None
            else {
                "status": condition.status,
                "reason": condition.reason,
                "message": condition.message,
            },
            "countersSeeded": self.seeded,
            "lastCycleMs": self.last_cycle_ms,
        }

    # ------------------------------------------------------------------ the leader work

    async def work(self, process: MetricsProcess) -> None:
        """Leader work: record until cancelled (leadership ended or shutdown)."""
        publisher = self._publisher_factory(process)
        caches = process.state.caches
        recorder = ClusterRecorder(
            lambda: process.state.allocator,
            gpu_nodes=caches.gpu_nodes,
            pools=caches.pools,
            pods=caches.pods,
            counts=self._counts,
        )
        self.seeded = False
        term: TermStore | None = None
        try:
            term = await self._open(process, publisher)
            self._term = term
            self._collector.registry = term.registry
            problems = await self._start(term)
            if term.kind == "duckdb":
                recorder.seed_from({})  # a new file: counters start at 0 (metrics.md §5)
                self.seeded = True
            self._ready.set()
            await self._cycles_forever(term, recorder, publisher, problems)
        finally:
            self._ready.clear()
            self._term = None
            if term is not None:
                try:
                    await term.close()
                finally:
                    self._collector.registry = None

    def _default_open(self, process: MetricsProcess, ttl: str) -> TermStore:
        return open_term_store(process.env.tsdb, embedded_dir=self._embedded_dir, ttl=ttl)

    async def _open(self, process: MetricsProcess, publisher: ConditionPublisher) -> TermStore:
        delay = 1.0
        while True:
            try:
                return self._open_store(process, self._dynamic_config().metrics_ttl)
            except Exception as error:
                condition = StoreCondition(
                    "False", "Unreachable", f"the metrics store cannot be opened: {error}"
                )
                self._note(condition)
                await publisher.publish(condition)
                _log.error("metrics store not opened (retrying in %.0fs): %s", delay, error)
            await asyncio.sleep(delay)
            delay = min(delay * 2, self._open_retry_max_s)

    async def _start(self, term: TermStore) -> list[str]:
        """Start the store and check the tables; an unexpected error is logged and the term
        goes on (its cycles report the store), so the store given to the evaluator stays the
        same for the whole term."""
        try:
            await term.store.start()
            return await self._check_tables(term)
        except Exception as error:
            _log.exception("metrics store: starting it failed; the cycles report its state")
            return [f"the store did not start: {type(error).__name__}: {error}"]

    async def _check_tables(self, term: TermStore) -> list[str]:
        """The embedded store's nine tables answer a query (GreptimeDB checks its own schema
        in the store, reported in its health)."""
        if term.kind != "duckdb":
            return []
        problems: list[str] = []
        for schema in TABLES:
            try:
                await term.store.query(
                    f"SELECT * FROM {schema.name} LIMIT 0", self._probe_timeout_s
                )
            except StoreError as error:
                problems.append(f"{schema.name}: {error}")
        if problems:
            _log.error("embedded metrics store: tables missing or unreadable: %s", problems)
        return problems

    async def _cycles_forever(
        self,
        term: TermStore,
        recorder: ClusterRecorder,
        publisher: ConditionPublisher,
        problems: list[str],
    ) -> None:
        loop = asyncio.get_running_loop()
        next_at = loop.time()
        ttl = self._dynamic_config().metrics_ttl
        while True:
            config = self._dynamic_config()
            try:
                if config.metrics_ttl != ttl:
                    ttl = config.metrics_ttl
                    await self._apply_ttl(term, ttl)
                await self._cycle(term, recorder, publisher, config, problems)
            except Exception:  # one bad cycle never ends recording
                self._cycles.labels("error").inc()
                _log.exception("metrics recording cycle failed; the next one runs as planned")
            interval_s = config.metrics_record_interval_ms / 1000
            next_at += interval_s
            now = loop.time()
            while next_at <= now:  # skip cycles missed by an overrun
                next_at += interval_s
            await asyncio.sleep(next_at - now)

    async def _apply_ttl(self, term: TermStore, ttl: str) -> None:
        try:
            await term.store.apply_ttl(ttl)
        except Exception as error:  # the store reports and retries on its own
            _log.error("metricsTTL %s not applied: %s", ttl, error)

    async def _cycle(
        self,
        term: TermStore,
        recorder: ClusterRecorder,
        publisher: ConditionPublisher,
        config: DynamicConfig,
        problems: list[str],
    ) -> None:
        started_ms = int(self._clock() * 1000)
        if not recorder.seeded:
            await self._seed(term, recorder)
        snapshot = recorder.snapshot(config.metrics_extra_pod_labels)
        if snapshot is None:
            self._cycles.labels("not_ready").inc()
        else:
            rows = recorder.rows(snapshot, started_ms)
            await term.write(rows)
            self._rows.inc(len(rows))
            self._cycles.labels("ok").inc()
        self.last_cycle_ms = started_ms
        probe_error: StoreError | None = None
        try:
            await term.store.query(PROBE_SQL, self._probe_timeout_s)
        except StoreError as error:
            probe_error = error
        write_up, write_error = term.write_state()
        schema = list(problems) + list(term.store.health().detail.get("schemaProblems") or [])
        condition = judge_store(
            kind=term.kind,
            target=term.target,
            probe_error=probe_error,
            write_up=write_up,
            write_error=write_error,
            schema_problems=schema,
        )
        self._store_up.labels("read").set(0 if probe_error else 1)
        self._store_up.labels("write").set(1 if write_up else 0)
        self._buffered.set(term.buffered_rows())
        self._note(condition)
        await publisher.publish(condition)

    async def _seed(self, term: TermStore, recorder: ClusterRecorder) -> None:
        try:
            result = await term.store.query(seed_query(), self._probe_timeout_s)
        except StoreError as error:
            _log.warning(
                "metrics counters not read from the store yet (gauges only until then): %s",
                error,
            )
            return
        recorder.seed_from(parse_seed(result))
        self.seeded = True

    def _note(self, condition: StoreCondition) -> None:
        """Log a transition once; repeat a failure at most once a minute (metrics.md §10.2)."""
        previous, self.condition = self.condition, condition
        now = time.monotonic()
        if condition.ready:
            if previous is None or not previous.ready:
                _log.info("metrics store ready: %s", condition.message)
            return
        if previous is None or previous.ready or previous.reason != condition.reason:
            self._last_failure_log = now
            _log.error("metrics store not ready (%s): %s", condition.reason, condition.message)
        elif now - self._last_failure_log >= _FAILURE_LOG_EVERY_S:
            self._last_failure_log = now
            _log.error("metrics store still not ready (%s): %s", condition.reason,
                       condition.message)  # fmt: skip


def _cluster_writer(process: MetricsProcess) -> ConditionPublisher:
    return ClusterConditionWriter(process.client, process.informers.clusters, process.fence)
