"""The embedded metrics store (metrics.md §9): a DuckDB file or in-memory database.

`DuckDBMetricsStore` is synchronous (the simulator and `alerts test` drive it on a simulated
clock); `EmbeddedMetricsStore` is the async `MetricsStore` over it, running each call in a
worker thread so the event loop never blocks. Writes share one connection under a lock; every
read query gets a cursor of its own in a read-only transaction, so a timed-out query is
interrupted alone and can neither write nor disturb an insert.

The database is a sandbox for rule SQL (docs/rule-sandbox.md): no file or network access
outside its own file, no extension installed or loaded on demand, and its configuration locked
once the store has set it up.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
import time
from collections import defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Final

import duckdb
import orjson
from prometheus_client import CollectorRegistry, Counter

from tensorfusion.adapters.tsdb.store import (
    QueryResult,
    StoreDataError,
    StoreHealth,
    StoreQueryError,
    StoreUnavailableError,
)
from tensorfusion.domain.alerting.read_query import ReadQueryError, check_read_query
from tensorfusion.domain.metrics.conditions import Dialect
from tensorfusion.domain.metrics.line_protocol import parse_lines
from tensorfusion.domain.metrics.retention import EMBEDDED_MAX_RETENTION_MS, parse_ttl
from tensorfusion.domain.metrics.rows import MetricRow
from tensorfusion.domain.metrics.schema import TABLES, ColumnType, duckdb_create_table

__all__ = ["SANDBOX_CONFIG", "DuckDBMetricsStore", "EmbeddedMetricsStore", "ReadCursor"]

_log = logging.getLogger(__name__)
_TYPE_OF: Final[dict[type, ColumnType]] = {
    bool: ColumnType.BOOL,
    int: ColumnType.INT,
    float: ColumnType.FLOAT,
    str: ColumnType.STRING,
}
_INTERRUPT_AGAIN_S: Final = 0.05
_DRAIN_TIMEOUT_S: Final = 5.0
# Set when the database opens: no file or network access (read_text, read_csv, glob, COPY,
# ATTACH, http:// paths), no extension installed or loaded on demand. The database's own file,
# its WAL and its spill files stay usable. `lock_configuration` follows once the store has set
# the time zone, so no statement can undo any of this.
SANDBOX_CONFIG: Final[dict[str, str | bool | int]] = {
    "enable_external_access": False,
    "autoinstall_known_extensions": False,
    "autoload_known_extensions": False,
}
# What a row's own values cause (a type, a number, a time out of range): never worth a retry.
_DATA_ERRORS: Final = (
    duckdb.DataError,
    duckdb.InvalidInputException,
    duckdb.TypeMismatchException,
    duckdb.IntegrityError,
    TypeError,
    ValueError,
    OverflowError,
)
_IDENTIFIER_OK: Final = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")


def _quote_identifier(name: str) -> str:
    if name and all(char in _IDENTIFIER_OK for char in name) and not name[0].isdigit():
        return name
    return '"' + name.replace('"', '""') + '"'


def _json_row(row: MetricRow, columns: Sequence[str]) -> dict[str, Any]:
    """Every column of the table (absent: null, as `from_json_strict` wants every key)."""
    values: dict[str, Any] = {**row.tags, **row.fields}
    return {name: values.get(name) for name in columns} | {"__ts": row.ts_ms}


class ReadCursor:
    """One read query at a time on a DuckDB cursor of its own (a separate connection)."""

    def __init__(self, cursor: duckdb.DuckDBPyConnection) -> None:
        self._cursor = cursor
        self._interrupted = threading.Event()

    def query(self, sql: str) -> QueryResult:
        """Run exactly one SELECT statement in a read-only transaction: DuckDB's parser and
        the rule lexer (`check_read_query`) must both find one SELECT."""
        cursor = self._cursor
        try:
            statements = cursor.extract_statements(sql)
        except duckdb.Error as error:
            raise StoreQueryError(f"embedded store: {error}") from None
        if len(statements) != 1 or statements[0].type != duckdb.StatementType.SELECT:
            kinds = ", ".join(statement.type.name for statement in statements) or "none"
            raise StoreQueryError(
                f"embedded store: a read query must be exactly one SELECT statement; "
                f"got {len(statements)} ({kinds})"
            )
        try:
            check_read_query(sql)
        except ReadQueryError as error:
            raise StoreQueryError(f"embedded store: the query {error}") from None
        try:
            cursor.execute("BEGIN TRANSACTION READ ONLY")
            try:
                if self._interrupted.is_set():
                    raise StoreQueryError("embedded store: query interrupted before it started")
                cursor.execute(statements[0])
                description = cursor.description or []
                rows = cursor.fetchall()
            finally:
                with contextlib.suppress(duckdb.Error):  # nothing to undo after an abort
                    cursor.execute("ROLLBACK")
        except duckdb.Error as error:
            raise StoreQueryError(f"embedded store: {error}") from None
        return QueryResult(tuple(str(column[0]) for column in description), rows)

    def interrupt(self) -> None:
        """Abort this cursor's query, or keep it from starting; writes are not affected.

        DuckDB forgets an interrupt that arrives just before a statement starts: call this
        again until `query` has returned.
        """
        self._interrupted.set()
        self._cursor.interrupt()

    def close(self) -> None:
        """Release the cursor."""
        self._cursor.close()


class DuckDBMetricsStore:
    """The nine `tf_*` tables in DuckDB; writes under one lock, reads on their own cursors."""

    kind: Final = "duckdb"
    dialect: Final = Dialect.DUCKDB

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        threads: int | None = None,
        registry: CollectorRegistry | None = None,
    ):
        self.path = str(path) if path is not None else ":memory:"
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.RLock()
        config: dict[str, str | bool | int | float | list[str]] = {**SANDBOX_CONFIG}
        if threads is not None:
            config["threads"] = int(threads)
        self._connection = duckdb.connect(self.path, config=config)
        try:
            # GLOBAL: every read cursor (a connection of its own) starts in UTC too.
            self._connection.execute("SET GLOBAL TimeZone = 'UTC'")
            self._connection.execute("SET GLOBAL lock_configuration = true")
        except duckdb.Error:
            self._connection.close()
            raise
        self._cursor_lock = threading.Lock()
        self._cursor_source = self._connection.cursor()
        self._columns: dict[str, dict[str, ColumnType]] = {}
        self._time_columns: dict[str, str] = {}
        self.rows_dropped = Counter(
            "tf_metrics_rows_dropped",
            "Rows not stored, by table and reason (insert_failed)",
            ["table", "reason"],
            registry=registry if registry is not None else CollectorRegistry(),
        )
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

    def insert_rows(self, rows: Iterable[MetricRow], *, report: bool = True) -> int:
        """Insert rows (grouped per table, in time order); returns the number inserted.

        A table whose insert fails does not stop the others; its rows are counted in
        `rows_dropped` and logged (unless `report` is False: the caller keeps them), and
        StoreQueryError names every failure at the end: StoreDataError when every failure
        was the rows' own values.
        """
        by_table: dict[str, list[MetricRow]] = defaultdict(list)
        for row in rows:
            by_table[row.table].append(row)
        inserted = 0
        failures: list[StoreQueryError] = []
        with self._lock:
            for table, table_rows in by_table.items():
                table_rows.sort(key=lambda row: row.ts_ms)
                try:
                    inserted += self._insert_table(table, table_rows)
                except StoreQueryError as error:
                    failures.append(error)
                    if report:
                        self.rows_dropped.labels(table, "insert_failed").inc(len(table_rows))
                        _log.error("%s; %d rows dropped", error, len(table_rows))
                        error.args = (f"{error} ({len(table_rows)} rows dropped)",)
        if failures:
            data = all(isinstance(error, StoreDataError) for error in failures)
            raise (StoreDataError if data else StoreQueryError)("; ".join(map(str, failures)))
        return inserted

    def _insert_table(self, table: str, rows: list[MetricRow]) -> int:
        """Insert through one JSON parameter read by `from_json_strict` (no file: the
        database has no file access)."""
        try:
            known = self._ensure_columns(table, rows)
            time_column = self._time_columns.get(table, "ts")
            columns = [name for name in known if name != time_column]
            structure = {name: known[name].duckdb for name in columns} | {"__ts": "BIGINT"}
            payload = [_json_row(row, columns) for row in rows]
            select = ", ".join(_quote_identifier(name) for name in columns)
            self._connection.execute(
                f"INSERT INTO {_quote_identifier(table)} ({select}, {time_column}) "
                f"SELECT {select}, epoch_ms(__ts) FROM "
                f"(SELECT unnest(from_json_strict(?::JSON, ?), recursive := true))",
                [orjson.dumps(payload).decode(), orjson.dumps([structure]).decode()],
            )
        except (duckdb.Error, *_DATA_ERRORS) as error:
            kind = StoreDataError if isinstance(error, _DATA_ERRORS) else StoreQueryError
            raise kind(f"embedded store: insert into {table} failed: {error}") from None
        return len(rows)

    def ingest_lines(self, body: str, *, precision: str = "ms") -> int:
        """Parse a line-protocol body and insert it (the embedded write path, §9.3)."""
        return self.insert_rows(parse_lines(body, precision=precision))

    # ------------------------------------------------------------------ reads

    def reader(self) -> ReadCursor:
        """A read cursor of its own (close it after use); runs no statement itself."""
        try:
            with self._cursor_lock:
                cursor = self._cursor_source.cursor()
        except duckdb.Error as error:
            raise StoreUnavailableError(f"embedded store: no read cursor: {error}") from None
        return ReadCursor(cursor)

    def query(self, sql: str) -> QueryResult:
        """Run one SELECT statement read-only; raises StoreQueryError naming the problem."""
        reader = self.reader()
        try:
            return reader.query(sql)
        finally:
            reader.close()

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
        with self._lock, self._cursor_lock:
            self._cursor_source.close()
            self._connection.close()


def _interrupt_until_done(reader: ReadCursor, task: asyncio.Future[QueryResult]) -> None:
    """Interrupt the query now and again every 50 ms until its thread has returned (DuckDB
    forgets an interrupt that arrives just before a statement starts); needs no awaiting."""
    if task.done():
        return
    reader.interrupt()
    asyncio.get_running_loop().call_later(_INTERRUPT_AGAIN_S, _interrupt_until_done, reader, task)


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
        self._queries: dict[asyncio.Future[QueryResult], ReadCursor] = {}

    async def start(self) -> None:
        """Start the retention loop."""
        if self._retention_task is None:
            self._retention_task = asyncio.create_task(self._retention_loop())

    async def close(self) -> None:
        """Stop the retention loop and interrupt the queries still running (the database stays
        open for its owner)."""
        if self._retention_task is not None:
            self._retention_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._retention_task
            self._retention_task = None
        await self.drain_queries()

    async def drain_queries(self, timeout_s: float = _DRAIN_TIMEOUT_S) -> bool:
        """Interrupt every query in flight and wait until their threads have returned; False
        when one is still running after `timeout_s` (the database must not be closed then)."""
        running = {task: reader for task, reader in self._queries.items() if not task.done()}
        if not running:
            return True
        for task, reader in running.items():
            _interrupt_until_done(reader, task)
        _done, pending = await asyncio.wait(running, timeout=timeout_s)
        if pending:
            _log.warning(
                "embedded store: %d queries still running %gs after their interrupt",
                len(pending),
                timeout_s,
            )
        return not pending

    def _release(self, reader: ReadCursor, done: asyncio.Future[QueryResult]) -> None:
        """Close a finished query's cursor; the outcome of a timed-out query is dropped here."""
        self._queries.pop(done, None)
        reader.close()
        if not done.cancelled():
            done.exception()

    @property
    def queries_in_flight(self) -> int:
        """Read queries whose worker thread has not returned yet."""
        return sum(1 for task in self._queries if not task.done())

    async def query(self, sql: str, timeout_s: float) -> QueryResult:
        """Run a query on its own cursor in a worker thread, interrupting it at the timeout,
        or when the caller is cancelled (a rule removed, the evaluator stopped)."""
        reader = self.database.reader()
        task = asyncio.ensure_future(asyncio.to_thread(reader.query, sql))
        self._queries[task] = reader
        task.add_done_callback(lambda done: self._release(reader, done))
        try:
            result = await asyncio.wait_for(asyncio.shield(task), timeout_s)
        except asyncio.CancelledError:
            _interrupt_until_done(reader, task)
            raise
        except TimeoutError:
            while not task.done():
                reader.interrupt()
                await asyncio.wait({task}, timeout=_INTERRUPT_AGAIN_S)
            self._health.read_up = False
            self._health.last_error = f"query timed out after {timeout_s:g}s"
            raise StoreUnavailableError(self._health.last_error) from None
        except StoreQueryError as error:
            self._health.last_error = str(error)
            raise
        self._health.read_up = True
        return result

    async def write(self, rows: Sequence[MetricRow]) -> None:
        """Insert rows in a worker thread (failed rows are counted and logged by the database)."""
        try:
            await asyncio.to_thread(self.database.insert_rows, rows)
        except StoreQueryError as error:
            self._health.write_up = False
            self._health.last_error = str(error)
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
