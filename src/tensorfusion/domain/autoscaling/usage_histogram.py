"""One resource's usage samples over a sliding window as counts per log-spaced bucket, the
autoscaler's estimator (docs/autoscaling.md, *Estimator*).

Buckets: bucket 0 holds [0, floor); bucket i >= 1 holds [floor * g^(i-1), floor * g^i), with
g = `BUCKET_GROWTH`. Time: a ring of slots, one per slice of the window, each with its counts
(from its own lowest bucket), its minimum and its maximum; beside them the total over the ring,
so a percentile is one walk of the total's buckets, and a slice leaving the window is taken off
the total.

A percentile interpolates between two order statistics exactly as `percentile` (DuckDB's
`quantile_cont`). An order statistic is estimated inside its bucket, narrowed to the window's
minimum and maximum (which are exact): the c samples of a bucket are spread evenly over it. The
estimate and the true value lie in the same bucket, hence

    |estimate - exact| <= (g - 1) * exact + floor

(at most 5 % of the value above `floor`, at most `floor` below it). A constant series is exact,
and so are the smallest and the largest sample.
"""

from __future__ import annotations

import math
import sys
from array import array
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import accumulate
from typing import Final

__all__ = [
    "BUCKET_GROWTH",
    "LOG_GROWTH",
    "TFLOPS_SCALE",
    "VRAM_SCALE",
    "BucketScale",
    "SlicedHistogram",
    "error_bound",
]

BUCKET_GROWTH: Final = 1.05
"""Each bucket is 5 % wider than the one below: the error bound is 5 % of the value."""
LOG_GROWTH: Final = math.log(BUCKET_GROWTH)
_INF: Final = math.inf


@dataclass(frozen=True, slots=True)
class BucketScale:
    """The buckets of one resource: values below `floor` share bucket 0."""

    floor: float

    def index(self, value: float) -> int:
        """The bucket of `value` (a finite number >= 0)."""
        if value < self.floor:
            return 0
        return 1 + int(math.log(value / self.floor) / LOG_GROWTH)

    def bounds(self, index: int) -> tuple[float, float]:
        """The [low, high) range of bucket `index`."""
        if index <= 0:
            return 0.0, self.floor
        return (self.floor * BUCKET_GROWTH ** (index - 1), self.floor * BUCKET_GROWTH**index)


TFLOPS_SCALE: Final = BucketScale(0.001)
"""TFLOPS (one milli-TFLOPS, the unit of a request, below which values share bucket 0)."""
VRAM_SCALE: Final = BucketScale(1048576.0)
"""Bytes (1 MiB below which values share bucket 0)."""


def error_bound(scale: BucketScale, exact: float) -> float:
    """How far a histogram percentile may be from the exact one (`exact`, >= 0)."""
    return (BUCKET_GROWTH - 1) * exact + scale.floor


def _zeros(count: int, typecode: str) -> array[int]:
    return array(typecode, [0]) * count


def _cover(
    counts: array[int] | None, base: int, first: int, last: int, typecode: str
) -> tuple[array[int], int]:
    """`counts` (from bucket `base`) grown to hold buckets `first` to `last`; the new base."""
    if not counts:
        return _zeros(last - first + 1, typecode), first
    if first < base:
        counts = _zeros(base - first, typecode) + counts
        base = first
    if last - base >= len(counts):
        counts.extend(_zeros(last - base - len(counts) + 1, typecode))
    return counts, base


