"""Alertmanager v2 client (alerting.md §6): every notice goes to every target, retried with backoff.

Each target has its own bounded outbox and sender task, so a slow or stopped replica never
delays the others. Notices are never lost silently: drops are logged and counted. A notice
that cannot be encoded as JSON is dropped alone (counted); an unexpected error in a sender is
logged, counted and retried with backoff, and a sender that ends anyway is reported.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import aiohttp
import orjson
from prometheus_client import CollectorRegistry, Counter, Gauge

from tensorfusion.adapters.alertmanager.outbox import Outbox, OutboxEntry
from tensorfusion.adapters.task_ends import log_task_end
from tensorfusion.domain.alerting.alerts import AlertNotice
from tensorfusion.domain.backoff import Backoff, RetryDelays

__all__ = ["DELIVERY_BACKOFF", "AlertmanagerClient", "DeliveryMetrics", "TargetStatus"]

_log = logging.getLogger(__name__)
_BATCH: Final = 500
_RETRY_STATUSES: Final = frozenset({408, 429})
_BODY_LOG_LIMIT: Final = 1024
DELIVERY_BACKOFF: Final = Backoff(initial=1.0, maximum=30.0, jitter=0.2)
"""The wait between failed deliveries to one Alertmanager (alerting.md §6.5)."""


class DeliveryMetrics:
    """Prometheus series of delivery: notifications sent / failed / dropped, outbox length."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        registry = registry if registry is not None else CollectorRegistry()
        self.notifications = Counter(
            "tf_alert_notifications",
            "Alert notifications by target and result (sent, failed, dropped)",
            ["target", "result"],
            registry=registry,
        )
        self.outbox_length = Gauge(
            "tf_alert_outbox_length",
            "Queued notices per Alertmanager target",
            ["target"],
            registry=registry,
        )
        self.unencodable = Counter(
            "tf_alert_notices_unencodable",
            "Notices dropped because they cannot be encoded as JSON (also counted as dropped)",
            ["target"],
            registry=registry,
        )
        self.sender_errors = Counter(
            "tf_alert_sender_errors",
            "Unexpected errors in an Alertmanager sender (it backs off and keeps running)",
            ["target"],
            registry=registry,
        )


