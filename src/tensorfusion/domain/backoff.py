"""Exponential backoff, clock-free: the policy (`Backoff`) and one retry loop's count of
failures against it (`RetryDelays`; metrics.md §6.3, alerting.md §6.5)."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

__all__ = ["Backoff", "RetryDelays"]


@dataclass(frozen=True, slots=True)
class Backoff:
    """Exponential backoff in seconds: ``initial`` after the first failure, multiplied by
    ``factor`` after each further one, never above ``maximum``, spread by ±``jitter`` (a
    fraction of the delay; 0: none)."""

    initial: float = 1.0
    maximum: float = 30.0
    factor: float = 2.0
    jitter: float = 0.0

    def __post_init__(self) -> None:
        if not self.initial > 0:
            raise ValueError(f"backoff initial delay must be > 0 s, got {self.initial}")
        if not self.maximum >= self.initial:
            raise ValueError(
                f"backoff maximum ({self.maximum} s) must be >= the initial delay "
                f"({self.initial} s)"
            )
        if not self.factor >= 1:
            raise ValueError(f"backoff factor must be >= 1, got {self.factor}")
        if not 0 <= self.jitter <= 1:
            raise ValueError(f"backoff jitter must be within [0, 1], got {self.jitter}")

    def delay(self, failures: int, rng: random.Random | None = None) -> float:
        """The wait after ``failures`` consecutive failures (1 for the first); jittered with
        ``rng`` (default: the module's generator)."""
        if failures < 1:
            raise ValueError(f"failures must be >= 1, got {failures}")
        delay = self.initial
        for _ in range(failures - 1):
            if delay >= self.maximum:
                break
            delay *= self.factor
        delay = min(delay, self.maximum)
        if not self.jitter:
            return delay
        spread = delay * self.jitter
        offset: float = (rng or random).uniform(-spread, spread)
        return max(0.0, delay + offset)


@dataclass(slots=True)
class RetryDelays:
    """One retry loop's consecutive failures, counted against `backoff`."""

    backoff: Backoff = field(default_factory=Backoff)
    failures: int = 0
    rng: random.Random = field(default_factory=random.Random, repr=False)

    def next_delay(self) -> float:
        """The delay before the next retry; each call counts one more failure."""
        self.failures += 1
        return self.backoff.delay(self.failures, self.rng)

    def reset(self) -> None:
        """Back to the initial delay after a success."""
        self.failures = 0
