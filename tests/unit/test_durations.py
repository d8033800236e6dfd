"""Go durations, read exactly, shared by admission, the CRD models and the simulator."""

from __future__ import annotations

import pytest

from tensorfusion.domain.durations import DurationError, parse_go_duration


@pytest.mark.parametrize(
    ("text", "nanoseconds"),
    [
        ("0", 0),
        ("300ms", 300_000_000),
        ("1h30m", 5_400_000_000_000),
        ("1.5h", 5_400_000_000_000),
        ("2us", 2_000),
        ("2µs", 2_000),
        ("+5s", 5_000_000_000),
    ],
)
def test_reads_go_durations(text: str, nanoseconds: int) -> None:
    assert parse_go_duration(text) == nanoseconds


@pytest.mark.parametrize("text", ["", "5", "-5m", "5 m", "m", "1d", ".s", "1h-5m"])
def test_rejects_what_is_not_a_non_negative_go_duration(text: str) -> None:
    with pytest.raises(DurationError, match="not a duration"):
        parse_go_duration(text)
