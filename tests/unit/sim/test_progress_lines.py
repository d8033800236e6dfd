"""Progress on output that is not a terminal: one line per 10 s of wall time, on stderr."""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tensorfusion.cli import simulate as simulate_command
from tensorfusion.cli.main import app
from tensorfusion.sim.progress import ProgressLines, progress_line

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
LINE = re.compile(r"simulate: [\d,]+/[\d,]+ pods arrived \(\d+%\), [\d,]+ pods/s")


def clock(times: list[float]) -> Iterator[float]:
    yield from times


def test_a_line_every_ten_seconds_with_done_total_and_rate() -> None:
    written: list[str] = []
    ticks = clock([100.0, 104.0, 109.9, 110.0, 115.0, 119.9, 120.5, 200.0])
    progress = ProgressLines(written.append, clock=lambda: next(ticks))
    for done in range(1, 9):
        progress(done * 1000, 8000)
    assert written == [
        "simulate: 4,000/8,000 pods arrived (50%), 400 pods/s\n",
        "simulate: 7,000/8,000 pods arrived (88%), 341 pods/s\n",
        "simulate: 8,000/8,000 pods arrived (100%), 80 pods/s\n",
    ]


def test_the_line_format_of_an_empty_trace() -> None:
    assert progress_line(0, 0, 0.0) == "simulate: 0/0 pods arrived (100%), 0 pods/s"


def test_simulate_writes_progress_lines_to_stderr_when_not_a_terminal(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("FORCE_COLOR", "FORCE_TERMINAL", "TTY_COMPATIBLE"):
        monkeypatch.delenv(name, raising=False)  # rich would take the output for a terminal
    ticks = iter(float(t) for t in range(0, 10**6, 4))
    lines = functools.partial(ProgressLines, clock=lambda: next(ticks))
    monkeypatch.setattr(simulate_command, "ProgressLines", lines)
    result = CliRunner().invoke(app, [
        "simulate", str(EXAMPLES / "cluster.yaml"), str(EXAMPLES / "workload.yaml"),
        "--no-alerts", "--until", "30m",
    ])  # fmt: skip
    assert result.exit_code == 0, result.output
    progress = result.stderr.splitlines()
    assert len(progress) > 10
    assert all(LINE.fullmatch(line) for line in progress), progress[:3]
    assert "scheduling decisions" in result.stdout


def test_quiet_runs_print_no_progress(monkeypatch: pytest.MonkeyPatch) -> None:
    ticks = iter(float(t) for t in range(0, 10**6, 4))
    lines = functools.partial(ProgressLines, clock=lambda: next(ticks))
    monkeypatch.setattr(simulate_command, "ProgressLines", lines)
    result = CliRunner().invoke(app, [
        "simulate", str(EXAMPLES / "cluster.yaml"), str(EXAMPLES / "workload.yaml"),
        "--no-alerts", "--until", "30m", "--quiet",
    ])  # fmt: skip
    assert result.exit_code == 0, result.output
    assert result.stderr == ""


@pytest.mark.parametrize("value", ["soon", "0", "-5m"])
def test_an_invalid_horizon_exits_2(value: str) -> None:
    result = CliRunner().invoke(app, [
        "simulate", str(EXAMPLES / "cluster.yaml"), str(EXAMPLES / "workload.yaml"),
        "--until", value,
    ])  # fmt: skip
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("error: --until: invalid value"), result.stderr
