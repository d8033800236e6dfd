"""The extender's HTTP site: `POST /scheduler/{filter,prioritize,bind}` (scheduling.md §15).

Always HTTP 200 with the JSON kube-scheduler reads: a body that does not decode, or that is not
the message of its verb, is answered with `Error` naming the field (prioritize, which has no
`Error`, answers 400: kube-scheduler treats it as a failed call and retries the pod). Each call
is timed and counted in `tf_extender_*` metrics.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, Final

import orjson
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from tensorfusion.domain.scheduling.extender_protocol import (
    ExtenderArgs,
    ExtenderBindingArgs,
    ExtenderBindingResult,
    ExtenderFilterResult,
    ExtenderProtocolError,
)
from tensorfusion.extender.scheduling import Extender
from tensorfusion.runtime import web
from tensorfusion.runtime.event_queue import EventQueue

__all__ = ["EXTENDER_PREFIX", "ExtenderMetrics", "create_extender_app"]

_log = logging.getLogger(__name__)

EXTENDER_PREFIX: Final = "/scheduler"
MAX_BODY: Final = 64 * 1024 * 1024
"""kube-scheduler sends whole Pods and, without nodeCacheCapable, whole NodeLists."""
_BUCKETS: Final = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5)


class ExtenderMetrics:
    """Latency of each verb and the results of filter and bind."""

    def __init__(self, registry: CollectorRegistry | None) -> None:
        self.seconds = Histogram(
            "tf_extender_request_seconds", "Time to answer an extender call, by verb",
            ["verb"], buckets=_BUCKETS, registry=registry,
        )  # fmt: skip
        self.errors = Counter(
            "tf_extender_bad_requests_total",
            "Extender calls whose body could not be read, by verb",
            ["verb"], registry=registry,
        )  # fmt: skip
        self.events_pending = Gauge(
            "tf_extender_events_pending", "Events of binds and filters waiting to be written",
            registry=registry,
        )  # fmt: skip
        self.events_dropped = Gauge(
            "tf_extender_events_dropped",
            "Events of binds and filters dropped since the leader started (queue full, or "
            "leadership lost)", registry=registry,
        )  # fmt: skip

    def watch_events(self, queue: EventQueue) -> None:
        """Read the Event queue's figures at each scrape."""
        self.events_pending.set_function(lambda: queue.pending)
        self.events_dropped.set_function(lambda: queue.dropped)


def _json(body: Any) -> web.Response:
    return web.Response(body=orjson.dumps(body), content_type="application/json")


async def _decode(request: web.Request) -> object:
    raw = await request.read()
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as error:
        raise ExtenderProtocolError("body", "a JSON document", raw[:80].decode(errors="replace"),
                                    str(error)) from None  # fmt: skip


def create_extender_app(extender: Extender, metrics: ExtenderMetrics) -> web.Application:
    """The aiohttp application of the three verbs."""
    app = web.Application(client_max_size=MAX_BODY)

    def timed(
        verb: str, handler: Callable[[web.Request], Awaitable[web.Response]]
    ) -> Callable[[web.Request], Awaitable[web.Response]]:
        async def run(request: web.Request) -> web.Response:
            started = time.perf_counter()
            try:
                return await handler(request)
            finally:
                metrics.seconds.labels(verb).observe(time.perf_counter() - started)

        return run

    async def filter_(request: web.Request) -> web.Response:
        try:
            args = ExtenderArgs.from_json(await _decode(request))
        except ExtenderProtocolError as error:
            metrics.errors.labels("filter").inc()
            _log.warning("filter: %s", error)
            return _json(ExtenderFilterResult.error(str(error)).to_json())
        return _json((await extender.filter(args)).to_json())

    async def prioritize(request: web.Request) -> web.Response:
        try:
            args = ExtenderArgs.from_json(await _decode(request))
        except ExtenderProtocolError as error:
            metrics.errors.labels("prioritize").inc()
            _log.warning("prioritize: %s", error)
            return web.Response(status=400, text=str(error))
        return _json((await extender.prioritize(args)).to_json())

    async def bind(request: web.Request) -> web.Response:
        try:
            args = ExtenderBindingArgs.from_json(await _decode(request))
        except ExtenderProtocolError as error:
            metrics.errors.labels("bind").inc()
            _log.warning("bind: %s", error)
            return _json(ExtenderBindingResult.error(str(error)).to_json())
        return _json((await extender.bind(args)).to_json())

    app.router.add_post(f"{EXTENDER_PREFIX}/filter", timed("filter", filter_))
    app.router.add_post(f"{EXTENDER_PREFIX}/prioritize", timed("prioritize", prioritize))
    app.router.add_post(f"{EXTENDER_PREFIX}/bind", timed("bind", bind))
    return app
