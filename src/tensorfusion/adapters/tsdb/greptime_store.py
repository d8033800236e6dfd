"""The GreptimeDB `MetricsStore`: line-protocol writes over HTTP, MySQL-protocol reads,
table creation, schema check and TTL (metrics.md §6-§8, §10).

Rule queries run on a connection pool of their own, logged in as the optional rule user
(read-only credentials, docs/rule-sandbox.md); the DDL and the schema check run on a second
pool with the writer's credentials.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Final
from urllib.parse import urlencode

from prometheus_client import CollectorRegistry, Counter, Gauge

from tensorfusion.adapters.task_ends import task_end_logger
from tensorfusion.adapters.tsdb.greptime_writer import (
    LineProtocolWriter,
    WriteEndpoint,
    WriterMetrics,
)
from tensorfusion.adapters.tsdb.mysql_reader import MySQLReader, ReaderSettings
from tensorfusion.adapters.tsdb.store import QueryResult, StoreError, StoreHealth, StoreQueryError
from tensorfusion.domain.alerting.read_query import ReadQueryError, check_read_query
from tensorfusion.domain.metrics.conditions import Dialect
from tensorfusion.domain.metrics.retention import parse_ttl
from tensorfusion.domain.metrics.rows import MetricRow
from tensorfusion.domain.metrics.schema import TABLES, greptime_create_table

__all__ = ["GreptimeSettings", "GreptimeStore", "sql_string"]

_log = logging.getLogger(__name__)
_DDL_TIMEOUT_S: Final = 30.0
_SCHEMA_EVERY_S: Final = 600.0
_SCHEMA_RETRY_S: Final = 5.0
_SCHEMA_CONNECTIONS: Final = 2


def sql_string(value: str) -> str:
    """A MySQL-dialect string literal: quotes doubled, backslashes escaped (both dialects)."""
    return "'" + value.replace("\\", "\\\\").replace("'", "''") + "'"


@dataclass(frozen=True, slots=True)
class GreptimeSettings:
    """The `greptime.*` Helm keys (deployment.md §3.3) as the controller receives them."""

    host: str
    port: int = 4002
    http_port: int = 4000
    db: str = "public"
    is_cloud: bool = False
    user: str = ""
    password: str = field(default="", repr=False)
    ttl: str = "30d"
    write_base_url: str | None = None  # override (tests); otherwise derived from host
    rule_user: str = ""
    """The user of rule queries (`greptime.ruleReader.user`); with `rule_password`, else the
    writer's credentials."""
    rule_password: str = field(default="", repr=False)

    def write_url(self) -> str:
        """The line-protocol write URL with `db` and `precision=ms`."""
        if self.write_base_url:
            base = self.write_base_url.rstrip("/")
        elif self.is_cloud:
            base = f"https://{self.host}"
        else:
            base = f"http://{self.host}:{self.http_port}"
        query = urlencode({"db": self.db, "precision": "ms"})
        return f"{base}/v1/influxdb/api/v2/write?{query}"

    def authorization(self) -> str:
        """`token user:password` in cloud mode, else empty."""
        if self.is_cloud and self.user and self.password:
            return f"token {self.user}:{self.password}"
        return ""

    def reader(self) -> ReaderSettings:
        """MySQL settings: TLS in cloud mode; the user and password when both are given
        (a read-only user for the evaluator), else user root without a password."""
        credentials = self.is_cloud or bool(self.user and self.password)
        return ReaderSettings(
            host=self.host,
            port=self.port,
            database=self.db,
            user=self.user if credentials else "root",
            password=self.password if credentials else "",
            tls=self.is_cloud,
        )

    def rule_reader(self) -> ReaderSettings:
        """MySQL settings of rule queries: the rule user and password when both are given,
        else those of `reader()`; TLS in cloud mode either way."""
        settings = self.reader()
        if self.rule_user and self.rule_password:
            return replace(settings, user=self.rule_user, password=self.rule_password)
        return settings

    @property
    def separate_rule_user(self) -> bool:
        """Whether rule queries log in as a user of their own."""
        return bool(self.rule_user and self.rule_password)


