"""The bounded in-memory write buffer of a process (metrics.md §6.3 steps 1 and 6).

Encoded lines wait here until a batch is due. When the buffer is full the oldest rows are
dropped first, log rows (`tf_system_log`) before metric rows; every drop is counted.
`insert_isolating` keeps a batch that the store refuses for its data from blocking the rows
behind it: the refused rows are found and dropped alone, an outage keeps them all.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final, Generic, TypeVar

from tensorfusion.adapters.tsdb.store import StoreDataError, StoreError

__all__ = ["BufferedLine", "Isolation", "WriteBuffer", "insert_isolating"]

T = TypeVar("T")

LOG_TABLE: Final = "tf_system_log"


@dataclass(frozen=True, slots=True)
class BufferedLine:
    """One encoded row waiting to be sent."""

    sequence: int
    table: str
    line: str
    queued_s: float

    @property
    def size(self) -> int:
        """Bytes in the request body (UTF-8 plus the newline)."""
        return len(self.line.encode("utf-8")) + 1


class WriteBuffer:
    """Arrival-ordered lines with row and byte limits; batches are peeked, then acknowledged."""

    def __init__(self, max_rows: int = 20_000, max_bytes: int = 16 * 1024 * 1024) -> None:
        self.max_rows = max_rows
        self.max_bytes = max_bytes
        self._logs: deque[BufferedLine] = deque()
        self._metrics: deque[BufferedLine] = deque()
        self._bytes = 0
        self._sequence = 0

    def __len__(self) -> int:
        return len(self._logs) + len(self._metrics)

    @property
    def bytes(self) -> int:
        """Bytes held."""
        return self._bytes

    def oldest_queued_s(self) -> float | None:
        """Queue time of the oldest line, None when empty."""
        heads = [queue[0].queued_s for queue in (self._logs, self._metrics) if queue]
        return min(heads) if heads else None

    def add(self, table: str, line: str, now_s: float) -> Counter[str]:
        """Queue one line; returns the rows dropped to make room, by table."""
        self._sequence += 1
        entry = BufferedLine(self._sequence, table, line, now_s)
        (self._logs if table == LOG_TABLE else self._metrics).append(entry)
        self._bytes += entry.size
        dropped: Counter[str] = Counter()
        while len(self) > self.max_rows or self._bytes > self.max_bytes:
            queue = self._logs if self._logs else self._metrics
            victim = queue.popleft()
            self._bytes -= victim.size
            dropped[victim.table] += 1
        return dropped

    def peek_batch(self, max_rows: int, max_bytes: int) -> list[BufferedLine]:
        """The oldest lines (by arrival, across logs and metrics) up to the limits."""
        batch: list[BufferedLine] = []
        size = 0
        log_index = metric_index = 0
        while len(batch) < max_rows:
            log = self._logs[log_index] if log_index < len(self._logs) else None
            metric = self._metrics[metric_index] if metric_index < len(self._metrics) else None
            if log is None and metric is None:
                break
            if metric is None or (log is not None and log.sequence < metric.sequence):
                assert log is not None
                entry = log
                log_index += 1
            else:
                entry = metric
                metric_index += 1
            if batch and size + entry.size > max_bytes:
                break
            batch.append(entry)
            size += entry.size
        return batch

    def acknowledge(self, batch: list[BufferedLine]) -> None:
        """Remove a sent (or rejected) batch; entries already evicted are skipped."""
        if not batch:
            return
        last = max(entry.sequence for entry in batch)
        for queue in (self._logs, self._metrics):
            while queue and queue[0].sequence <= last:
                self._bytes -= queue.popleft().size


@dataclass(slots=True)
class Isolation(Generic[T]):
    """What became of a batch: rows inserted, rows refused alone for their data (with the
    store's message), and rows not tried or not inserted because of an outage (`error`)."""

    inserted: int = 0
    rejected: list[tuple[T, str]] = field(default_factory=list)
    pending: list[T] = field(default_factory=list)
    error: StoreError | None = None


def insert_isolating(insert: Callable[[list[T]], object], rows: list[T]) -> Isolation[T]:
    """Insert `rows`; on StoreDataError insert each half again, down to single rows, so only
    the rows the store refuses alone are rejected (about k·log2(n) inserts for k bad rows).
    Any other StoreError stops: that part and everything after it are `pending`, to be retried.
    `insert` must be all or nothing per call."""
    outcome: Isolation[T] = Isolation()
    chunks = [rows] if rows else []
    while chunks:
        chunk = chunks.pop()
        if outcome.error is not None:
            outcome.pending.extend(chunk)
            continue
        try:
            insert(chunk)
        except StoreDataError as error:
            if len(chunk) == 1:
                outcome.rejected.append((chunk[0], str(error)))
            else:
                middle = len(chunk) // 2
                chunks.extend((chunk[middle:], chunk[:middle]))
            continue
        except StoreError as error:
            outcome.error = error
            outcome.pending.extend(chunk)
            continue
        outcome.inserted += len(chunk)
    return outcome