@dataclass(slots=True)
class TargetStatus:
    """Delivery state of one Alertmanager target."""

    url: str
    queued: int = 0
    delivered: int = 0
    dropped: int = 0
    consecutive_failures: int = 0
    last_error: str = ""
    last_success_ms: int | None = None
    unencodable: int = 0
    sender_errors: int = 0
    sender_running: bool = False
    posted_batches: list[int] = field(default_factory=list, repr=False)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form for status output."""
        return {
            "url": self.url,
            "queued": self.queued,
            "delivered": self.delivered,
            "dropped": self.dropped,
            "unencodable": self.unencodable,
            "consecutiveFailures": self.consecutive_failures,
            "senderErrors": self.sender_errors,
            "senderRunning": self.sender_running,
            "lastError": self.last_error,
            "lastSuccessMs": self.last_success_ms,
        }


class _Target:
    def __init__(self, url: str, capacity: int, backoff: Backoff) -> None:
        self.url = url
        self.outbox = Outbox(capacity)
        self.wake = asyncio.Event()
        self.backoff = RetryDelays(backoff)
        self.status = TargetStatus(url)
        self.task: asyncio.Task[None] | None = None


def _sender_ended(target: _Target, task: asyncio.Task[None]) -> None:
    """Log and record a sender that ended other than by cancellation (it should never)."""
    target.status.sender_running = False
    if task.cancelled():
        return
    error = log_task_end(task, _log, f"alertmanager {target.url}: sender")
    target.status.last_error = f"sender stopped: {error!r}" if error else "sender stopped"


class AlertmanagerClient:
    """Posts alert notices to one or more Alertmanager `/api/v2/alerts` URLs."""

    def __init__(
        self,
        urls: Sequence[str],
        *,
        timeout_s: float = 10.0,
        capacity: int = 10_000,
        metrics: DeliveryMetrics | None = None,
        clock_ms: Callable[[], int] | None = None,
        backoff: Backoff = DELIVERY_BACKOFF,
    ) -> None:
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._targets = [_Target(url, capacity, backoff) for url in urls]
        self._metrics = metrics or DeliveryMetrics()
        self._clock_ms = clock_ms or (lambda: int(time.time() * 1000))
        self._session: aiohttp.ClientSession | None = None

    @property
    def urls(self) -> list[str]:
        """The alert URLs, one per target."""
        return [target.url for target in self._targets]

    async def start(self) -> None:
        """Open the HTTP session and start one sender per target."""
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=self._timeout)
        for target in self._targets:
            if target.task is None:
                target.task = asyncio.create_task(self._sender(target), name=f"am:{target.url}")
                target.status.sender_running = True
                target.task.add_done_callback(functools.partial(_sender_ended, target))

    def submit(self, notices: Sequence[AlertNotice]) -> None:
        """Queue notices for every target (never blocks; evictions are counted and logged)."""
        if not notices:
            return
        now_ms = self._clock_ms()
        for target in self._targets:
            evicted = 0
            for notice in notices:
                evicted += target.outbox.put(notice, now_ms)
            if evicted:
                target.status.dropped += evicted
                self._metrics.notifications.labels(target.url, "dropped").inc(evicted)
                _log.warning(
                    "alertmanager %s: outbox full, evicted %d oldest notices", target.url, evicted
                )
            self._set_queued(target)
            target.wake.set()

    async def flush(self, timeout_s: float) -> bool:
        """Wait until every outbox is empty or the timeout passes; True when all were drained."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if all(len(target.outbox) == 0 for target in self._targets):
                return True
            await asyncio.sleep(0.05)
        return all(len(target.outbox) == 0 for target in self._targets)

    async def stop(self, flush_timeout_s: float = 0.0) -> None:
        """Optionally try to drain, then stop the senders and close the session."""
        if flush_timeout_s > 0:
            await self.flush(flush_timeout_s)
        for target in self._targets:
            if target.task is not None:
                target.task.cancel()
        for target in self._targets:
            if target.task is not None:
                # A sender that ended by an exception was reported by `_sender_ended`.
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await target.task
                target.task = None
        if self._session is not None:
            await self._session.close()
            self._session = None

    def status(self) -> list[dict[str, Any]]:
        """Delivery state of every target."""
        return [target.status.as_dict() for target in self._targets]

    def queued(self) -> int:
        """Total notices waiting in all outboxes."""
        return sum(len(target.outbox) for target in self._targets)

    def _set_queued(self, target: _Target) -> None:
        target.status.queued = len(target.outbox)
        self._metrics.outbox_length.labels(target.url).set(len(target.outbox))

    async def _sender(self, target: _Target) -> None:
        """Drain the outbox whenever woken; survives any error (logged, counted, backoff)."""
        while True:
            await target.wake.wait()
            target.wake.clear()
            try:
                await self._drain(target)
            except Exception as error:
                target.status.sender_errors += 1
                target.status.last_error = f"sender error: {type(error).__name__}: {error}"
                self._metrics.sender_errors.labels(target.url).inc()
                delay = target.backoff.next_delay()
                _log.exception(
                    "alertmanager %s: unexpected sender error; retrying in %.1fs",
                    target.url,
                    delay,
                )
                await asyncio.sleep(delay)
                target.wake.set()

    async def _drain(self, target: _Target) -> None:
        while True:
            expired = target.outbox.expire(self._clock_ms())
            if expired:
                target.status.dropped += expired
                self._metrics.notifications.labels(target.url, "dropped").inc(expired)
                _log.warning(
                    "alertmanager %s: %d queued notices expired undelivered",
                    target.url,
                    expired,
                )
            batch = target.outbox.peek_batch(_BATCH)
            if not batch:
                self._set_queued(target)
                return
            batch, body = self._encode(target, batch)
            if not batch:
                continue
            outcome = await self._post(target, batch, body)
            if outcome == "retry":
                delay = target.backoff.next_delay()
                await asyncio.sleep(delay)
                continue
            target.outbox.acknowledge(batch)
            self._set_queued(target)

    def _encode(self, target: _Target, batch: list[OutboxEntry]) -> tuple[list[OutboxEntry], bytes]:
        """The entries that encode and their JSON array; the others (e.g. a lone surrogate in
        a text) leave the outbox at once, logged and counted, never retried."""
        kept: list[OutboxEntry] = []
        parts: list[bytes] = []
        for entry in batch:
            try:
                parts.append(orjson.dumps(entry.notice.payload()))
            except (TypeError, ValueError) as error:
                target.outbox.acknowledge([entry])
                target.status.dropped += 1
                target.status.unencodable += 1
                self._metrics.notifications.labels(target.url, "dropped").inc()
                self._metrics.unencodable.labels(target.url).inc()
                _log.error(
                    "alertmanager %s: notice %s %s dropped, it cannot be encoded as JSON: %s",
                    target.url,
                    entry.notice.fingerprint,
                    ascii(dict(entry.notice.labels)),
                    error,
                )
                continue
            kept.append(entry)
        if len(kept) < len(batch):
            self._set_queued(target)
        return kept, b"[" + b",".join(parts) + b"]"

    async def _post(self, target: _Target, batch: list[OutboxEntry], body: bytes) -> str:
        """POST one encoded batch; returns 'ok', 'retry' or 'drop'."""
        assert self._session is not None
        try:
            async with self._session.post(
                target.url, data=body, headers={"Content-Type": "application/json"}
            ) as response:
                status = response.status
                if 200 <= status < 300:
                    target.backoff.reset()
                    target.status.delivered += len(batch)
                    target.status.consecutive_failures = 0
                    target.status.last_error = ""
                    target.status.last_success_ms = self._clock_ms()
                    target.status.posted_batches.append(len(batch))
                    del target.status.posted_batches[:-100]
                    self._metrics.notifications.labels(target.url, "sent").inc(len(batch))
                    return "ok"
                text = (await response.text(errors="replace"))[:_BODY_LOG_LIMIT]
        except (aiohttp.ClientError, TimeoutError, OSError) as error:
            return self._failed(target, batch, f"{type(error).__name__}: {error}")
        if status in _RETRY_STATUSES or status >= 500:
            return self._failed(target, batch, f"HTTP {status}: {text}")
        target.status.dropped += len(batch)
        target.status.last_error = f"HTTP {status}: {text}"
        self._metrics.notifications.labels(target.url, "dropped").inc(len(batch))
        _log.error(
            "alertmanager %s rejected %d alerts with HTTP %d (dropped): %s",
            target.url,
            len(batch),
            status,
            text,
        )
        return "drop"

    def _failed(self, target: _Target, batch: list[OutboxEntry], message: str) -> str:
        target.status.consecutive_failures += 1
        target.status.last_error = message
        self._metrics.notifications.labels(target.url, "failed").inc(len(batch))
        if target.status.consecutive_failures == 1 or target.status.consecutive_failures % 10 == 0:
            _log.warning(
                "alertmanager %s: delivery of %d alerts failed (attempt %d, will retry): %s",
                target.url,
                len(batch),
                target.status.consecutive_failures,
                message,
            )
        return "retry"
