"""Timestamps as text, in UTC: RFC 3339 (Kubernetes, to the second; alerts, to the millisecond)
and SQL TIMESTAMP literals."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from typing import Final

__all__ = ["format_rfc3339", "format_rfc3339_ms", "format_sql_timestamp"]

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
