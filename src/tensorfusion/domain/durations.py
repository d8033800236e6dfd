"""Go `time.Duration` text (`300ms`, `5m`, `1h30m`), read exactly."""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Final

__all__ = ["DurationError", "parse_go_duration"]

_PART: Final = re.compile(r"([0-9]*(?:\.[0-9]*)?)(ns|us|µs|μs|ms|s|m|h)")
_UNIT_NS: Final[dict[str, int]] = {
    "ns": 1,
    "us": 1_000,
    "µs": 1_000,  # Go accepts both micro signs
    "μs": 1_000,
    "ms": 1_000_000,
    "s": 1_000_000_000,
    "m": 60_000_000_000,
    "h": 3_600_000_000_000,
}


class DurationError(ValueError):
    """Text that is not a non-negative Go duration."""


def parse_go_duration(text: str) -> int:
    """Nanoseconds of a non-negative Go duration (`0`, `300ms`, `1.5h`, `1h30m`)."""
    if text in ("0", "+0"):
        return 0
    body = text[1:] if text.startswith("+") else text
    if not body:
        raise DurationError(f"not a duration: {text!r}")
    total = Decimal(0)
    position = 0
    while position < len(body):
        match = _PART.match(body, position)
        if match is None or match.group(1) in ("", "."):
            raise DurationError(f"not a duration: {text!r}")
        total += Decimal(match.group(1)) * _UNIT_NS[match.group(2)]
        position = match.end()
    return int(total)
