"""Go `time.Duration` text (`300ms`, `5m`, `1h30m`), read exactly: the one duration parser and
its error."""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Final

__all__ = ["RULE_DURATION", "RULE_WHOLE_DURATION", "DurationError", "parse_go_duration"]

_PART: Final = re.compile(r"([0-9]*(?:\.[0-9]*)?)(ns|us|µs|μs|ms|s|m|h)")
# ASCII digits only (`\d` also matches other scripts' digits) and a whole-text match (`$` also
# matches before a trailing newline, which would reach an `::INTERVAL` literal).
_WHOLE: Final = re.compile(r"(?:[0-9]+(?:ms|s|m|h))+")
RULE_DURATION: Final = "must be a non-negative duration such as 300ms, 5m or 1h30m"
RULE_WHOLE_DURATION: Final = (
    "use whole numbers with the units ms, s, m or h (for example 30s, 2m, 1m30s)"
)
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
    """Text that is not an accepted duration; `rule` says what is."""

    def __init__(self, message: str, rule: str = RULE_DURATION) -> None:
        super().__init__(message)
        self.rule = rule


def parse_go_duration(text: object, *, whole_units: bool = False) -> int:
    """Nanoseconds of a non-negative Go duration (`0`, `300ms`, `1.5h`, `1h30m`).

    `whole_units`: only whole numbers of ms, s, m and h (`30s`, `1m30s`; no sign, fraction or
    `0`), the text GreptimeDB also reads as an interval literal.
    """
    if not isinstance(text, str) or (whole_units and _WHOLE.fullmatch(text) is None):
        if whole_units:
            raise DurationError(f"{text!r} is not a duration: {RULE_WHOLE_DURATION}",
                                RULE_WHOLE_DURATION)  # fmt: skip
        raise DurationError(f"not a duration: {text!r}")
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
