"""The controller's loop-lag figures: a histogram of wake-up lateness and the highest lag of
the last 10 s (`LoopLagProbe`), exposed by `ControllerCollector`."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from tensorfusion.app.controller_metrics import LoopLagProbe


def test_the_highest_lag_is_that_of_the_window() -> None:
    probe = LoopLagProbe(window=10.0)
    probe.record(0.0, 3.0)
    probe.record(1.0, 0.5)
    probe.record(2.0, 1.0)
    assert probe.highest(5.0) == 3.0
    assert probe.highest(10.5) == 1.0  # the 3 s lag left the window
    assert probe.highest(30.0) == 0.0
    assert probe.last == 1.0


def test_the_histogram_counts_each_wake_up_in_its_bucket() -> None:
    probe = LoopLagProbe()
    for lag in (0.0005, 0.02, 0.02, 12.0):
        probe.record(0.0, lag)
    registry = CollectorRegistry()

    class Only(Collector):
        def collect(self) -> Iterable[Metric]:
            return probe.metrics(1.0)

    registry.register(Only())
    text = generate_latest(registry).decode()
    assert 'tf_controller_event_loop_lag_seconds_bucket{le="0.001"} 1.0' in text
    assert 'tf_controller_event_loop_lag_seconds_bucket{le="0.025"} 3.0' in text
    assert 'tf_controller_event_loop_lag_seconds_bucket{le="10.0"} 3.0' in text
    assert 'tf_controller_event_loop_lag_seconds_bucket{le="+Inf"} 4.0' in text
    assert "tf_controller_event_loop_lag_seconds_count 4.0" in text
    assert "tf_controller_event_loop_lag_max_seconds 12.0" in text


async def test_a_blocked_loop_shows_as_lag() -> None:
    probe = LoopLagProbe(interval=0.01)
    task = asyncio.create_task(probe.run())
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 10
    while sum(probe.buckets) < 2:
        assert loop.time() < deadline
        await asyncio.sleep(0.01)
    blocked_until = loop.time() + 0.3
    while loop.time() < blocked_until:  # the loop does CPU work: nothing else runs
        pass
    counted = sum(probe.buckets)
    while sum(probe.buckets) == counted:
        assert loop.time() < deadline
        await asyncio.sleep(0.01)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    assert probe.highest(loop.time()) >= 0.2


def test_work_is_shed_while_the_loop_was_late_in_the_last_seconds() -> None:
    probe = LoopLagProbe(window=10.0)
    probe.record(0.0, 0.9)
    probe.record(1.0, 0.1)
    assert probe.behind(1.5, limit=0.5, over=2.0) == "the event loop is 0.9 s behind (limit 0.5 s)"
    assert probe.behind(2.5, limit=0.5, over=2.0) is None  # the 0.9 s lag is 2.5 s old
    assert probe.highest(2.5) == 0.9  # still the highest of the 10 s window
    clock = [1.5]
    shed = probe.shedder(lambda: clock[0])
    assert shed() is not None
    clock[0] = 3.0
    assert shed() is None
