"""The metrics-store interface shared by the DuckDB and GreptimeDB backends."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from tensorfusion.domain.metrics.conditions import Dialect
from tensorfusion.domain.metrics.rows import MetricRow

__all__ = [
    "MetricsStore",
    "QueryResult",
    "StoreDataError",
    "StoreError",
    "StoreHealth",
    "StoreQueryError",
    "StoreUnavailableError",
]


class StoreError(Exception):
    """A store operation failed."""


class StoreUnavailableError(StoreError):
    """The store cannot be reached (connection refused, timeout, pool exhausted)."""


class StoreQueryError(StoreError):
    """The store answered with an error for this statement."""


class StoreDataError(StoreQueryError):
    """The store refused the rows themselves (a value, a type, a time): sending them again
    cannot succeed, unlike an outage."""


@dataclass(frozen=True, slots=True)
class QueryResult:
    """Column names and decoded rows of one query."""

    columns: tuple[str, ...]
    rows: Sequence[tuple[Any, ...]]

    def mappings(self, limit: int | None = None) -> list[dict[str, Any]]:
        """Rows as column-name mappings (at most `limit`)."""
        rows = self.rows if limit is None else self.rows[:limit]
        return [dict(zip(self.columns, row, strict=True)) for row in rows]


@dataclass(slots=True)
class StoreHealth:
    """Read and write state of a store, for status output and gauges."""

    kind: str
    target: str
    read_up: bool = True
    write_up: bool = True
    last_error: str = ""
    detail: dict[str, Any] = field(default_factory=dict)

    @property
    def up(self) -> bool:
        """True when both reads and writes last succeeded."""
        return self.read_up and self.write_up


@runtime_checkable
class MetricsStore(Protocol):
    """What the evaluator and the recorders need from a metrics store."""

    @property
    def kind(self) -> str:
        """`duckdb` or `greptimedb`."""

    @property
    def dialect(self) -> Dialect:
        """Which `{{ .Conditions }}` form the store needs."""

    async def start(self) -> None:
        """Connect, create missing tables and start background work; never raises on outage."""

    async def close(self) -> None:
        """Flush what can be flushed and release connections."""

    async def query(self, sql: str, timeout_s: float) -> QueryResult:
        """Run one read query; raises StoreError on failure or timeout."""

    async def write(self, rows: Sequence[MetricRow]) -> None:
        """Hand rows to the store (buffered for remote stores; never blocks on an outage)."""

    async def apply_ttl(self, ttl: str) -> None:
        """Apply `metricsTTL` to every table."""

    def health(self) -> StoreHealth:
        """Current read/write state."""
