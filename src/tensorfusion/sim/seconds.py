"""Durations of the simulator's input: seconds as a number or a Go duration text."""

from __future__ import annotations

import math
import re
from typing import Any, Final

from tensorfusion.domain.durations import DurationError, parse_go_duration

__all__ = ["parse_seconds"]

_PLAIN_SECONDS: Final = re.compile(r"[0-9]{1,12}(\.[0-9]{1,9})?")


def parse_seconds(value: Any) -> float:
    """Seconds from a number or a Go duration text such as `90s`, `5m`, `1h30m`."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError(f"not a duration (examples: 90, 30s, 5m, 1h30m): {value!r}")
    if isinstance(value, str):
        text = value.strip()
        if _PLAIN_SECONDS.fullmatch(text):
            return float(text)
        try:
            return parse_go_duration(text) / 1e9
        except DurationError:
            raise ValueError(f"not a duration (examples: 90, 30s, 5m, 1h30m): {value!r}") from None
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"must be a finite number of seconds >= 0: {value!r}")
    return float(value)
