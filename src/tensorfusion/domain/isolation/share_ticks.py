"""Throttle ticks of workers that MPS holds to an SM share (metrics.md §3.2
`compute_throttled_cnt`, hypervisor.md *GPU isolation*). MPS reports no throttling of its own:
a sample in which a worker uses at least `SATURATED` of its share is counted as one tick in
which the limit held it back, so `WorkerTFlopsThrottled` means something on a real node."""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Final

__all__ = ["SATURATED", "ShareTicks"]

SATURATED: Final = 0.95
"""A worker using this fraction of its SM share (or more) runs at its limit."""


@dataclass(slots=True)
class ShareTicks:
    """Cumulative ticks at the share, per key (worker, GPU)."""

    counts: dict[Hashable, int] = field(default_factory=dict)

    def observe(self, key: Hashable, used_percent: float, share_percent: float) -> int:
        """Count this sample when the worker is at its share; the key's total."""
        count = self.counts.get(key, 0)
        if share_percent > 0 and used_percent >= SATURATED * share_percent:
            count += 1
        self.counts[key] = count
        return count

    def keep_only(self, keys: set[Hashable]) -> None:
        """Forget the keys of workers that are gone."""
        for key in set(self.counts) - keys:
            del self.counts[key]
