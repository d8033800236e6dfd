"""The row check of the write path (metrics.md §9.3): what our own writers produce passes it,
and each kind of bad row is named with its reason."""

from __future__ import annotations

import logging

import pytest

from tensorfusion.domain.metrics.line_protocol import encode_rows
from tensorfusion.domain.metrics.recorders import (
    GPUUsageSample,
    WorkerUsageSample,
    gpu_usage_rows,
    snapshot_rows,
    worker_usage_rows,
)
from tensorfusion.domain.metrics.row_check import (
    MAX_TAG_VALUE_CHARS,
    DropReason,
    RowProblem,
    check_row,
)
from tensorfusion.domain.metrics.row_intake import take_in_body
from tensorfusion.domain.metrics.rows import FieldValue, MetricRow
from tensorfusion.domain.metrics.schema import TABLE_NAMES
from tensorfusion.hypervisor.system_log import SystemLogRows
from tests.unit.metrics.test_metrics_recorders import _snapshot

NOW_MS = 1_700_000_000_000


def _own_rows() -> list[MetricRow]:
    gpu = GPUUsageSample("node-a", "pool", "GPU-1", 42.5, 312.0, 1024, 80 * 2**30, 60.0)
    worker = WorkerUsageSample("w", "ns", "pool", "node-a", "GPU-1", "wl", 10.0, 312.0, 512,
                               2**30, 3, extra_tags={"team": "a"})  # fmt: skip
    log = SystemLogRows(component="hypervisor", pod="p", namespace="ns", container="c")
    log.emit(logging.LogRecord("x", logging.ERROR, __file__, 1, "boom", None, None))
    rows = [*snapshot_rows(_snapshot(3), NOW_MS), *gpu_usage_rows([gpu], NOW_MS)]
    rows += [*worker_usage_rows([worker], NOW_MS), *log.drain()]
    return rows


def test_what_our_writers_produce_passes_the_check_of_the_write_path() -> None:
    rows = _own_rows()
    assert {row.table for row in rows} == set(TABLE_NAMES)
    for row in rows:
        assert not isinstance(check_row(row, now_ms=None), RowProblem), row
    # As the embedded store's write path receives them: every line taken, none dropped.
    log_row = rows[-1]
    intake = take_in_body(encode_rows(rows), precision="ms", now_ms=log_row.ts_ms)
    assert intake.dropped == {}, intake.summary()
    assert len(intake.rows) == len(rows)


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"temperature": 60}, {"temperature": 60.0}),
        ({"memory_bytes": 1024.0}, {"memory_bytes": 1024}),
        ({"temperature": 1.5, "memory_bytes": 7}, {"temperature": 1.5, "memory_bytes": 7}),
    ],
    ids=["int-in-float", "whole-float-in-int", "as-is"],
)
def test_numbers_are_stored_as_their_column_types(
    fields: dict[str, FieldValue], expected: dict[str, FieldValue]
) -> None:
    checked = check_row(MetricRow("tf_gpu_usage", NOW_MS, {"node": "n"}, fields), now_ms=NOW_MS)
    assert isinstance(checked, MetricRow)
    assert checked.fields == expected
    assert [type(v) for v in checked.fields.values()] == [type(v) for v in expected.values()]


@pytest.mark.parametrize(
    ("row", "reason", "named"),
    [
        (MetricRow("tf_gpu_usage", NOW_MS, {}, {"memory_bytes": 1.5}), "wrong_type", "1.5"),
        (MetricRow("tf_gpu_usage", NOW_MS, {}, {"temperature": True}), "wrong_type", "True"),
        (MetricRow("tf_gpu_usage", NOW_MS, {}, {"memory_bytes": 2**63}), "wrong_type", "64-bit"),
        (MetricRow("tf_system_log", NOW_MS, {}, {"message": 5}), "wrong_type", "message"),
        (
            MetricRow("tf_gpu_usage", 1_000, {}, {"temperature": 1.0}),
            "timestamp_out_of_range",
            "precision",
        ),
        (
            MetricRow("tf_gpu_usage", NOW_MS + 86_400_001, {}, {"temperature": 1.0}),
            "timestamp_out_of_range",
            "now + 1 day",
        ),
        (
            MetricRow(
                "tf_gpu_usage",
                NOW_MS,
                {"node": "x" * (MAX_TAG_VALUE_CHARS + 1)},
                {"temperature": 1.0},
            ),
            "tag_too_long",
            "node",
        ),
        (
            MetricRow("tf_gpu_usage", NOW_MS, {"team": "a"}, {"temperature": 1.0}),
            "unknown_column",
            "team",
        ),
        (
            MetricRow("tf_worker_usage", NOW_MS, {"bad-name": "a"}, {"memory_bytes": 1}),
            "unknown_column",
            "bad-name",
        ),
        (MetricRow("metrics", NOW_MS, {}, {"x": 1.0}), "unknown_table", "metrics"),
    ],
)
def test_a_bad_row_is_named_with_its_reason(row: MetricRow, reason: str, named: str) -> None:
    problem = check_row(row, now_ms=NOW_MS)
    assert isinstance(problem, RowProblem)
    assert problem.reason == DropReason(reason)
    assert named in problem.message


def test_a_writer_on_its_own_clock_is_held_to_int64_nanoseconds_only() -> None:
    simulated = MetricRow("tf_gpu_usage", 1_000, {}, {"temperature": 1.0})
    assert check_row(simulated, now_ms=None) is simulated
    beyond = MetricRow("tf_gpu_usage", 2**63 // 1_000_000 + 1, {}, {"temperature": 1.0})
    problem = check_row(beyond, now_ms=None)
    assert isinstance(problem, RowProblem)
    assert problem.reason is DropReason.TIMESTAMP_OUT_OF_RANGE


def test_bad_lines_are_dropped_alone_and_counted() -> None:
    body = "\n".join([
        f"tf_gpu_usage,node=n temperature=1 {NOW_MS}",
        "not line protocol",
        f"tf_gpu_usage,node=n temperature=1 {NOW_MS}1_000",
        'tf_gpu_usage,node=n message="unterminated',
    ])  # fmt: skip
    intake = take_in_body(body, precision="ms", now_ms=NOW_MS)
    assert len(intake.rows) == 1
    assert intake.dropped == {"malformed": 3}
    assert "line 2" in intake.summary() and "line 4" in intake.summary()
