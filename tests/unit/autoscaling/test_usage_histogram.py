"""The autoscaler's estimator: a histogram percentile is within its stated bound of the exact
one (`percentile`, DuckDB's `quantile_cont`) on any data; a constant series, the smallest and
the largest sample are exact; a history keeps exactly the slices of its window as time moves;
rows read again are counted once; histories of workloads that went away are dropped."""

from __future__ import annotations

import math

from hypothesis import example, given, settings
from hypothesis import strategies as st

from tensorfusion.domain.autoscaling.recommendation import percentile
from tensorfusion.domain.autoscaling.usage_histogram import (
    BUCKET_GROWTH,
    TFLOPS_SCALE,
    VRAM_SCALE,
    BucketScale,
    SlicedHistogram,
    error_bound,
)
from tensorfusion.domain.autoscaling.usage_history import (
    OVERLAP_MS,
    SLICES,
    UsageHistories,
    WorkloadHistory,
    slice_ms,
)
from tensorfusion.domain.autoscaling.usage_query import RECENT_COLUMNS, PercentileSet

from ...hypothesis_budget import examples

HOUR_MS = 3_600_000
DAY_S = 86_400.0
NOW_MS = 1_796_421_600_000
SET = PercentileSet((0.5, 0.95, 0.99), (0.5, 0.9, 1.0))

# TFLOPS as a worker reports them: zeros, tiny values below the floor, repeats, wide ranges.
tflops = st.one_of(st.just(0.0), st.floats(0, 0.002), st.floats(0, 2000),
                   st.sampled_from([19.79, 20.0, 100.0]))  # fmt: skip
fractions = st.lists(st.floats(0.01, 1.0), min_size=1, max_size=4)


def _within(scale: BucketScale, found: float, exact: float) -> bool:
    return abs(found - exact) <= error_bound(scale, exact) * (1 + 1e-9) + 1e-12


def _histogram(scale: BucketScale, values: list[float], slots: int = 3) -> SlicedHistogram:
    histogram = SlicedHistogram(scale, slots)
    for index, value in enumerate(values):
        histogram.add(index % slots, value)
    return histogram


@settings(max_examples=examples(300), deadline=None)
@given(st.lists(tflops, min_size=1, max_size=300), fractions)
def test_a_tflops_percentile_is_within_the_bound_of_the_exact_one(
    values: list[float], asked: list[float]
) -> None:
    found = _histogram(TFLOPS_SCALE, values).percentiles(asked)
    for fraction, value in zip(asked, found, strict=True):
        exact = percentile(values, fraction)
        assert _within(TFLOPS_SCALE, value, exact), (fraction, value, exact)


@settings(max_examples=examples(200), deadline=None)
@given(st.lists(st.integers(0, 200 * 2**30), min_size=1, max_size=300), fractions)
def test_a_vram_percentile_is_within_the_bound_of_the_exact_one(
    values: list[int], asked: list[float]
) -> None:
    floats = [float(v) for v in values]
    found = _histogram(VRAM_SCALE, floats).percentiles(asked)
    for fraction, value in zip(asked, found, strict=True):
        assert _within(VRAM_SCALE, value, percentile(floats, fraction))


def test_the_bound_is_five_percent_of_the_value() -> None:
    assert BUCKET_GROWTH == 1.05
    assert error_bound(TFLOPS_SCALE, 100.0) == (BUCKET_GROWTH - 1) * 100.0 + 0.001
    # Two values in one bucket, a 1000 between them: the percentile between them is estimated.
    values = [100.0, 104.0] * 50 + [1000.0]
    found = _histogram(TFLOPS_SCALE, values).percentiles([0.3])[0]
    assert found != percentile(values, 0.3) and _within(TFLOPS_SCALE, found, 100.0)


@given(st.sampled_from([0.0, 0.0004, 19.79, 20.0, 312.5]), st.integers(1, 500), fractions)
def test_a_constant_series_is_exact(value: float, count: int, asked: list[float]) -> None:
    assert _histogram(TFLOPS_SCALE, [value] * count).percentiles(asked) == [value] * len(asked)


@settings(max_examples=examples(100), deadline=None)
@given(st.lists(tflops, min_size=1, max_size=200))
@example([0.0, 0.0, 0.0, 0.0006827078142087812])  # k / (count - 1) rounding at the top
def test_the_smallest_and_largest_samples_are_exact(values: list[float]) -> None:
    histogram = _histogram(TFLOPS_SCALE, values)
    assert histogram.percentiles([0.0, 1.0]) == [min(values), max(values)]


def test_an_empty_histogram_reads_as_zeros() -> None:
    assert SlicedHistogram(TFLOPS_SCALE, 2).percentiles([0.5, 0.9]) == [0.0, 0.0]


samples = st.lists(st.tuples(st.integers(-30 * HOUR_MS, 2 * HOUR_MS), tflops), max_size=150)


