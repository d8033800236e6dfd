"""The embedded store's write path on the API port (metrics.md §6.1, §9.3).

`POST /v1/influxdb/api/v2/write?db=public&precision=ms`, InfluxDB line protocol, as node agents
and the controller would send it to GreptimeDB. Served only while the embedded store is the
configured store (the route is absent, so 404, with GreptimeDB); a follower forwards it to the
leader like `/api/*`. The bearer token must belong to one of the writers' ServiceAccounts.

The body is parsed and checked off the event loop (at most `WRITE_THREADS` at once, 429 with
`Retry-After` beyond). Each line is checked alone against the `tf_*` schema and the time
window: a bad one is dropped and counted by reason (`tf_metrics_write_rows_dropped`), the
others are written. The answer is 204 when every row was taken, else 400 `RowsDropped` naming
the counts by reason and the first problems, as GreptimeDB and InfluxDB answer a partial write.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections import Counter
from collections.abc import Callable, Collection, Sequence
from typing import Final, Protocol

from prometheus_client import CollectorRegistry
from prometheus_client import Counter as PromCounter

from tensorfusion.api_server.auth import require_service_account
from tensorfusion.api_server.backend import ApiBackend
from tensorfusion.api_server.offload import BoundedOffload
from tensorfusion.api_server.responses import ApiError, json_response
from tensorfusion.domain.metrics.line_protocol import LineProtocolError
from tensorfusion.domain.metrics.row_intake import Intake, take_in_body
from tensorfusion.domain.metrics.rows import MetricRow
from tensorfusion.runtime import web

__all__ = [
    "MAX_EXTRA_TAGS_PER_TABLE",
    "METRICS_WRITE_PATH",
    "METRICS_WRITE_PREFIX",
    "WRITE_THREADS",
    "DroppedRows",
    "ExtraTagNames",
    "MetricsSink",
    "add_metrics_write_route",
]

_log = logging.getLogger(__name__)

METRICS_WRITE_PATH: Final = "/v1/influxdb/api/v2/write"
METRICS_WRITE_PREFIX: Final = "/v1/influxdb/"
"""Forwarded by a follower to the leader, which owns the embedded store."""
DEFAULT_PRECISION: Final = "ns"
"""InfluxDB's default when `precision` is absent; the writers always send `ms`."""
WRITE_THREADS: Final = 2
"""Bodies parsed at once; a write beyond them is answered 429."""
MAX_EXTRA_TAGS_PER_TABLE: Final = 16
"""Distinct extra tag names (`metricsExtraPodLabels`) a "+extra" table takes from writers."""
_DROP_LOG_EVERY_S: Final = 10.0
_TAG_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")


class MetricsSink(Protocol):
    """Where accepted rows go: the leader's store of the current term."""

    async def accept(self, rows: Sequence[MetricRow]) -> bool:
        """Hand the rows over (buffered and retried by the store); False when no store is open
        yet (the leader is starting its term), nothing taken."""
        ...


class ExtraTagNames:
    """The extra tag names admitted per table: the first `limit` names seen (letters, digits,
    underscores, at most 63), for the life of the process. Thread-safe."""

    def __init__(self, limit: int = MAX_EXTRA_TAGS_PER_TABLE) -> None:
        self.limit = limit
        self._names: dict[str, set[str]] = {}
        self._lock = threading.Lock()

    def __call__(self, table: str, name: str) -> bool:
        """Whether an extra tag `name` may be written to `table` (admitting it if new)."""
        with self._lock:
            names = self._names.setdefault(table, set())
            if name in names:
                return True
            if len(names) >= self.limit or _TAG_NAME.fullmatch(name) is None:
                return False
            names.add(name)
            return True


