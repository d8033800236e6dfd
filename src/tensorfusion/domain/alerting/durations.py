"""Rule intervals (Go syntax, whole components) and SQL timestamp text."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Final

from tensorfusion.domain.durations import parse_go_duration

__all__ = [
    "format_rfc3339_ms",
    "format_sql_timestamp",
    "parse_rule_interval",
]

_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)


def parse_rule_interval(text: object) -> int:
    """Milliseconds of a Go-style duration with integer components (`30s`, `1m30s`, `500ms`).

    Fractions (`1.5h`), `ns`/`us`, signs and empty text are rejected (`DurationError`), so
    that GreptimeDB accepts the same text as an interval literal.
    """
    return parse_go_duration(text, whole_units=True) // 1_000_000


def _utc(ms: int) -> datetime:
    return _EPOCH + timedelta(milliseconds=ms)


def format_sql_timestamp(ms: int) -> str:
    """`YYYY-MM-DD HH:MM:SS.fff` in UTC, the text of a SQL TIMESTAMP literal."""
    return _utc(ms).strftime("%Y-%m-%d %H:%M:%S.") + f"{ms % 1000:03d}"


def format_rfc3339_ms(ms: int) -> str:
    """RFC 3339 UTC with milliseconds: `2026-08-20T10:00:00.123Z`."""
    return _utc(ms).strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"