@settings(max_examples=examples(150), deadline=None)
@given(samples, st.lists(st.integers(0, 30 * HOUR_MS), max_size=4))
@example([(-24 * HOUR_MS, 1.0)], [HOUR_MS])  # the slot the next hour reuses holds a sample
def test_a_history_keeps_exactly_the_slices_of_its_window(
    rows: list[tuple[int, float]], steps: list[int]
) -> None:
    history = WorkloadHistory(DAY_S, NOW_MS)
    for offset, value in rows:
        history.add(NOW_MS + offset, value, 0)
    now = NOW_MS
    for step in steps:
        now += step
        history.advance(now)
    width = slice_ms(DAY_S)
    assert width == HOUR_MS
    head = now // width
    # A sample stamped after the time it was added counts in the slice of that time.
    kept = [v for offset, v in rows
            if min((NOW_MS + offset) // width, NOW_MS // width) >= head - SLICES]  # fmt: skip
    assert history.compute.samples == len(kept)
    if kept:
        assert history.compute.percentiles([0.5, 1.0]) == _histogram(
            TFLOPS_SCALE, kept, 1).percentiles([0.5, 1.0])  # fmt: skip
    # The oldest slice kept holds now - 24 h: the window is 24 h plus up to one slice.
    assert (head - SLICES) * width <= now - DAY_S * 1000 < (head - SLICES + 1) * width


def test_a_sample_leaves_with_its_slice_at_most_one_slice_after_the_window() -> None:
    history = WorkloadHistory(DAY_S, NOW_MS)
    history.add(NOW_MS - 1, 5.0, 2**30)  # the last ms of the slice before the current one
    history.advance(NOW_MS - NOW_MS % HOUR_MS + 24 * HOUR_MS - 1)  # 24 h after its slice began
    assert (history.compute.samples, history.vram.samples) == (1, 1)
    history.advance(NOW_MS - NOW_MS % HOUR_MS + 24 * HOUR_MS)  # its slice left the window
    assert (history.compute.samples, history.vram.samples) == (0, 0)
    assert history.usage(SET) is None


def test_a_short_window_has_short_slices_and_a_future_sample_counts_now() -> None:
    history = WorkloadHistory(60.0, NOW_MS)
    assert history.slice_ms == 2_500
    history.add(NOW_MS + 3_600_000, 1.0, 0)  # an agent's clock an hour ahead: counts now
    history.advance(NOW_MS + 62_499)  # 60 s plus less than a slice later: still there
    assert history.compute.samples == 1
    history.advance(NOW_MS + 62_500)
    assert history.compute.samples == 0


def _rows(*samples: tuple[str, int, float]) -> list[tuple[object, ...]]:
    return [("ml", workload, f"{workload}-0", "gpu-a", ts, value, 2**30)
            for workload, ts, value in samples]  # fmt: skip


def test_rows_read_again_are_counted_once_and_the_cut_follows_the_clock() -> None:
    histories = UsageHistories()
    histories.adopt({("ml", "a"): WorkloadHistory(DAY_S, NOW_MS)})
    histories.fill_cut(NOW_MS)
    first = _rows(("a", NOW_MS - 30_000, 1.0), ("a", NOW_MS - 5_000, 2.0), ("b", NOW_MS, 9.0))
    histories.add_recent(RECENT_COLUMNS, first, NOW_MS)
    assert histories.workloads[("ml", "a")].compute.samples == 2  # b is not tracked
    late = _rows(("a", NOW_MS - 50_000, 3.0))  # written late, still after the cut
    histories.add_recent(RECENT_COLUMNS, first + late, NOW_MS + 10_000)
    history = histories.workloads[("ml", "a")]
    assert history.compute.samples == 3
    assert history.compute.percentiles([1.0]) == [3.0]
    assert histories.cut_ms == NOW_MS + 10_000 - OVERLAP_MS
    assert all(key[4] > histories.cut_ms for key in histories.seen)
    assert len(histories.seen) == 2  # the late row is at the cut now: never read again


def test_histories_of_workloads_gone_or_with_another_window_are_dropped() -> None:
    histories = UsageHistories()
    histories.adopt({("ml", "a"): WorkloadHistory(DAY_S, NOW_MS),
                     ("ml", "b"): WorkloadHistory(DAY_S, NOW_MS)})  # fmt: skip
    histories.fill_cut(NOW_MS)
    histories.add_recent(RECENT_COLUMNS, _rows(("a", NOW_MS, 1.0), ("b", NOW_MS, 1.0)), NOW_MS)
    histories.keep_only({("ml", "a"): DAY_S, ("ml", "b"): 3600.0})
    assert set(histories.workloads) == {("ml", "a")}
    assert {key[1] for key in histories.seen} == {"a"}
    assert histories.missing({("ml", "a"): DAY_S, ("ml", "b"): 3600.0}) == {3600.0: [("ml", "b")]}
    histories.keep_only({})
    assert (histories.workloads, histories.seen, histories.cut_ms) == ({}, set(), None)


def test_a_value_that_is_not_a_number_is_left_out() -> None:
    history = WorkloadHistory(DAY_S, NOW_MS)
    for bad in (None, math.nan, math.inf, -1.0, "x"):
        history.add(NOW_MS, bad, bad)
    history.add(NOW_MS, "2.5", 7)
    assert (history.compute.samples, history.vram.samples) == (1, 1)
    usage = history.usage(SET)
    assert usage is not None and usage.compute.target == 2500.0 and usage.vram.upper == 7.0
