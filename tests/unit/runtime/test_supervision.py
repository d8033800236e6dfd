"""Supervisor: no task dies silently; failures are logged, counted, backed off and restarted."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from tensorfusion.domain.backoff import Backoff
from tensorfusion.runtime.supervision import (
    Supervisor,
    SupervisorStoppedError,
    TaskFailure,
)

LOGGER = "tensorfusion.runtime.supervision"


class FakeTime:
    """A monotonic clock and a sleep that only moves it forward (and lets other tasks run)."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now

    async def sleep(self, delay: float) -> None:
        self.sleeps.append(delay)
        self.now += delay
        await asyncio.sleep(0)


async def until(condition: Callable[[], bool], what: str) -> None:
    """Let the event loop run until ``condition`` holds; fail after a bounded number of turns."""
    for _ in range(10_000):
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError(f"never happened: {what}")


def make_supervisor(
    time: FakeTime,
    *,
    on_fatal: Callable[[TaskFailure], None] | None = None,
    reset_after: float = 60.0,
) -> Supervisor:
    return Supervisor(
        sleep=time.sleep, clock=time.clock, on_fatal=on_fatal, reset_after=reset_after
    )


async def block_forever() -> None:
    await asyncio.Event().wait()


def test_backoff_doubles_up_to_its_maximum() -> None:
    backoff = Backoff(initial=1.0, maximum=30.0)
    assert [backoff.delay(n) for n in range(1, 9)] == [1, 2, 4, 8, 16, 30, 30, 30]
    assert backoff.delay(10**6) == 30.0
    assert Backoff(initial=0.005, maximum=1000.0, factor=3.0).delay(3) == pytest.approx(0.045)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"initial": 0.0}, "initial delay must be > 0"),
        ({"initial": 2.0, "maximum": 1.0}, "must be >= the initial delay"),
        ({"factor": 0.5}, "factor must be >= 1"),
    ],
)
def test_backoff_rejects_bad_settings(options: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Backoff(**options)


def test_backoff_delay_counts_from_one() -> None:
    with pytest.raises(ValueError, match="failures must be >= 1"):
        Backoff().delay(0)


async def test_failing_task_is_logged_counted_and_restarted_with_growing_backoff(
    caplog: pytest.LogCaptureFixture,
) -> None:
    time = FakeTime()
    runs = 0

    async def flaky() -> None:
        nonlocal runs
        runs += 1
        if runs <= 3:
            raise RuntimeError(f"boom {runs}")
        await block_forever()

    caplog.set_level(logging.ERROR, logger=LOGGER)
    async with make_supervisor(time) as supervisor:
        stats = supervisor.start("flaky", flaky, backoff=Backoff(initial=1.0, maximum=30.0))
        await until(lambda: runs == 4, "the fourth run")
        assert (stats.starts, stats.failures, stats.restarts) == (4, 3, 3)
        assert stats.running
        assert stats.last_error == "RuntimeError('boom 3')"
        assert time.sleeps == [1.0, 2.0, 4.0]
        assert supervisor.running == {"flaky"}
    failures = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(failures) == 3
    assert all("'flaky'" in r.getMessage() and r.exc_info for r in failures)
    assert "boom 1" in failures[0].getMessage()
    assert "restarting in 1 s" in failures[0].getMessage()
    assert not stats.running


async def test_a_long_run_resets_the_backoff() -> None:
    time = FakeTime()
    runs = 0

    async def fails_after_a_while() -> None:
        nonlocal runs
        runs += 1
        if runs == 1:
            raise RuntimeError("at once")
        if runs <= 3:
            time.now += 120.0  # ran two minutes, longer than reset_after
            raise RuntimeError("after two minutes")
        await block_forever()

    async with make_supervisor(time, reset_after=60.0) as supervisor:
        supervisor.start("worker", fails_after_a_while, backoff=Backoff(initial=1.0))
        await until(lambda: runs == 4, "the fourth run")
    assert time.sleeps == [1.0, 1.0, 1.0]


async def test_a_task_that_returns_is_reported_and_restarted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    time = FakeTime()
    runs = 0

    async def returns_twice() -> None:
        nonlocal runs
        runs += 1
        if runs > 2:
            await block_forever()

    caplog.set_level(logging.INFO, logger=LOGGER)
    async with make_supervisor(time) as supervisor:
        stats = supervisor.start("returner", returns_twice)
        await until(lambda: runs == 3, "the third run")
        assert (stats.returns, stats.failures, stats.restarts) == (2, 0, 2)
    assert time.sleeps == [1.0, 2.0]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [
        "task 'returner' returned; restarting in 1 s",
        "task 'returner' returned; restarting in 2 s",
    ]


async def test_without_restart_a_task_ends_after_one_run_and_says_so(
    caplog: pytest.LogCaptureFixture,
) -> None:
    time = FakeTime()

    async def fails() -> None:
        raise ValueError("bad input")

    async def finishes() -> None:
        return None

    caplog.set_level(logging.INFO, logger=LOGGER)
    async with make_supervisor(time) as supervisor:
        failed = supervisor.start("once-failing", fails, restart=False)
        finished = supervisor.start("once-finishing", finishes, restart=False)
        await until(lambda: not failed.running and not finished.running, "both tasks ended")
        assert supervisor.running == frozenset()
    assert (failed.starts, failed.failures, failed.restarts) == (1, 1, 0)
    assert (finished.starts, finished.returns, finished.restarts) == (1, 1, 0)
    assert time.sleeps == []
    messages = {r.getMessage(): r.levelno for r in caplog.records}
    assert messages["task 'once-failing' failed (ValueError('bad input')); not restarted"] == (
        logging.ERROR
    )
    assert messages["task 'once-finishing' returned; not restarted"] == logging.INFO


async def test_a_critical_failure_stops_the_supervisor_and_tells_the_owner(
    caplog: pytest.LogCaptureFixture,
) -> None:
    time = FakeTime()
    reported: list[TaskFailure] = []
    other_cancelled = asyncio.Event()
    error = ConnectionError("lease lost")

    async def other() -> None:
        try:
            await block_forever()
        except asyncio.CancelledError:
            other_cancelled.set()
            raise

    async def elector() -> None:
        await asyncio.sleep(0)
        raise error

    supervisor = make_supervisor(time, on_fatal=reported.append)
    other_stats = supervisor.start("other", other)
    supervisor.start("elector", elector, critical=True)
    failure = await asyncio.wait_for(supervisor.wait_fatal(), timeout=5)
    assert failure == TaskFailure("elector", error)
    assert str(failure) == "critical task 'elector' failed: ConnectionError('lease lost')"
    assert reported == [failure]
    assert supervisor.fatal == failure
    await asyncio.wait_for(other_cancelled.wait(), timeout=5)
    with pytest.raises(SupervisorStoppedError, match="after critical task 'elector' failed"):
        supervisor.start("late", block_forever)
    await supervisor.stop()
    assert supervisor.running == frozenset()
    assert not other_stats.running
    assert time.sleeps == []
    assert any(
        r.levelno == logging.CRITICAL and "'elector'" in r.getMessage() for r in caplog.records
    )


async def test_an_on_fatal_hook_that_raises_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    def broken_hook(failure: TaskFailure) -> None:
        raise RuntimeError("hook broke")

    async def fails() -> None:
        raise RuntimeError("fatal")

    supervisor = make_supervisor(FakeTime(), on_fatal=broken_hook)
    supervisor.start("critical", fails, critical=True)
    await asyncio.wait_for(supervisor.wait_fatal(), timeout=5)
    await supervisor.stop()
    assert any("on_fatal hook raised" in r.getMessage() for r in caplog.records)


async def test_stop_cancels_every_task_and_waits_for_them() -> None:
    time = FakeTime()
    cleaned: list[str] = []

    def worker(name: str) -> Callable[[], Coroutine[Any, Any, None]]:
        async def run() -> None:
            try:
                await block_forever()
            finally:
                await asyncio.sleep(0)  # cleanup that needs the loop
                cleaned.append(name)

        return run

    async def always_fails() -> None:
        raise RuntimeError("again")

    supervisor = make_supervisor(time)
    supervisor.start("a", worker("a"))
    supervisor.start("b", worker("b"))
    backing_off = supervisor.start("c", always_fails, backoff=Backoff(initial=5.0))
    await until(lambda: backing_off.failures >= 1, "c failed once")
    await supervisor.stop()
    assert sorted(cleaned) == ["a", "b"]
    assert supervisor.running == frozenset()
    assert all(not stats.running for stats in supervisor.stats.values())
    with pytest.raises(SupervisorStoppedError):
        supervisor.start("d", block_forever)


async def test_a_name_is_unique_while_its_task_is_active() -> None:
    supervisor = make_supervisor(FakeTime())
    first = supervisor.start("loop", block_forever)
    await until(lambda: first.starts == 1, "the first run began")
    with pytest.raises(ValueError, match="'loop' is already running"):
        supervisor.start("loop", block_forever)
    await supervisor.cancel("loop")
    assert not first.running
    assert supervisor.running == frozenset()
    again = supervisor.start("loop", block_forever)
    assert again is first
    await until(lambda: again.starts == 2, "the second run began")
    await supervisor.cancel("missing")  # nothing to cancel: no error
    await supervisor.stop()


async def test_a_task_cancelled_before_its_first_run_is_not_running() -> None:
    supervisor = make_supervisor(FakeTime())
    stats = supervisor.start("short-lived", block_forever)
    await supervisor.cancel("short-lived")
    assert stats.starts == 0
    assert not stats.running
    await supervisor.stop()
