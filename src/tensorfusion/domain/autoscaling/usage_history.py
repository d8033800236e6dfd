"""The leader's usage history of the autoscaled workloads (docs/autoscaling.md, *Estimator*
and *A round*): per workload and resource a `SlicedHistogram` over its `historyDataPeriod`,
filled once from the store with aggregated rows, then kept up to date each round from the rows
written since the last one.

Slices: a window of W is cut into `SLICES` slices of W / 24 (at least 2.5 s, at most 30 h), by
`ts // slice`. The history holds the slice holding `now - W` and every slice after it, so it
covers the last W plus up to one slice (at most W / 24 more). A sample stamped after `now` counts
in the current slice.

The cut: every row with `ts <= cut` is in the history (from the fill or an earlier read). Each
round reads the rows with `ts > cut` (`recent_query`), counts the ones it has not counted yet
(`seen`, keyed by workload, worker, GPU and time), and moves the cut to `now - OVERLAP_MS`. So a
row written up to `OVERLAP_MS` after its time is counted; a later one only by the next fill.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from tensorfusion.domain.autoscaling.recommendation import UsagePercentiles
from tensorfusion.domain.autoscaling.usage_histogram import (
    TFLOPS_SCALE,
    VRAM_SCALE,
    SlicedHistogram,
)
from tensorfusion.domain.autoscaling.usage_query import (
    FILL_COLUMNS,
    RECENT_COLUMNS,
    PercentileSet,
    WorkloadUsage,
)

__all__ = [
    "OVERLAP_MS",
    "SLICES",
    "FillSpan",
    "UsageHistories",
    "WorkloadHistory",
    "fill_rows",
    "fill_spans",
    "slice_ms",
]

SLICES: Final = 24
"""Slices per window."""
OVERLAP_MS: Final = 60_000
"""Rows are read again for this long after their time, so late ones are still counted."""
_SLOTS: Final = SLICES + 1
_MAX_VALUE: Final = 1e300

Key = tuple[str, str]
"""(namespace, workload)."""
SeenKey = tuple[str, str, str, str, int]
"""(namespace, workload, worker, GPU, ms): one counted row."""


def slice_ms(window_s: float) -> int:
    """The slice width of a window of `window_s` seconds, in milliseconds."""
    return max(int(window_s * 1000) // SLICES, 1)


def _value(value: Any) -> float | None:
    """A sample value as a number >= 0, or None when it is not one (the sample is left out)."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if 0 <= number < _MAX_VALUE else None


@dataclass(frozen=True, slots=True)
class FillSpan:
    """One fill query's rows: `start_ms <= ts < end_ms` and `ts <= cut_ms`."""

    start_ms: int
    end_ms: int
    cut_ms: int


def fill_spans(window_s: float, now_ms: int, cut_ms: int) -> list[FillSpan]:
    """The fill of a window at `now_ms`, one query per slice up to the cut."""
    width = slice_ms(window_s)
    first, last = now_ms // width - SLICES, cut_ms // width
    return [FillSpan(k * width, (k + 1) * width, cut_ms) for k in range(first, last + 1)]


class WorkloadHistory:
    """One workload's TFLOPS and VRAM samples over its window."""

    __slots__ = ("compute", "head", "slice_ms", "vram", "window_s")

    def __init__(self, window_s: float, now_ms: int) -> None:
        self.window_s = window_s
        self.slice_ms = slice_ms(window_s)
        self.head = now_ms // self.slice_ms
        """The newest slice (`ts // slice_ms`)."""
        self.compute = SlicedHistogram(TFLOPS_SCALE, _SLOTS)
        self.vram = SlicedHistogram(VRAM_SCALE, _SLOTS)

    def advance(self, now_ms: int) -> None:
        """Move to `now_ms`: the slices that left the window are taken off."""
        head = now_ms // self.slice_ms
        for k in range(max(self.head + 1, head - SLICES), head + 1):
            self.compute.clear(k % _SLOTS)
            self.vram.clear(k % _SLOTS)
        self.head = max(self.head, head)

    def slot(self, ts_ms: int) -> int | None:
        """The slot of a sample at `ts_ms`; None before the window."""
        k = ts_ms // self.slice_ms
        if k < self.head - SLICES:
            return None
        return min(k, self.head) % _SLOTS

    def add(self, ts_ms: int, tflops: Any, vram_bytes: Any) -> None:
        """One `tf_worker_usage` row (a value that is not a number >= 0 is left out)."""
        slot = self.slot(ts_ms)
        if slot is None:
            return
        if (compute := _value(tflops)) is not None:
            self.compute.add(slot, compute)
        if (vram := _value(vram_bytes)) is not None:
            self.vram.add(slot, vram)

    def usage(self, percentiles: PercentileSet) -> WorkloadUsage | None:
        """The samples and percentiles over the window (TFLOPS in milli); None without any."""
        if not self.compute.samples and not self.vram.samples:
            return None
        c = [value * 1000 for value in self.compute.percentiles(percentiles.compute)]
        v = self.vram.percentiles(percentiles.vram)
        return WorkloadUsage(UsagePercentiles(self.compute.samples, *c),
                             UsagePercentiles(self.vram.samples, *v))  # fmt: skip

    def footprint(self) -> int:
        """Bytes held (as `sys.getsizeof` counts them)."""
        return sys.getsizeof(self) + self.compute.footprint() + self.vram.footprint()