class DroppedRows:
    """`tf_metrics_write_rows_dropped` in `registry`: counts dropped rows and logs them at
    most every `_DROP_LOG_EVERY_S`, aggregated."""

    def __init__(self, registry: CollectorRegistry | None) -> None:
        self.counter = PromCounter(
            "tf_metrics_write_rows_dropped",
            "Rows of the embedded store's write path dropped, by table and reason",
            ["table", "reason"],
            registry=registry if registry is not None else CollectorRegistry(),
        )
        self._pending: Counter[str] = Counter()
        self._last_log = float("-inf")

    def record(self, intake: Intake, writer: str) -> None:
        for (table, reason), count in intake.dropped_by_table.items():
            self.counter.labels(table, reason).inc(count)
        self._pending.update(intake.dropped)
        now = time.monotonic()
        if now - self._last_log < _DROP_LOG_EVERY_S:
            return
        self._last_log = now
        reasons = ", ".join(f"{reason}: {n}" for reason, n in sorted(self._pending.items()))
        _log.warning(
            "metrics write path: dropped %d rows (%s) since the last report; latest from %s: %s",
            sum(self._pending.values()),
            reasons,
            writer,
            "; ".join(intake.examples),
        )
        self._pending.clear()


def _partial_write(intake: Intake) -> web.Response:
    written = len(intake.rows)
    message = f"{intake.summary()}; the other {written} rows were written"
    return json_response(
        {
            "error": {"code": "RowsDropped", "message": message},
            "written": written,
            "dropped": dict(intake.dropped),
        },
        status=400,
    )


def add_metrics_write_route(
    app: web.Application,
    backend: ApiBackend,
    sink: MetricsSink,
    *,
    writers: Collection[str],
    database: str = "public",
    dropped: DroppedRows | None = None,
    offload: BoundedOffload | None = None,
    clock: Callable[[], float] = time.time,
) -> None:
    """Add the write path to the API app. `writers`: the usernames (ServiceAccounts) whose
    tokens may write; `database`: the only `db` accepted; `dropped` counts the rows dropped
    (one per registry, shared by every app that serves the path);
    `offload` parses bodies (default: `WRITE_THREADS` threads, closed with the app); `clock`
    is the receiver's time in seconds (the time window, lines without a time)."""
    described = " or ".join(sorted(writers))
    work = offload or BoundedOffload(name="metrics-write", limit=WRITE_THREADS)
    if offload is None:

        async def close_work(_: web.Application) -> None:
            work.close()

        app.on_cleanup.append(close_work)
    extra_tags = ExtraTagNames()
    drops = dropped or DroppedRows(None)

    def take_in(raw: bytes, precision: str, now_ms: int) -> Intake:
        try:
            body = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ApiError(400, "InvalidLineProtocol", f"the body is not UTF-8: {exc}") from None
        try:
            return take_in_body(body, precision=precision, now_ms=now_ms, extra_tag_ok=extra_tags)
        except LineProtocolError as exc:
            raise ApiError(400, "InvalidLineProtocol", f"nothing written: {exc}") from None

    async def write(request: web.Request) -> web.StreamResponse:
        who = await require_service_account(request, backend, writers, described)
        db = request.query.get("db", database).strip() or database
        if db != database:
            raise ApiError(
                404, "DatabaseNotFound",
                f"db: unknown database {db!r}; the embedded store has only {database!r}",
            )  # fmt: skip
        precision = request.query.get("precision", DEFAULT_PRECISION).strip() or DEFAULT_PRECISION
        work.refuse_if_full()
        raw = await request.read()
        now_ms = int(clock() * 1000)
        intake = await work.run(lambda: take_in(raw, precision, now_ms))
        if intake.rows and not await sink.accept(intake.rows):
            raise ApiError(
                503, "StoreNotReady",
                "the leader's embedded metrics store is starting; retry",
                {"Retry-After": "5"},
            )  # fmt: skip
        _log.debug("metrics write: %d rows", len(intake.rows))
        if intake.dropped:
            drops.record(intake, who)
            return _partial_write(intake)
        return web.Response(status=204)

    app.router.add_post(METRICS_WRITE_PATH, write)