class SlicedHistogram:
    """Counts of one resource's samples per bucket, per slot of a ring of time slices, and
    their total over the ring. A slot holds fewer than 2**32 samples."""

    __slots__ = ("_bases", "_highs", "_lows", "_rows", "_total", "_total_base", "samples", "scale")

    def __init__(self, scale: BucketScale, slots: int) -> None:
        self.scale = scale
        self.samples = 0
        """Samples over the ring."""
        self._bases = [0] * slots
        self._rows: list[array[int] | None] = [None] * slots
        self._lows = array("d", [_INF]) * slots
        self._highs = array("d", [-_INF]) * slots
        self._total_base = 0
        self._total: array[int] = array("Q")

    def add(self, slot: int, value: float) -> None:
        """One sample (a finite number >= 0) in `slot`."""
        self.add_count(slot, self.scale.index(value), 1, low=value, high=value)

    def add_count(self, slot: int, bucket: int, count: int, *, low: float, high: float) -> None:
        """`count` samples of `bucket` in `slot`, the smallest `low` and the largest `high`."""
        self.add_counts(slot, (bucket,), (count,), low=low, high=high)

    def add_counts(
        self,
        slot: int,
        buckets: Sequence[int],
        counts: Sequence[int],
        *,
        low: float,
        high: float,
    ) -> None:
        """`counts[i]` samples of `buckets[i]` in `slot`, the smallest `low` and the largest
        `high`."""
        if not buckets:
            return
        first, last = min(buckets), max(buckets)
        row, base = _cover(self._rows[slot], self._bases[slot], first, last, "I")
        total, total_base = _cover(self._total, self._total_base, first, last, "Q")
        for bucket, count in zip(buckets, counts, strict=True):
            row[bucket - base] += count
            total[bucket - total_base] += count
        self._rows[slot], self._bases[slot] = row, base
        self._total, self._total_base = total, total_base
        self._lows[slot] = min(self._lows[slot], low)
        self._highs[slot] = max(self._highs[slot], high)
        self.samples += sum(counts)

    def clear(self, slot: int) -> None:
        """Take `slot`'s samples off the total and empty it (its slice left the window)."""
        row = self._rows[slot]
        if row is None:
            return
        total, offset = self._total, self._bases[slot] - self._total_base
        for index, count in enumerate(row):
            total[offset + index] -= count
        self.samples -= sum(row)
        self._rows[slot] = None
        self._lows[slot], self._highs[slot] = _INF, -_INF
        self._trim()

    def _trim(self) -> None:
        total = self._total
        if not self.samples:
            self._total = array("Q")
            return
        start = 0
        while total[start] == 0:
            start += 1
        end = len(total)
        while total[end - 1] == 0:
            end -= 1
        if start or end < len(total):
            self._total = total[start:end]
            self._total_base += start

    def percentiles(self, fractions: Sequence[float]) -> list[float]:
        """The `fractions` percentiles of the samples over the ring (0 for none)."""
        n = self.samples
        if not n:
            return [0.0 for _ in fractions]
        cumulative = list(accumulate(self._total))
        low, high = min(self._lows), max(self._highs)
        values = []
        for fraction in fractions:
            position = (n - 1) * fraction
            first = math.floor(position)
            value = self._order(cumulative, first, low, high)
            if position > first and first + 1 < n:  # else the weight below is 0
                second = self._order(cumulative, first + 1, low, high)
                value += (second - value) * (position - first)
            values.append(value)
        return values

    def _order(self, cumulative: list[int], rank: int, low: float, high: float) -> float:
        """The estimated `rank`-th smallest sample (from 0), given the smallest and largest."""
        index = bisect_right(cumulative, rank)
        count = self._total[index]
        k = rank - (cumulative[index] - count)
        start, end = self.scale.bounds(self._total_base + index)
        start, end = max(start, low), min(end, high)
        if start > end:  # a value on a bucket's edge, rounded the other way
            start, end = end, start
        if count > 1:  # spread evenly; the ends exactly (no rounding of start + (end - start))
            return end if k == count - 1 else start + (end - start) * k / (count - 1)
        if start == low:
            return start
        return end if end == high else (start + end) / 2

    def footprint(self) -> int:
        """Bytes held (the arrays and lists, as `sys.getsizeof` counts them)."""
        rows = sum(sys.getsizeof(row) for row in self._rows if row is not None)
        return (rows + sys.getsizeof(self._rows) + sys.getsizeof(self._bases)
                + sys.getsizeof(self._lows) + sys.getsizeof(self._highs)
                + sys.getsizeof(self._total) + sys.getsizeof(self))  # fmt: skip
