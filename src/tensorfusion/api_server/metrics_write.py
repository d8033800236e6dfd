"""The embedded store's write path on the API port (metrics.md §6.1, §9.3).

`POST /v1/influxdb/api/v2/write?db=public&precision=ms`, InfluxDB line protocol, as node agents
and the controller would send it to GreptimeDB. Served only while the embedded store is the
configured store (the route is absent, so 404, with GreptimeDB); a follower forwards it to the
leader like `/api/*`. The bearer token must belong to one of the writers' ServiceAccounts. The
whole body is parsed before anything is written: a bad line rejects the request and changes
nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Sequence
from typing import Final, Protocol

from aiohttp import web

from tensorfusion.api_server.auth import require_service_account
from tensorfusion.api_server.backend import ApiBackend
from tensorfusion.api_server.responses import ApiError
from tensorfusion.domain.metrics.line_protocol import LineProtocolError, parse_lines
from tensorfusion.domain.metrics.rows import MetricRow

__all__ = [
    "METRICS_WRITE_PATH",
    "METRICS_WRITE_PREFIX",
    "MetricsSink",
    "add_metrics_write_route",
]

_log = logging.getLogger(__name__)

METRICS_WRITE_PATH: Final = "/v1/influxdb/api/v2/write"
METRICS_WRITE_PREFIX: Final = "/v1/influxdb/"
"""Forwarded by a follower to the leader, which owns the embedded store."""
DEFAULT_PRECISION: Final = "ns"
"""InfluxDB's default when `precision` is absent; the writers always send `ms`."""


class MetricsSink(Protocol):
    """Where accepted rows go: the leader's store of the current term."""

    async def accept(self, rows: Sequence[MetricRow]) -> bool:
        """Hand the rows over (buffered and retried by the store); False when no store is open
        yet (the leader is starting its term), nothing taken."""
        ...


def add_metrics_write_route(
    app: web.Application,
    backend: ApiBackend,
    sink: MetricsSink,
    *,
    writers: Collection[str],
    database: str = "public",
) -> None:
    """Add the write path to the API app. `writers`: the usernames (ServiceAccounts) whose
    tokens may write; `database`: the only `db` accepted."""
    described = " or ".join(sorted(writers))

    async def write(request: web.Request) -> web.StreamResponse:
        await require_service_account(request, backend, writers, described)
        db = request.query.get("db", database).strip() or database
        if db != database:
            raise ApiError(
                404, "DatabaseNotFound",
                f"db: unknown database {db!r}; the embedded store has only {database!r}",
            )  # fmt: skip
        precision = request.query.get("precision", DEFAULT_PRECISION).strip() or DEFAULT_PRECISION
        raw = await request.read()
        try:
            body = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ApiError(400, "InvalidLineProtocol", f"the body is not UTF-8: {exc}") from None
        try:
            rows = parse_lines(body, precision=precision)
        except LineProtocolError as exc:
            raise ApiError(400, "InvalidLineProtocol", f"nothing written: {exc}") from None
        if rows and not await sink.accept(rows):
            raise ApiError(
                503, "StoreNotReady",
                "the leader's embedded metrics store is starting; retry",
                {"Retry-After": "5"},
            )  # fmt: skip
        _log.debug("metrics write: %d rows", len(rows))
        return web.Response(status=204)

    app.router.add_post(METRICS_WRITE_PATH, write)
