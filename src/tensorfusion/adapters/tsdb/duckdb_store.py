"""The embedded metrics store (metrics.md §9): a DuckDB file or in-memory database.

`DuckDBMetricsStore` is synchronous (the simulator and `alerts test` drive it on a simulated
clock); `EmbeddedMetricsStore` is the async `MetricsStore` over it, running each call in a
worker thread so the event loop never blocks.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Final

import duckdb
import orjson

from tensorfusion.adapters.tsdb.store import (
    QueryResult,
    StoreHealth,
    StoreQueryError,
    StoreUnavailableError,
)
from tensorfusion.domain.alerting.conditions import Dialect
from tensorfusion.domain.metrics.line_protocol import parse_lines
from tensorfusion.domain.metrics.retention import EMBEDDED_MAX_RETENTION_MS, parse_ttl
from tensorfusion.domain.metrics.rows import MetricRow
from tensorfusion.domain.metrics.schema import TABLES, ColumnType, duckdb_create_table

__all__ = ["DuckDBMetricsStore", "EmbeddedMetricsStore"]

_log = logging.getLogger(__name__)
_TYPE_OF: Final[dict[type, ColumnType]] = {
    bool: ColumnType.BOOL,
    int: ColumnType.INT,
    float: ColumnType.FLOAT,
    str: ColumnType.STRING,
}
_IDENTIFIER_OK: Final = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")


def _quote_identifier(name: str) -> str:
    if name and all(char in _IDENTIFIER_OK for char in name) and not name[0].isdigit():
        return name
    return '"' + name.replace('"', '""') + '"'


class DuckDBMetricsStore:
    """The nine `tf_*` tables in DuckDB; thread-safe through one lock."""

    kind: Final = "duckdb"
    dialect: Final = Dialect.DUCKDB

    def __init__(self, path: str | os.PathLike[str] | None = None, *, threads: int | None = None):
        self.path = str(path) if path is not None else ":memory:"
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.RLock()
        self._connection = duckdb.connect(self.path)
        self._connection.execute("SET TimeZone = 'UTC'")
        if threads is not None:
            self._connection.execute(f"SET threads = {int(threads)}")
        self._columns: dict[str, dict[str, ColumnType]] = {}
        self._time_columns: dict[str, str] = {}
        self._spool = Path(tempfile.gettempdir())
        self.create_tables()

    # ------------------------------------------------------------------ schema

    def create_tables(self) -> None:
        """Create the nine tables if missing and learn the columns of every table."""
        with self._lock:
            for schema in TABLES:
                self._connection.execute(duckdb_create_table(schema))
                self._time_columns[schema.name] = schema.time_column
            self._load_columns()

    def _load_columns(self) -> None:
        described = self._connection.execute(
            "SELECT table_name, column_name, data_type FROM information_schema.columns "
            "WHERE table_schema = 'main'"
        ).fetchall()
        by_type = {column_type.duckdb: column_type for column_type in ColumnType}
        self._columns = defaultdict(dict)
        for table_name, column_name, data_type in described:
            column_type = by_type.get(str(data_type))
            if column_type is not None:
                self._columns[table_name][column_name] = column_type
            elif str(data_type).startswith("TIMESTAMP"):
                self._time_columns.setdefault(table_name, column_name)

    def _ensure_columns(self, table: str, rows: Sequence[MetricRow]) -> dict[str, ColumnType]:
        known = self._columns.get(table)
        if known is None:
            time_column = "greptime_timestamp"
            self._connection.execute(
                f"CREATE TABLE IF NOT EXISTS {_quote_identifier(table)} "
                f"({time_column} TIMESTAMP NOT NULL)"
            )
            self._time_columns[table] = time_column
            known = self._columns[table] = {}
        for row in rows:
            for tag in row.tags:
                if tag not in known:
                    self._add_column(table, tag, ColumnType.STRING, known)
            for name, value in row.fields.items():
                if name not in known:
                    column_type = _TYPE_OF.get(type(value), ColumnType.STRING)
                    self._add_column(table, name, column_type, known)
        return known

    def _add_column(
        self, table: str, column: str, column_type: ColumnType, known: dict[str, ColumnType]
    ) -> None:
        self._connection.execute(
            f"ALTER TABLE {_quote_identifier(table)} ADD COLUMN IF NOT EXISTS "
            f"{_quote_identifier(column)} {column_type.duckdb}"
        )
        known[column] = column_type
        _log.info("embedded store: added column %s.%s (%s)", table, column, column_type.duckdb)

    # ------------------------------------------------------------------ writes

    def insert_rows(self, rows: Iterable[MetricRow]) -> int:
        """Insert rows (grouped per table, in time order); returns the number inserted."""
        by_table: dict[str, list[MetricRow]] = defaultdict(list)
        for row in rows:
            by_table[row.table].append(row)
        inserted = 0
        with self._lock:
            for table, table_rows in by_table.items():
                table_rows.sort(key=lambda row: row.ts_ms)
                inserted += self._insert_table(table, table_rows)
        return inserted

    def _insert_table(self, table: str, rows: list[MetricRow]) -> int:
        known = self._ensure_columns(table, rows)
        time_column = self._time_columns.get(table, "ts")
        columns = [name for name in known if name != time_column]
        spec = ", ".join(
            f"'{name.replace(chr(39), chr(39) * 2)}': '{known[name].duckdb}'" for name in columns
        )
        spec += ", '__ts': 'BIGINT'"
        payload = orjson.dumps([{**row.tags, **row.fields, "__ts": row.ts_ms} for row in rows])
        descriptor, spool = tempfile.mkstemp(prefix="tf-ingest-", suffix=".json", dir=self._spool)
        try:
            with os.fdopen(descriptor, "wb") as handle:
                handle.write(payload)
            select = ", ".join(_quote_identifier(name) for name in columns)
            self._connection.execute(
                f"INSERT INTO {_quote_identifier(table)} ({select}, {time_column}) "
                f"SELECT {select}, epoch_ms(__ts) FROM read_json('{spool}', format = 'array', "
                f"columns = {{{spec}}})"
            )
        except duckdb.Error as error:
            raise StoreQueryError(f"embedded store: insert into {table} failed: {error}") from None
        finally:
            os.unlink(spool)
        return len(rows)

    def ingest_lines(self, body: str, *, precision: str = "ms") -> int:
        """Parse a line-protocol body and insert it (the embedded write path, §9.3)."""
        return self.insert_rows(parse_lines(body, precision=precision))

    # ------------------------------------------------------------------ reads

    def query(self, sql: str) -> QueryResult:
        """Run one query; raises StoreQueryError naming the DuckDB error."""
        with self._lock:
            try:
                cursor = self._connection.execute(sql)
                description = cursor.description or []
                rows = cursor.fetchall()
            except duckdb.Error as error:
                raise StoreQueryError(f"embedded store: {error}") from None
        return QueryResult(tuple(str(column[0]) for column in description), rows)

    def interrupt(self) -> None:
        """Abort the statement running now (used for query timeouts)."""
        self._connection.interrupt()

    def execute(self, sql: str, parameters: Sequence[Any] | None = None) -> None:
        """Run a statement with no result (fixtures, tests)."""
        with self._lock:
            self._connection.execute(sql, parameters or [])

    # ------------------------------------------------------------------ retention

    def delete_older_than(self, cutoff_ms: int) -> int:
        """Delete rows with a time before `cutoff_ms` from every table, then checkpoint."""
        deleted = 0
        with self._lock:
            for table, time_column in self._time_columns.items():
                result = self._connection.execute(
                    f"DELETE FROM {_quote_identifier(table)} WHERE {time_column} < epoch_ms(?)",
                    [cutoff_ms],
                ).fetchone()
                deleted += int(result[0]) if result else 0
            if self.path != ":memory:":
                self._connection.execute("CHECKPOINT")
        return deleted

    def close(self) -> None:
        """Close the database."""
        with self._lock:
            self._connection.close()


class EmbeddedMetricsStore:
    """The async `MetricsStore` over a DuckDBMetricsStore, with retention every 10 minutes."""

    kind: Final = "duckdb"
    dialect: Final = Dialect.DUCKDB

    def __init__(
        self,
        database: DuckDBMetricsStore,
        *,
        ttl: str = "30d",
        retention_interval_s: float = 600.0,
        clock_ms: Any = None,
    ) -> None:
        self.database = database
        self._ttl_ms = min(parse_ttl(ttl), EMBEDDED_MAX_RETENTION_MS)
        self._retention_interval_s = retention_interval_s
        self._retention_task: asyncio.Task[None] | None = None
        self._clock_ms = clock_ms
        self._health = StoreHealth("duckdb", database.path, detail={"embedded": True})

    async def start(self) -> None:
        """Start the retention loop."""
        if self._retention_task is None:
            self._retention_task = asyncio.create_task(self._retention_loop())

    async def close(self) -> None:
        """Stop the retention loop (the database stays open for its owner)."""
        if self._retention_task is not None:
            self._retention_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._retention_task
            self._retention_task = None

    async def query(self, sql: str, timeout_s: float) -> QueryResult:
        """Run a query in a worker thread, interrupting it at the timeout."""
        task = asyncio.ensure_future(asyncio.to_thread(self.database.query, sql))
        try:
            result = await asyncio.wait_for(asyncio.shield(task), timeout_s)
        except TimeoutError:
            self.database.interrupt()
            self._health.read_up = False
            self._health.last_error = f"query timed out after {timeout_s:g}s"
            raise StoreUnavailableError(self._health.last_error) from None
        except StoreQueryError as error:
            self._health.last_error = str(error)
            raise
        self._health.read_up = True
        return result

    async def write(self, rows: Sequence[MetricRow]) -> None:
        """Insert rows in a worker thread."""
        try:
            await asyncio.to_thread(self.database.insert_rows, rows)
        except StoreQueryError as error:
            self._health.write_up = False
            self._health.last_error = str(error)
            _log.error("%s", error)
            return
        self._health.write_up = True

    async def apply_ttl(self, ttl: str) -> None:
        """Set the retention (capped at 72h in the embedded store)."""
        self._ttl_ms = min(parse_ttl(ttl), EMBEDDED_MAX_RETENTION_MS)

    async def _retention_loop(self) -> None:
        while True:
            await asyncio.sleep(self._retention_interval_s)
            now_ms = self._clock_ms() if self._clock_ms else int(time.time() * 1000)
            try:
                deleted = await asyncio.to_thread(
                    self.database.delete_older_than, now_ms - self._ttl_ms
                )
                _log.debug("embedded store retention deleted %d rows", deleted)
            except Exception as error:  # a faulty retention pass is logged and retried
                _log.error("embedded store retention failed: %s", error)

    def health(self) -> StoreHealth:
        """Current read/write state."""
        return self._health
