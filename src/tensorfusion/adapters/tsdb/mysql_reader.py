"""Reads over the MySQL wire protocol with aiomysql (metrics.md §7).

Plain text queries only, a pool of at most 4 connections, UTC sessions, per-query timeouts,
reconnects with backoff 1 s -> 60 s, and values decoded before anyone sees them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import time
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any, Final

import aiomysql

from tensorfusion.adapters.tsdb.store import (
    QueryResult,
    StoreQueryError,
    StoreUnavailableError,
)
from tensorfusion.domain.backoff import Backoff, RetryDelays

__all__ = ["MySQLReader", "ReaderSettings", "decode_value"]

_log = logging.getLogger(__name__)
_IDLE_PING_S: Final = 30.0


@dataclass(frozen=True, slots=True)
class ReaderSettings:
    """Connection settings; credentials are sent only when both user and password are set
    (the password never appears in a repr)."""

    host: str
    port: int = 4002
    database: str = "public"
    user: str = "root"
    password: str = field(default="", repr=False)
    tls: bool = False
    connect_timeout_s: float = 5.0
    max_connections: int = 4


def decode_value(value: Any) -> Any:
    """Driver values to plain Python: text, int, float, Decimal, UTC datetime or None."""
    if value is None or isinstance(value, bool | int | float | str | Decimal):
        return value
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).decode("utf-8", errors="replace")
    if isinstance(value, datetime):
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    if isinstance(value, date):
        return datetime(value.year, value.month, value.day, tzinfo=UTC)
    if isinstance(value, timedelta):
        return value.total_seconds()
    return str(value)


class MySQLReader:
    """A small pool of aiomysql connections with reconnect backoff."""

    def __init__(self, settings: ReaderSettings) -> None:
        self.settings = settings
        self._pool: aiomysql.Pool | None = None
        self._backoff = RetryDelays(Backoff(initial=1.0, maximum=60.0, jitter=0.2))
        self._next_attempt = 0.0
        self._last_used: dict[int, float] = {}
        self._lock = asyncio.Lock()
        self.up = False
        self.last_error = ""
        self.connects = 0

    @property
    def target(self) -> str:
        """host:port/database."""
        return f"{self.settings.host}:{self.settings.port}/{self.settings.database}"

    async def _ensure_pool(self) -> tuple[aiomysql.Pool, bool]:
        """The pool, creating it if needed; the flag says whether it was just (re)created."""
        async with self._lock:
            if self._pool is not None:
                return self._pool, False
            now = time.monotonic()
            if now < self._next_attempt:
                raise StoreUnavailableError(
                    f"{self.target}: unreachable ({self.last_error}); next attempt in "
                    f"{self._next_attempt - now:.1f}s"
                )
            settings = self.settings
            credentials: dict[str, Any] = {"user": settings.user or "root"}
            if settings.user and settings.password:
                credentials["password"] = settings.password
            tls: ssl.SSLContext | None = ssl.create_default_context() if settings.tls else None
            try:
                self._pool = await aiomysql.create_pool(
                    host=settings.host,
                    port=settings.port,
                    db=settings.database,
                    charset="utf8mb4",
                    init_command="SET time_zone = '+00:00'",
                    connect_timeout=settings.connect_timeout_s,
                    minsize=0,
                    maxsize=settings.max_connections,
                    autocommit=True,
                    ssl=tls,
                    **credentials,
                )
            except Exception as error:  # any connect failure: back off, never raise upward raw
                delay = self._backoff.next_delay()
                self._next_attempt = time.monotonic() + delay
                self._mark_down(f"connect failed: {error}")
                raise StoreUnavailableError(f"{self.target}: {self.last_error}") from None
            self._backoff.reset()
            self.connects += 1
            _log.info(
                "connected to metrics store %s:%s database %s",
                settings.host,
                settings.port,
                settings.database,
            )
            return self._pool, True

    def _mark_down(self, message: str) -> None:
        if self.up or message != self.last_error:
            _log.error("metrics store %s: %s", self.target, message)
        self.up = False
        self.last_error = message

    async def connect(self) -> bool:
        """Make sure a pool exists; True when it was just (re)created."""
        _, fresh = await self._ensure_pool()
        return fresh

    async def query(self, sql: str, timeout_s: float) -> QueryResult:
        """Run one text query with a timeout; decode every value."""
        pool, _ = await self._ensure_pool()
        try:
            return await asyncio.wait_for(self._run(pool, sql), timeout_s)
        except TimeoutError:
            self._mark_down(f"query timed out after {timeout_s:g}s")
            raise StoreUnavailableError(f"{self.target}: {self.last_error}") from None

    async def execute(self, sql: str, timeout_s: float = 30.0) -> None:
        """Run a statement (DDL) with the DDL timeout."""
        await self.query(sql, timeout_s)

    async def _run(self, pool: aiomysql.Pool, sql: str) -> QueryResult:
        try:
            connection = await pool.acquire()
        except Exception as error:
            await self._drop_pool(f"connection failed: {error}")
            raise StoreUnavailableError(f"{self.target}: {self.last_error}") from None
        healthy = True
        try:
            key = id(connection)
            if time.monotonic() - self._last_used.get(key, time.monotonic()) > _IDLE_PING_S:
                await connection.ping(reconnect=False)
            async with connection.cursor() as cursor:
                await cursor.execute(sql)
                description = cursor.description or ()
                rows = await cursor.fetchall() if description else ()
            self._last_used[key] = time.monotonic()
        except (aiomysql.OperationalError, aiomysql.InterfaceError, OSError) as error:
            healthy = False
            code = error.args[0] if error.args and isinstance(error.args[0], int) else 0
            if code and not 2000 <= code < 3000 and isinstance(error, aiomysql.OperationalError):
                # A server error code (not a 2xxx client error): the statement is at fault.
                healthy = True
                raise StoreQueryError(f"{self.target}: {error}") from None
            await self._drop_pool(f"connection lost: {error}")
            raise StoreUnavailableError(f"{self.target}: {self.last_error}") from None
        except aiomysql.Error as error:
            raise StoreQueryError(f"{self.target}: {error}") from None
        except asyncio.CancelledError:
            healthy = False
            raise
        finally:
            if healthy:
                pool.release(connection)
            else:
                connection.close()
                pool.release(connection)
        self.up = True
        self.last_error = ""
        columns = tuple(str(column[0]) for column in description)
        decoded = [tuple(decode_value(value) for value in row) for row in rows]
        return QueryResult(columns, decoded)

    async def _drop_pool(self, message: str) -> None:
        self._mark_down(message)
        async with self._lock:
            pool, self._pool = self._pool, None
            self._next_attempt = time.monotonic() + self._backoff.next_delay()
        if pool is not None:
            pool.close()
            with contextlib.suppress(Exception):  # closing a broken pool is best effort
                await asyncio.wait_for(pool.wait_closed(), 1.0)

    async def close(self) -> None:
        """Close every connection."""
        async with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.close()
            await pool.wait_closed()
