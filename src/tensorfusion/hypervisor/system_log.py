"""The process's own log records as `tf_system_log` rows (metrics.md §3.9).

`SystemLogRows` is a logging handler: each record at or above its level becomes a row (tags
`component`, `container`, `namespace`, `pod`; string fields `message`, `stream`, `timestamp`
with nanoseconds, `level`; time `greptime_timestamp` = the record's own time). Rows wait in
the handler until the metrics loop drains them into its writer, so logging never blocks and
never re-enters the writer. Messages over 8 KiB are cut; more than 100 rows a second, or more
than `max_pending` waiting, are dropped and counted.
"""

from __future__ import annotations

import logging
from collections import deque
from datetime import UTC, datetime
from typing import Final

from tensorfusion.domain.metrics.rows import MetricRow

__all__ = ["LOG_LEVELS", "SystemLogRows"]

TABLE: Final = "tf_system_log"
MAX_MESSAGE_BYTES: Final = 8 * 1024
RATE_PER_S: Final = 100
LOG_LEVELS: Final = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warn": logging.WARNING,
    "error": logging.ERROR,
}


def _level_name(levelno: int) -> str:
    if levelno >= logging.ERROR:
        return "error"
    if levelno >= logging.WARNING:
        return "warn"
    return "info" if levelno >= logging.INFO else "debug"


def _rfc3339_ns(created: float) -> str:
    ns = round(created * 1e9)
    moment = datetime.fromtimestamp(ns // 1_000_000_000, UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ns % 1_000_000_000:09d}Z"


def _cut(message: str) -> str:
    data = message.encode("utf-8", "replace")
    if len(data) <= MAX_MESSAGE_BYTES:
        return message
    return data[:MAX_MESSAGE_BYTES].decode("utf-8", "ignore")


class SystemLogRows(logging.Handler):
    """Collects log records as `tf_system_log` rows until `drain()`."""

    def __init__(
        self,
        *,
        component: str,
        level: str = "info",
        pod: str = "",
        namespace: str = "",
        container: str = "",
        stream: str = "stderr",
        max_pending: int = 2000,
    ) -> None:
        super().__init__(LOG_LEVELS.get(level, logging.INFO))
        self._tags = {"component": component, "container": container,
                      "namespace": namespace, "pod": pod}  # fmt: skip
        self._stream = stream
        self._pending: deque[MetricRow] = deque()
        self._max_pending = max_pending
        self._second = -1
        self._in_second = 0
        self.dropped = 0
        """Rows dropped by the rate limit or a full queue."""

    def emit(self, record: logging.LogRecord) -> None:
        """Queue the record as a row (called under the handler's lock)."""
        second = int(record.created)
        if second != self._second:
            self._second, self._in_second = second, 0
        self._in_second += 1
        if self._in_second > RATE_PER_S:
            self.dropped += 1
            return
        try:
            message = record.getMessage()
            if record.exc_info:
                message = f"{message}\n{logging.Formatter().formatException(record.exc_info)}"
        except Exception:
            self.handleError(record)
            return
        fields = {
            "message": _cut(message),
            "stream": self._stream,
            "timestamp": _rfc3339_ns(record.created),
            "level": _level_name(record.levelno),
        }
        self._pending.append(MetricRow(TABLE, int(record.created * 1000), self._tags, fields))
        if len(self._pending) > self._max_pending:
            self._pending.popleft()
            self.dropped += 1

    def drain(self) -> list[MetricRow]:
        """The rows queued since the last drain, oldest first."""
        self.acquire()
        try:
            rows = list(self._pending)
            self._pending.clear()
        finally:
            self.release()
        return rows
