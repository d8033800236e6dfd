"""`metricsTTL`: GreptimeDB duration text (`30d`, `12h`, `1w`, `1d12h`)."""

from __future__ import annotations

import re
from typing import Final

__all__ = ["EMBEDDED_MAX_RETENTION_MS", "RetentionError", "parse_ttl"]

_UNIT_MS: Final[dict[str, int]] = {
    "ms": 1,
    "s": 1000,
    "m": 60_000,
    "h": 3_600_000,
    "d": 86_400_000,
    "w": 7 * 86_400_000,
}
# ASCII digits, whole text (see `durations`): the TTL is written into DDL string literals.
_WHOLE: Final = re.compile(r"(?:[0-9]+(?:ms|s|m|h|d|w))+")
_COMPONENT: Final = re.compile(r"([0-9]+)(ms|s|m|h|d|w)")
EMBEDDED_MAX_RETENTION_MS: Final = 72 * 3_600_000


class RetentionError(ValueError):
    """A TTL that GreptimeDB would not accept."""


def parse_ttl(text: object) -> int:
    """Milliseconds of a TTL; raises RetentionError naming the value and the accepted form."""
    if not isinstance(text, str) or _WHOLE.fullmatch(text) is None:
        raise RetentionError(
            f"{text!r} is not a duration: use whole numbers with the units s, m, h, d or w "
            "(for example 30d, 12h, 1w, 1d12h)"
        )
    total = sum(int(number) * _UNIT_MS[unit] for number, unit in _COMPONENT.findall(text))
    if total <= 0:
        raise RetentionError(f"{text!r} must be longer than zero")
    return total