@dataclass(slots=True)
class UsageHistories:
    """Every tracked workload's history, the cut and the rows counted after it."""

    workloads: dict[Key, WorkloadHistory] = field(default_factory=dict)
    cut_ms: int | None = None
    """Every row with `ts <= cut_ms` is counted; None before the first fill."""
    seen: set[SeenKey] = field(default_factory=set)
    """The rows counted with `ts > cut_ms`."""

    def reset(self) -> None:
        """Forget everything (a new leadership term, or too many rows to catch up)."""
        self.workloads.clear()
        self.seen.clear()
        self.cut_ms = None

    def keep_only(self, windows: Mapping[Key, float]) -> None:
        """Drop the histories of workloads not in `windows` (gone, disabled) or whose window
        changed (they are filled again)."""
        dropped = {key for key, history in self.workloads.items()
                   if windows.get(key) != history.window_s}  # fmt: skip
        if not dropped:
            return
        for key in dropped:
            del self.workloads[key]
        self.seen = {row for row in self.seen if row[:2] not in dropped}
        if not self.workloads:
            self.reset()

    def missing(self, windows: Mapping[Key, float]) -> dict[float, list[Key]]:
        """The workloads of `windows` without a history, by window."""
        found: dict[float, list[Key]] = {}
        for key, window in windows.items():
            if key not in self.workloads:
                found.setdefault(window, []).append(key)
        return found

    def fill_cut(self, now_ms: int) -> int:
        """The cut a fill reads up to (set at the first fill)."""
        if self.cut_ms is None:
            self.cut_ms = now_ms - OVERLAP_MS
        return self.cut_ms

    def adopt(self, filled: Mapping[Key, WorkloadHistory]) -> None:
        """Track the histories of a fill that completed."""
        self.workloads.update(filled)

    def add_recent(
        self, columns: Sequence[str], rows: Iterable[Sequence[Any]], now_ms: int
    ) -> None:
        """Count the rows past the cut (`recent_query`'s answer) not counted yet, then move the
        cut to `now_ms - OVERLAP_MS`. Raises ValueError for an answer of other columns."""
        if tuple(columns) != RECENT_COLUMNS:
            raise ValueError(f"the usage rows have columns {tuple(columns)}")
        workloads, seen = self.workloads, self.seen
        for each in workloads.values():
            each.advance(now_ms)
        for namespace, workload, worker, uuid, ts_ms, tflops, vram_bytes in rows:
            history = workloads.get((namespace, workload))
            if history is None or ts_ms is None:
                continue
            key = (namespace, workload, worker, uuid, int(ts_ms))
            if key in seen:
                continue
            seen.add(key)
            history.add(key[4], tflops, vram_bytes)
        cut = max(self.cut_ms if self.cut_ms is not None else -math.inf, now_ms - OVERLAP_MS)
        self.cut_ms = int(cut)
        self.seen = {key for key in seen if key[4] > cut}

    def footprint(self) -> int:
        """Bytes held (as `sys.getsizeof` counts them), the rows counted past the cut included."""
        seen = sum(sys.getsizeof(key) + sum(map(sys.getsizeof, key)) for key in self.seen)
        held = sys.getsizeof(self.workloads) + sys.getsizeof(self.seen) + seen
        return held + sum(history.footprint() for history in self.workloads.values())


def fill_rows(
    histories: Mapping[Key, WorkloadHistory],
    span: FillSpan,
    columns: Sequence[str],
    rows: Iterable[Sequence[Any]],
) -> None:
    """Add one fill query's answer (`fill_query`, ordered by workload, resource and bucket) to
    the histories being filled; rows of other workloads are left out. Raises ValueError for an
    answer of other columns."""
    if tuple(columns) != FILL_COLUMNS:
        raise ValueError(f"the fill rows have columns {tuple(columns)}")
    run: tuple[Any, Any, Any] | None = None
    buckets: list[int] = []
    counts: list[int] = []
    lows: list[Any] = []
    highs: list[Any] = []
    for namespace, workload, resource, bucket, samples, low, high in rows:
        if run is None or workload != run[1] or resource != run[2] or namespace != run[0]:
            if run is not None:
                _fill_run(histories, span, run, _Cells(buckets, counts, lows, highs))
            run, buckets, counts, lows, highs = (namespace, workload, resource), [], [], [], []
        buckets.append(bucket)
        counts.append(samples)
        lows.append(low)
        highs.append(high)
    if run is not None:
        _fill_run(histories, span, run, _Cells(buckets, counts, lows, highs))


@dataclass(frozen=True, slots=True)
class _Cells:
    """The fill rows of one workload and resource in one slice."""

    buckets: list[int]
    counts: list[int]
    lows: list[Any]
    highs: list[Any]


def _fill_run(
    histories: Mapping[Key, WorkloadHistory],
    span: FillSpan,
    run: tuple[Any, Any, Any],
    cells: _Cells,
) -> None:
    filling = histories.get((run[0], run[1]))
    if filling is None:
        return
    slot = filling.slot(span.start_ms)
    if slot is None or not set(map(type, cells.buckets + cells.counts)) <= {int}:
        return
    try:
        low, high = _value(min(cells.lows)), _value(max(cells.highs))
    except TypeError:  # a NULL among them
        return
    if low is None or high is None:
        return
    target = filling.compute if run[2] == 0 else filling.vram
    target.add_counts(slot, cells.buckets, cells.counts, low=low, high=high)
