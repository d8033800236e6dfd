"""Exponential backoff with jitter (metrics.md §6.3, alerting.md §6.5), clock-free."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

__all__ = ["Backoff"]


@dataclass(slots=True)
class Backoff:
    """Delays start at `initial_s`, double up to `cap_s`, with ±`jitter` (a fraction)."""

    initial_s: float = 1.0
    cap_s: float = 30.0
    jitter: float = 0.2
    attempt: int = 0
    rng: random.Random = field(default_factory=random.Random, repr=False)

    def next_delay(self) -> float:
        """The delay before the next retry; each call advances the attempt count."""
        base = min(self.cap_s, math.ldexp(self.initial_s, min(self.attempt, 30)))
        self.attempt += 1
        spread = base * self.jitter
        offset: float = self.rng.uniform(-spread, spread)
        return max(0.0, base + offset)

    def reset(self) -> None:
        """Back to the initial delay after a success."""
        self.attempt = 0
