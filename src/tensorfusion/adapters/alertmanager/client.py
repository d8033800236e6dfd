"""Alertmanager v2 client (alerting.md §6): every notice goes to every target, retried with backoff.

Each target has its own bounded outbox and sender task, so a slow or stopped replica never
delays the others. Notices are never lost silently: drops are logged and counted.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import aiohttp
import orjson
from prometheus_client import CollectorRegistry, Counter, Gauge

from tensorfusion.adapters.alertmanager.outbox import Outbox, OutboxEntry
from tensorfusion.domain.alerting.alerts import AlertNotice
from tensorfusion.domain.metrics.backoff import Backoff

__all__ = ["AlertmanagerClient", "DeliveryMetrics", "TargetStatus"]

_log = logging.getLogger(__name__)
_BATCH: Final = 500
_RETRY_STATUSES: Final = frozenset({408, 429})
_BODY_LOG_LIMIT: Final = 1024


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
    posted_batches: list[int] = field(default_factory=list, repr=False)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form for status output."""
        return {
            "url": self.url,
            "queued": self.queued,
            "delivered": self.delivered,
            "dropped": self.dropped,
            "consecutiveFailures": self.consecutive_failures,
            "lastError": self.last_error,
            "lastSuccessMs": self.last_success_ms,
        }


class _Target:
    def __init__(self, url: str, capacity: int, backoff: Backoff) -> None:
        self.url = url
        self.outbox = Outbox(capacity)
        self.wake = asyncio.Event()
        self.backoff = backoff
        self.status = TargetStatus(url)
        self.task: asyncio.Task[None] | None = None


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
        backoff_factory: Callable[[], Backoff] = Backoff,
    ) -> None:
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._targets = [_Target(url, capacity, backoff_factory()) for url in urls]
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
                with contextlib.suppress(asyncio.CancelledError):
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
        while True:
            await target.wake.wait()
            target.wake.clear()
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
                    break
                outcome = await self._post(target, batch)
                if outcome == "retry":
                    delay = target.backoff.next_delay()
                    await asyncio.sleep(delay)
                    continue
                target.outbox.acknowledge(batch)
                self._set_queued(target)

    async def _post(self, target: _Target, batch: list[OutboxEntry]) -> str:
        """POST one batch; returns 'ok', 'retry' or 'drop'."""
        assert self._session is not None
        body = orjson.dumps([entry.notice.payload() for entry in batch])
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
