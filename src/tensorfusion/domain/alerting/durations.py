"""Rule intervals: Go syntax with whole components."""

from __future__ import annotations

from tensorfusion.domain.durations import parse_go_duration

__all__ = ["parse_rule_interval"]


def parse_rule_interval(text: object) -> int:
    """Milliseconds of a Go-style duration with integer components (`30s`, `1m30s`, `500ms`).

    Fractions (`1.5h`), `ns`/`us`, signs and empty text are rejected (`DurationError`), so
    that GreptimeDB accepts the same text as an interval literal.
    """
    return parse_go_duration(text, whole_units=True) // 1_000_000
