"""The leader's metrics store for one leadership term (metrics.md §6-§9).

`TSDB_MYSQL_HOST` set: GreptimeDB (`GreptimeStore`: line-protocol writes over HTTP through a
bounded, retrying buffer; MySQL-protocol reads; its own table creation, schema check and TTL).
Otherwise the embedded store: a new DuckDB file per term in a directory (the chart mounts an
emptyDir at `/var/lib/tensor-fusion/tsdb`); files of earlier terms there are removed, as their
data is never read again (metrics.md §9.6).

Writes to the embedded store go through `EmbeddedWriteBuffer`: rows that cannot be inserted
(the file unwritable, the disk full) stay buffered and are retried with backoff, at most 20,000
rows; beyond that the oldest rows are dropped and counted, as the GreptimeDB writer does
(metrics.md §6.3 step 6). A row the database refuses for its data is dropped alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import secrets
import time
from collections import Counter as Tally
from collections import defaultdict, deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Final

from prometheus_client import CollectorRegistry

from tensorfusion.adapters.tsdb.duckdb_store import DuckDBMetricsStore, EmbeddedMetricsStore
from tensorfusion.adapters.tsdb.greptime_store import GreptimeSettings, GreptimeStore
from tensorfusion.adapters.tsdb.greptime_writer import WriterMetrics
from tensorfusion.adapters.tsdb.store import MetricsStore
from tensorfusion.adapters.tsdb.write_buffer import insert_isolating
from tensorfusion.domain.alerting.dynamic_config import DEFAULT_TTL
from tensorfusion.domain.backoff import Backoff, RetryDelays
from tensorfusion.domain.metrics.rows import MetricRow
from tensorfusion.domain.settings.controller_environment import TsdbEnvironment

__all__ = [
    "DEFAULT_EMBEDDED_DIR",
    "EMBEDDED_BUFFER_ROWS",
    "EmbeddedWriteBuffer",
    "TermStore",
    "greptime_settings",
    "new_term_id",
    "open_term_store",
]

_log = logging.getLogger(__name__)
DEFAULT_EMBEDDED_DIR: Final = "/var/lib/tensor-fusion/tsdb"
EMBEDDED_BUFFER_ROWS: Final = 20_000
_FILE_PREFIX: Final = "metrics-"
_DROP_LOG_EVERY_S: Final = 60.0


def new_term_id() -> str:
    """A unique, sortable name for one leadership term: UTC time and a random suffix."""
    return f"{datetime.now(UTC).strftime('%Y%m%dT%H%M%SZ')}-{secrets.token_hex(3)}"


def greptime_settings(tsdb: TsdbEnvironment, *, ttl: str = DEFAULT_TTL) -> GreptimeSettings:
    """GreptimeDB settings from `TSDB_*` (self-hosted: HTTP on `TSDB_HTTP_PORT`; cloud: HTTPS
    with `token user:password`, TLS reads; rule queries as `TSDB_RULE_USER` when it and
    `TSDB_RULE_PASSWORD` are set)."""
    return GreptimeSettings(
        host=tsdb.mysql_host,
        port=tsdb.mysql_port,
        http_port=tsdb.http_port,
        db=tsdb.database,
        is_cloud=tsdb.is_cloud,
        user=tsdb.user,
        password=tsdb.password,
        rule_user=tsdb.rule_user,
        rule_password=tsdb.rule_password,
        ttl=ttl,
    )


class EmbeddedWriteBuffer:
    """Rows waiting for the DuckDB file, inserted per table, kept while inserts fail."""

    def __init__(
        self,
        database: DuckDBMetricsStore,
        *,
        max_rows: int = EMBEDDED_BUFFER_ROWS,
        metrics: WriterMetrics | None = None,
        backoff: Backoff | None = None,
    ) -> None:
        """`backoff`: the wait after an outage before rows are tried again (1 s doubling to
        30 s by default); writes meanwhile only queue."""
        self.database = database
        self.max_rows = max_rows
        self.metrics = metrics or WriterMetrics()
        self._pending: dict[str, deque[MetricRow]] = defaultdict(deque)
        self._lock = asyncio.Lock()
        self.up = True
        self.last_error = ""
        self.dropped: Tally[str] = Tally()
        self._unlogged_drops: Tally[str] = Tally()
        self._last_drop_log = float("-inf")
        self.stopped = False
        self.rejected: Tally[str] = Tally()
        self._backoff = RetryDelays(backoff or Backoff(initial=1.0, maximum=30.0, jitter=0.2))
        self._retry_at = float("-inf")

    def __len__(self) -> int:
        return sum(len(rows) for rows in self._pending.values())

    async def stop(self) -> None:
        """Wait for an insert in progress; later writes only queue."""
        async with self._lock:
            self.stopped = True

    def add(self, rows: Sequence[MetricRow]) -> None:
        """Queue rows; when over the cap the oldest rows (by time, any table) are dropped."""
        for row in rows:
            self._pending[row.table].append(row)
        excess = len(self) - self.max_rows
        if excess > 0:
            dropped: Tally[str] = Tally()
            for _ in range(excess):
                table = min(
                    (name for name, queue in self._pending.items() if queue),
                    key=lambda name: self._pending[name][0].ts_ms,
                )
                self._pending[table].popleft()
                dropped[table] += 1
            self._record_drops(dropped)
        self.metrics.buffer_rows.set(len(self))

    def _record_drops(self, dropped: Tally[str]) -> None:
        for table, count in dropped.items():
            self.metrics.rows_dropped.labels(table, "buffer_full").inc(count)
        self.dropped.update(dropped)
        self._unlogged_drops.update(dropped)
        now = time.monotonic()
        if now - self._last_drop_log >= _DROP_LOG_EVERY_S:
            self._last_drop_log = now
            _log.error(
                "embedded metrics store: buffer full (%d rows), dropped the oldest rows %s",
                self.max_rows,
                dict(self._unlogged_drops),
            )
            self._unlogged_drops.clear()

    async def write(self, rows: Sequence[MetricRow]) -> bool:
        """Queue `rows`, then try to insert everything queued; True when nothing is left.
        Rows the database refuses for their data are found and dropped alone
        (`insert_isolating`); after an outage the rows stay and the next try waits a backoff."""
        self.add(rows)
        async with self._lock:
            if self.stopped or time.monotonic() < self._retry_at:
                return False
            errors: list[str] = []
            for table in sorted(self._pending):
                queue = self._pending[table]
                if not queue or errors:
                    continue
                batch = list(queue)
                insert = functools.partial(self.database.insert_rows, report=False)
                outcome = await asyncio.to_thread(insert_isolating, insert, batch)
                for _ in batch:
                    queue.popleft()
                queue.extendleft(reversed(outcome.pending))
                self.metrics.rows_written.inc(outcome.inserted)
                if outcome.rejected:
                    self._record_rejected(table, outcome.rejected)
                if outcome.error is not None:
                    errors.append(str(outcome.error))
            self.metrics.buffer_rows.set(len(self))
            if errors:
                self.metrics.write_errors.inc()
                self._retry_at = time.monotonic() + self._backoff.next_delay()
                message = "; ".join(errors)
                if self.up or message != self.last_error:
                    _log.error(
                        "embedded metrics store: insert failed, %d rows kept and retried with "
                        "backoff: %s",
                        len(self),
                        message,
                    )
                self.up = False
                self.last_error = message
                return False
            self._backoff.reset()
            if not self.up:
                _log.info("embedded metrics store: inserts work again")
            self.up = True
            self.last_error = ""
            self.metrics.last_success.set(time.time())
            return True

    def _record_rejected(self, table: str, rejected: list[tuple[MetricRow, str]]) -> None:
        """Count and log rows the database refused for their data (dropped, never retried)."""
        self.metrics.rows_dropped.labels(table, "rejected").inc(len(rejected))
        self.rejected[table] += len(rejected)
        _log.error(
            "embedded metrics store: dropped %d rows of %s that it refuses (their data): %s",
            len(rejected),
            table,
            rejected[0][1],
        )


@dataclass(slots=True)
class TermStore:
    """The store of one term, how it is written, and what must be released at the end."""

    store: MetricsStore
    target: str
    registry: CollectorRegistry
    embedded: DuckDBMetricsStore | None = None
    buffer: EmbeddedWriteBuffer | None = None
    path: Path | None = None
    closed: bool = field(default=False)

    @property
    def kind(self) -> str:
        """`greptimedb` or `duckdb`."""
        return self.store.kind

    async def write(self, rows: Sequence[MetricRow]) -> None:
        """Hand rows over: buffered and retried either way, never raises on an outage."""
        if self.buffer is not None:
            await self.buffer.write(rows)
        else:
            await self.store.write(rows)

    def write_state(self) -> tuple[bool, str]:
        """Whether the last write succeeded, and its error."""
        if self.buffer is not None:
            return self.buffer.up, self.buffer.last_error
        if isinstance(self.store, GreptimeStore):
            return self.store.writer.up, self.store.writer.last_error
        health = self.store.health()
        return health.write_up, health.last_error if not health.write_up else ""

    def buffered_rows(self) -> int:
        """Rows waiting to be written."""
        if self.buffer is not None:
            return len(self.buffer)
        if isinstance(self.store, GreptimeStore):
            return len(self.store.writer.buffer)
        return 0

    async def close(self) -> None:
        """Stop the store (GreptimeDB: one final flush, 5 s); the embedded file is deleted."""
        if self.closed:
            return
        self.closed = True
        try:
            await self.store.close()
        finally:
            if self.embedded is not None:
                await self._close_embedded()
            if self.path is not None:
                _remove_database_files(self.path)

    async def _close_embedded(self) -> None:
        """Close the DuckDB file once no insert and no read query uses it any more: closing
        it under a running query can deadlock inside DuckDB."""
        assert self.embedded is not None
        if self.buffer is not None:
            await self.buffer.stop()
        if isinstance(self.store, EmbeddedMetricsStore) and self.store.queries_in_flight:
            _log.warning("embedded metrics store: %s left open, a query still runs", self.path)
            return
        with contextlib.suppress(Exception):
            await asyncio.to_thread(self.embedded.close)


def _remove_database_files(path: Path) -> None:
    for stale in (path, path.with_name(path.name + ".wal")):
        try:
            stale.unlink(missing_ok=True)
        except OSError as error:
            _log.warning("embedded metrics store: cannot remove %s: %s", stale, error)


def _remove_earlier_terms(directory: Path) -> None:
    for stale in sorted(directory.glob(f"{_FILE_PREFIX}*.duckdb")):
        _log.info("embedded metrics store: removing %s of an earlier term", stale)
        _remove_database_files(stale)


def open_term_store(
    tsdb: TsdbEnvironment,
    *,
    embedded_dir: str | Path = DEFAULT_EMBEDDED_DIR,
    ttl: str = DEFAULT_TTL,
    term_id: str | None = None,
    buffer_rows: int = EMBEDDED_BUFFER_ROWS,
) -> TermStore:
    """GreptimeDB when `TSDB_MYSQL_HOST` is set, else a new embedded DuckDB file.

    Opening never connects to GreptimeDB (`start` does, retrying); a DuckDB file that cannot
    be created raises (duckdb.Error or OSError), and the caller retries.
    """
    registry = CollectorRegistry()
    if tsdb.greptime:
        settings = greptime_settings(tsdb, ttl=ttl)
        store = GreptimeStore(settings, registry=registry)
        return TermStore(store, store.reader.target, registry)
    directory = Path(embedded_dir)
    directory.mkdir(parents=True, exist_ok=True)
    _remove_earlier_terms(directory)
    path = directory / f"{_FILE_PREFIX}{term_id or new_term_id()}.duckdb"
    # The database's own insert_failed counter stays private: failed rows are kept by the
    # buffer, which counts only what it really drops.
    database = DuckDBMetricsStore(path, registry=CollectorRegistry())
    try:
        embedded = EmbeddedMetricsStore(database, ttl=ttl)
        buffer = EmbeddedWriteBuffer(
            database, max_rows=buffer_rows, metrics=WriterMetrics(registry)
        )
    except Exception:
        database.close()
        _remove_database_files(path)
        raise
    _log.info("embedded metrics store: new file %s for this term", path)
    return TermStore(embedded, str(path), registry, database, buffer, path)
