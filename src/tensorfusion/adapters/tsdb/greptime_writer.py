"""Line-protocol writes to GreptimeDB over HTTP (metrics.md §6.1, §6.3).

Rows are checked against the schema (`check_row`: table, columns, types, time window; a bad
row is dropped alone and counted by reason), encoded at once and buffered; one sender posts
batches in order, at most one request in flight, retrying connection errors, timeouts, 408,
429, 5xx and "table not found" with backoff. A 400 `RowsDropped` of the embedded store's write
path counts the rows it dropped by reason, the rest as written; other 4xx drop the batch with a
log line and a counter.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import time
from collections import Counter as Tally
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Final

import aiohttp
import orjson
from prometheus_client import CollectorRegistry, Counter, Gauge

from tensorfusion.adapters.task_ends import task_end_logger
from tensorfusion.adapters.tsdb.write_buffer import BufferedLine, WriteBuffer
from tensorfusion.domain.backoff import Backoff, RetryDelays
from tensorfusion.domain.metrics.line_protocol import UnencodableError, encode_row
from tensorfusion.domain.metrics.row_check import DropReason, RowProblem, check_row
from tensorfusion.domain.metrics.rows import MetricRow

__all__ = ["LineProtocolWriter", "WriteEndpoint", "WriterMetrics", "is_missing_table_error"]

_log = logging.getLogger(__name__)
_BATCH_ROWS: Final = 5000
_BATCH_BYTES: Final = 1024 * 1024
_BATCH_AGE_S: Final = 5.0
_BODY_LOG_LIMIT: Final = 1024
_DROP_LOG_EVERY_S: Final = 60.0


def is_missing_table_error(status: int, body: str) -> bool:
    """True for a 4xx whose body says a table does not exist."""
    text = body.lower()
    return 400 <= status < 500 and "table" in text and ("not found" in text or "not exist" in text)


def _partial_write(status: int, body: str) -> tuple[int, dict[str, int]] | None:
    """(rows written, rows dropped by reason) of a 400 `RowsDropped` answer, else None."""
    if status != 400 or "RowsDropped" not in body:
        return None
    try:
        answer = orjson.loads(body)
        written, dropped = answer["written"], answer["dropped"]
    except (orjson.JSONDecodeError, KeyError, TypeError):
        return None
    if not isinstance(written, int) or not isinstance(dropped, dict):
        return None
    counts = {str(k)[:40]: v for k, v in dropped.items() if isinstance(v, int) and v > 0}
    return written, dict(list(counts.items())[:10])


@dataclass(frozen=True, slots=True)
class WriteEndpoint:
    """Where and how to POST line protocol."""

    url: str
    authorization: str = field(default="", repr=False)
    ssl_context: ssl.SSLContext | None = field(default=None, repr=False)
    """The CA to verify an HTTPS endpoint with (None: the system's)."""


class WriterMetrics:
    """Writer self-metrics (metrics.md §6.3): written, dropped, errors, buffer, last write."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        registry = registry if registry is not None else CollectorRegistry()
        self.rows_written = Counter(
            "tf_metrics_rows_written", "Rows accepted by the store", registry=registry
        )
        self.rows_dropped = Counter(
            "tf_metrics_rows_dropped",
            "Rows dropped, by table and reason (buffer_full, rejected, unencodable, and the "
            "reasons of metrics.md §9.3: unknown_table, unknown_column, wrong_type, ...)",
            ["table", "reason"],
            registry=registry,
        )
        self.write_errors = Counter(
            "tf_metrics_write_errors", "Failed write requests", registry=registry
        )
        self.buffer_rows = Gauge(
            "tf_metrics_buffer_rows", "Rows waiting in the write buffer", registry=registry
        )
        self.last_success = Gauge(
            "tf_metrics_last_write_timestamp_seconds",
            "Unix time of the last successful write",
            registry=registry,
        )


class LineProtocolWriter:
    """Buffers rows and sends them to one line-protocol endpoint."""

    def __init__(
        self,
        endpoint: WriteEndpoint,
        *,
        metrics: WriterMetrics | None = None,
        buffer: WriteBuffer | None = None,
        timeout_s: float = 10.0,
        batch_age_s: float = _BATCH_AGE_S,
        backoff: Backoff | None = None,
        on_missing_table: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self.endpoint = endpoint
        self.metrics = metrics or WriterMetrics()
        self.buffer = buffer or WriteBuffer()
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._batch_age_s = batch_age_s
        self._backoff = RetryDelays(backoff or Backoff(initial=1.0, maximum=30.0, jitter=0.2))
        self._on_missing_table = on_missing_table
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._session: aiohttp.ClientSession | None = None
        self._skipped_logged: set[tuple[str, str]] = set()
        self._pending_drops: Tally[str] = Tally()
        self._last_drop_log = 0.0
        self._pending_invalid: Tally[str] = Tally()
        self._last_invalid_log = float("-inf")
        self.up = True
        self.last_error = ""
        self.requests = 0

    async def start(self) -> None:
        """Start the sender."""
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=self._timeout)
        if self._task is None:
            self._task = asyncio.create_task(self._sender(), name="metrics-writer")
            self._task.add_done_callback(task_end_logger(_log))

    def write(self, rows: Sequence[MetricRow]) -> None:
        """Encode and buffer rows (never blocks; drops are counted and logged)."""
        skipped: set[tuple[str, str]] = set()
        now_s = time.monotonic()
        dropped: Tally[str] = Tally()
        for original in rows:
            row = check_row(original, now_ms=None)  # writers may run on a simulated clock
            if isinstance(row, RowProblem):
                self._record_invalid(original.table, row)
                continue
            try:
                line = encode_row(row, skipped)
            except (TypeError, UnencodableError) as error:
                self.metrics.rows_dropped.labels(row.table, "unencodable").inc()
                _log.error("metrics row dropped: %s", error)
                continue
            if line is not None:
                dropped.update(self.buffer.add(row.table, line, now_s))
        for table, column in skipped - self._skipped_logged:
            self._skipped_logged.add((table, column))
            _log.warning("metrics: NaN or infinite values of %s.%s are not written", table, column)
        if dropped:
            self._record_drops(dropped)
        self.metrics.buffer_rows.set(len(self.buffer))
        if len(self.buffer) >= _BATCH_ROWS or self.buffer.bytes >= _BATCH_BYTES or len(self.buffer):
            self._wake.set()

    def _record_invalid(self, table: str, problem: RowProblem) -> None:
        """Count a row that does not fit the schema; log at most every minute, aggregated."""
        label = "" if problem.reason is DropReason.UNKNOWN_TABLE else table
        self.metrics.rows_dropped.labels(label, problem.reason.value).inc()
        self._pending_invalid[problem.reason.value] += 1
        now = time.monotonic()
        if now - self._last_invalid_log >= _DROP_LOG_EVERY_S:
            self._last_invalid_log = now
            _log.error(
                "metrics rows dropped, not written (%s); latest: %s",
                dict(self._pending_invalid),
                problem.message,
            )
            self._pending_invalid.clear()

    def _record_drops(self, dropped: Tally[str]) -> None:
        for table, count in dropped.items():
            self.metrics.rows_dropped.labels(table, "buffer_full").inc(count)
        self._pending_drops.update(dropped)
        now = time.monotonic()
        if now - self._last_drop_log >= _DROP_LOG_EVERY_S:
            self._last_drop_log = now
            _log.error(
                "metrics write buffer full (%d rows / %d bytes): dropped oldest rows %s",
                self.buffer.max_rows,
                self.buffer.max_bytes,
                dict(self._pending_drops),
            )
            self._pending_drops.clear()

    async def flush(self, timeout_s: float) -> bool:
        """Try to send everything buffered within the time budget; True when empty."""
        deadline = time.monotonic() + timeout_s
        while len(self.buffer) and time.monotonic() < deadline:
            batch = self.buffer.peek_batch(_BATCH_ROWS, _BATCH_BYTES)
            remaining = deadline - time.monotonic()
            try:
                outcome = await asyncio.wait_for(self._post(batch), max(remaining, 0.001))
            except TimeoutError:
                break
            if outcome == "retry":
                break
            self.buffer.acknowledge(batch)
        return len(self.buffer) == 0

    async def close(self, flush_timeout_s: float = 5.0) -> None:
        """Stop the sender, then one final flush within the budget."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):  # reported at its end
                await self._task
            self._task = None
        if self._session is not None:
            if len(self.buffer):
                await self.flush(flush_timeout_s)
            await self._session.close()
            self._session = None

    async def _sender(self) -> None:
        """Send batches as they become due; an unexpected error is logged, counted in
        `tf_metrics_write_errors` and retried with backoff, never ending the sender."""
        while True:
            try:
                await self._send_due()
            except Exception as error:
                self.up = False
                self.last_error = f"writer error: {type(error).__name__}: {error}"
                self.metrics.write_errors.inc()
                _log.exception("metrics writer: unexpected error; retrying with backoff")
                await asyncio.sleep(self._backoff.next_delay())

    async def _send_due(self) -> None:
        """Wait for a due batch and send it (one step of the sender)."""
        while True:
            if not len(self.buffer):
                self._wake.clear()
                await self._wake.wait()
                continue
            oldest = self.buffer.oldest_queued_s()
            due = len(self.buffer) >= _BATCH_ROWS or self.buffer.bytes >= _BATCH_BYTES
            if not due and oldest is not None:
                wait_s = oldest + self._batch_age_s - time.monotonic()
                if wait_s > 0:
                    self._wake.clear()
                    # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a cancel that
                    # arrives as the wait completes, and close() would then wait forever.
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(wait_s):
                            await self._wake.wait()
                    continue
            batch = self.buffer.peek_batch(_BATCH_ROWS, _BATCH_BYTES)
            outcome = await self._post(batch)
            if outcome == "retry":
                await asyncio.sleep(self._backoff.next_delay())
                return
            self.buffer.acknowledge(batch)
            self.metrics.buffer_rows.set(len(self.buffer))
            return

    async def _post(self, batch: list[BufferedLine]) -> str:
        """Send one batch: 'ok', 'retry' or 'drop'."""
        assert self._session is not None
        body = "\n".join(entry.line for entry in batch).encode("utf-8")
        headers = {"Content-Type": "text/plain; charset=utf-8"}
        if self.endpoint.authorization:
            headers["Authorization"] = self.endpoint.authorization
        self.requests += 1
        try:
            async with self._session.post(
                self.endpoint.url, data=body, headers=headers, ssl=self.endpoint.ssl_context or True
            ) as response:
                status = response.status
                text = (await response.text(errors="replace"))[:_BODY_LOG_LIMIT]
        except (aiohttp.ClientError, TimeoutError, OSError) as error:
            return self._retry(f"{type(error).__name__}: {error}")
        if 200 <= status < 300:
            self._backoff.reset()
            self.up = True
            self.last_error = ""
            self.metrics.rows_written.inc(len(batch))
            self.metrics.last_success.set(time.time())
            return "ok"
        if status in (408, 429) or status >= 500:
            return self._retry(f"HTTP {status}: {text}")
        if is_missing_table_error(status, text):
            if self._on_missing_table is not None:
                try:
                    await self._on_missing_table()
                except Exception as error:  # re-creation failures are retried with the batch
                    _log.error("re-creating missing tables failed: %s", error)
            return self._retry(f"HTTP {status} (table missing, re-created): {text}")
        partial = _partial_write(status, text)
        if partial is not None:
            return self._partial(batch, *partial, text)
        tables = Tally(entry.table for entry in batch)
        for table, count in tables.items():
            self.metrics.rows_dropped.labels(table, "rejected").inc(count)
        self.last_error = f"HTTP {status}: {text}"
        _log.error(
            "metrics store rejected a batch of %d rows with HTTP %d (dropped): %s",
            len(batch),
            status,
            text,
        )
        return "drop"

    def _partial(
        self, batch: list[BufferedLine], written: int, dropped: dict[str, int], text: str
    ) -> str:
        """The store wrote some rows of the batch and dropped the others (400 `RowsDropped`):
        the batch is done, nothing is sent again."""
        self._backoff.reset()
        self.up = True
        self.last_error = f"HTTP 400: {text}"
        self.metrics.rows_written.inc(written)
        self.metrics.last_success.set(time.time())
        for reason, count in dropped.items():
            self.metrics.rows_dropped.labels("", reason).inc(count)
        _log.error(
            "metrics store wrote %d rows of a batch of %d and dropped %d: %s",
            written,
            len(batch),
            sum(dropped.values()),
            text,
        )
        return "ok"

    def _retry(self, message: str) -> str:
        if self.up or message != self.last_error:
            _log.error("metrics write failed, will retry with backoff: %s", message)
        self.up = False
        self.last_error = message
        self.metrics.write_errors.inc()
        return "retry"