class GreptimeStore:
    """GreptimeDB behind the `MetricsStore` interface.

    `reader` runs rule queries only; `schema_reader` runs the DDL and the schema check. A
    test that injects only `reader` gets it for both.
    """

    kind: Final = "greptimedb"
    dialect: Final = Dialect.GREPTIME

    def __init__(
        self,
        settings: GreptimeSettings,
        *,
        registry: CollectorRegistry | None = None,
        reader: MySQLReader | None = None,
        schema_reader: MySQLReader | None = None,
    ) -> None:
        parse_ttl(settings.ttl)
        self.settings = settings
        self._ttl = settings.ttl
        self.reader = reader or MySQLReader(settings.rule_reader())
        self.schema_reader = (
            schema_reader
            or reader
            or MySQLReader(replace(settings.reader(), max_connections=_SCHEMA_CONNECTIONS))
        )
        self.writer = LineProtocolWriter(
            WriteEndpoint(settings.write_url(), settings.authorization()),
            metrics=WriterMetrics(registry),
            on_missing_table=self.create_tables,
        )
        registry = registry if registry is not None else CollectorRegistry()
        self._up = Gauge(
            "tf_metrics_store_connection_up",
            "GreptimeDB reachable (1) or not (0), for reads and writes",
            ["direction"],
            registry=registry,
        )
        self._schema_pass_errors = Counter(
            "tf_metrics_store_schema_pass_errors",
            "Unexpected errors of the table, schema and TTL pass (retried in 5 s)",
            registry=registry,
        )
        self._schema_task: asyncio.Task[None] | None = None
        self._schema_errors: list[str] = []
        self._last_schema_log = 0.0
        self.schema_loop_errors = 0
        self._schema_loop_error = ""

    async def start(self) -> None:
        """Start the writer and the schema loop (tables, check, TTL; retried on outage)."""
        await self.writer.start()
        if self._schema_task is None:
            self._schema_task = asyncio.create_task(self._schema_loop(), name="greptime-schema")
            self._schema_task.add_done_callback(task_end_logger(_log))

    async def close(self) -> None:
        """Stop background work, final flush (5 s budget), close connections."""
        if self._schema_task is not None:
            self._schema_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):  # reported at its end
                await self._schema_task
            self._schema_task = None
        await self.writer.close(flush_timeout_s=5.0)
        await self.reader.close()
        if self.schema_reader is not self.reader:
            await self.schema_reader.close()

    async def query(self, sql: str, timeout_s: float) -> QueryResult:
        """Run a rule query on the rule pool: exactly one SELECT statement (see also the
        read-only rule user)."""
        try:
            check_read_query(sql)
        except ReadQueryError as error:
            raise StoreQueryError(f"{self.reader.target}: the query {error}") from None
        try:
            with contextlib.suppress(StoreError):  # the schema loop retries; reads go on
                if await self.schema_reader.connect():
                    await self._prepare_schema()
            result = await self.reader.query(sql, timeout_s)
        except StoreError:
            self._up.labels("read").set(0)
            raise
        self._up.labels("read").set(1)
        return result

    async def write(self, rows: Sequence[MetricRow]) -> None:
        """Buffer rows for the writer."""
        self.writer.write(rows)
        self._up.labels("write").set(1 if self.writer.up else 0)

    async def apply_ttl(self, ttl: str) -> None:
        """`ALTER TABLE ... SET 'ttl'` on every table; a missing table is created instead."""
        parse_ttl(ttl)
        self._ttl = ttl
        for schema in TABLES:
            try:
                await self.schema_reader.execute(
                    f"ALTER TABLE {schema.name} SET 'ttl' = '{ttl}'", _DDL_TIMEOUT_S
                )
            except StoreError as error:
                text = str(error).lower()
                if "not found" in text or "not exist" in text:
                    await self._create_one(schema.name)
                else:
                    _log.error("TTL of %s not set to %s: %s", schema.name, ttl, error)

    async def create_tables(self) -> None:
        """Create every missing table (also called when a write meets a missing table)."""
        for schema in TABLES:
            await self._create_one(schema.name)

    async def _create_one(self, name: str) -> None:
        schema = next(s for s in TABLES if s.name == name)
        try:
            await self.schema_reader.execute(
                greptime_create_table(schema, self._ttl), _DDL_TIMEOUT_S
            )
        except StoreError as error:
            _log.error("creating table %s failed: %s", name, error)

    async def check_schema(self) -> list[str]:
        """Compare `information_schema.columns` with the spec; returns mismatch messages."""
        names = ", ".join(f"'{schema.name}'" for schema in TABLES)
        result = await self.schema_reader.query(
            "SELECT table_name, column_name, data_type FROM information_schema.columns "
            f"WHERE table_schema = {sql_string(self.settings.db)} AND table_name IN ({names})",
            _DDL_TIMEOUT_S,
        )
        found: dict[str, dict[str, str]] = {}
        for table_name, column_name, data_type in result.rows:
            found.setdefault(str(table_name), {})[str(column_name)] = str(data_type).lower()
        problems: list[str] = []
        for schema in TABLES:
            columns = found.get(schema.name)
            if columns is None:
                continue
            time_type = columns.get(schema.time_column, "")
            if "timestamp" not in time_type:
                problems.append(
                    f"{schema.name}: time index must be {schema.time_column} (a timestamp), "
                    f"found {time_type or 'no such column'}"
                )
            expected = [(tag, "string") for tag in schema.tags] + [
                (name, column_type.greptime.lower()) for name, column_type in schema.fields
            ]
            for column, wanted in expected:
                have = columns.get(column)
                if have is None:
                    try:
                        await self.schema_reader.execute(
                            f"ALTER TABLE {schema.name} ADD COLUMN {column} {wanted.upper()}"
                        )
                    except StoreError as error:
                        problems.append(f"{schema.name}.{column}: missing and not added: {error}")
                elif wanted not in have and not (wanted == "bigint" and have == "int64"):
                    problems.append(
                        f"{schema.name}.{column}: expected {wanted.upper()}, found {have.upper()}"
                    )
        return problems

    async def _prepare_schema(self) -> None:
        await self.create_tables()
        try:
            problems = await self.check_schema()
        except StoreError as error:
            _log.error("schema check failed: %s", error)
            return
        self._schema_errors = problems
        now = time.monotonic()
        if problems and now - self._last_schema_log >= _SCHEMA_EVERY_S:
            self._last_schema_log = now
            _log.error(
                "metrics store schema mismatch (drop the table or use a fresh database): %s",
                "; ".join(problems),
            )

    async def _schema_loop(self) -> None:
        """Tables, schema check and TTL every 10 minutes; any failure is retried in 5 s
        (an unexpected one is also logged with its traceback and counted)."""
        while True:
            try:
                await self.schema_reader.connect()
                await self._prepare_schema()
                await self.apply_ttl(self._ttl)
            except StoreError:
                await asyncio.sleep(_SCHEMA_RETRY_S)
                continue
            except Exception as error:
                self.schema_loop_errors += 1
                self._schema_pass_errors.inc()
                self._schema_loop_error = f"{type(error).__name__}: {error}"
                _log.exception("metrics store schema pass failed unexpectedly; retrying")
                await asyncio.sleep(_SCHEMA_RETRY_S)
                continue
            self._schema_loop_error = ""
            await asyncio.sleep(_SCHEMA_EVERY_S)

    def health(self) -> StoreHealth:
        """Read and write state, last error and schema problems."""
        return StoreHealth(
            "greptimedb",
            self.reader.target,
            read_up=self.reader.up,
            write_up=self.writer.up,
            last_error=self.reader.last_error
            or self.schema_reader.last_error
            or self.writer.last_error,
            detail={
                "schemaProblems": list(self._schema_errors),
                "schemaLoopErrors": self.schema_loop_errors,
                "schemaLoopLastError": self._schema_loop_error,
                "ruleUser": self.settings.separate_rule_user,
            },
        )
