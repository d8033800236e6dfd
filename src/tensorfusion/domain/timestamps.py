"""Timestamps as text, in UTC: RFC 3339 (Kubernetes, to the second; alerts, to the millisecond)
and SQL TIMESTAMP literals; RFC 3339 times read back."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from typing import Final

__all__ = [
    "format_rfc3339",
    "format_rfc3339_ms",
    "format_sql_timestamp",
    "parse_rfc3339",
    "parse_rfc3339_datetime",
]

_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)


def format_rfc3339(seconds: float) -> str:
    """Seconds since the Unix epoch as RFC 3339 UTC to the second, as Kubernetes writes times."""
    moment = _EPOCH + timedelta(seconds=math.floor(seconds))
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _utc(ms: int) -> datetime:
    return _EPOCH + timedelta(milliseconds=ms)


def format_rfc3339_ms(ms: int) -> str:
    """Milliseconds since the Unix epoch as RFC 3339 UTC with milliseconds:
    `2026-08-20T10:00:00.123Z`."""
    return _utc(ms).strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


def format_sql_timestamp(ms: int) -> str:
    """`YYYY-MM-DD HH:MM:SS.fff` in UTC, the text of a SQL TIMESTAMP literal."""
    return _utc(ms).strftime("%Y-%m-%d %H:%M:%S.") + f"{ms % 1000:03d}"


def parse_rfc3339_datetime(text: object) -> datetime | None:
    """An RFC 3339 time as the API writes it (`2026-01-02T03:04:05Z`, with or without
    fractions, `Z` or an offset) as an aware datetime; None when `text` is not one, a time
    without a zone included."""
    if not isinstance(text, str) or not text:
        return None
    try:
        moment = datetime.fromisoformat(text.replace("z", "Z"))
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else None


def parse_rfc3339(text: object) -> float | None:
    """Seconds since the Unix epoch of an RFC 3339 time (see `parse_rfc3339_datetime`); None
    when `text` is not one."""
    moment = parse_rfc3339_datetime(text)
    return moment.timestamp() if moment is not None else None
