"""Durations of rule intervals (Go syntax, whole components) and SQL timestamp text."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Final

__all__ = [
    "DurationError",
    "format_rfc3339_ms",
    "format_sql_timestamp",
    "parse_rule_interval",
]

_UNIT_MS: Final[dict[str, int]] = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000}
# ASCII digits only (`\d` also matches other scripts' digits) and whole-text matches (`$` also
# matches before a trailing newline, which would reach an `::INTERVAL` literal).
_COMPONENT: Final = re.compile(r"([0-9]+)(ms|s|m|h)")
_WHOLE: Final = re.compile(r"(?:[0-9]+(?:ms|s|m|h))+")
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)


class DurationError(ValueError):
    """Text that is not an accepted duration."""


def parse_rule_interval(text: object) -> int:
    """Milliseconds of a Go-style duration with integer components (`30s`, `1m30s`, `500ms`).

    Fractions (`1.5h`), `ns`/`us`, signs and empty text are rejected, so that GreptimeDB
    accepts the same text as an interval literal.
    """
    if not isinstance(text, str) or _WHOLE.fullmatch(text) is None:
        raise DurationError(
            f"{text!r} is not a duration: use whole numbers with the units ms, s, m or h "
            "(for example 30s, 2m, 1m30s)"
        )
    return sum(int(number) * _UNIT_MS[unit] for number, unit in _COMPONENT.findall(text))


def _utc(ms: int) -> datetime:
    return _EPOCH + timedelta(milliseconds=ms)


def format_sql_timestamp(ms: int) -> str:
    """`YYYY-MM-DD HH:MM:SS.fff` in UTC, the text of a SQL TIMESTAMP literal."""
    return _utc(ms).strftime("%Y-%m-%d %H:%M:%S.") + f"{ms % 1000:03d}"


def format_rfc3339_ms(ms: int) -> str:
    """RFC 3339 UTC with milliseconds: `2026-08-20T10:00:00.123Z`."""
    return _utc(ms).strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"
