"""WorkQueue: every rule of client-go's rate-limited workqueue, on a fake clock."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

import pytest

from tensorfusion.domain.backoff import Backoff
from tensorfusion.runtime.work_queue import (
    DEFAULT_RETRY_BACKOFF,
    QueueShutDownError,
    WorkQueue,
)


@dataclass
class FakeTimer:
    when: float
    callback: Callable[[], None]
    cancelled: bool = False

    def cancel(self) -> None:
        self.cancelled = True


class FakeTimers:
    """A clock that moves only when told, and the callbacks due by then."""

    def __init__(self) -> None:
        self.now = 0.0
        self.timers: list[FakeTimer] = []

    def time(self) -> float:
        return self.now

    def call_later(self, delay: float, callback: Callable[[], None]) -> FakeTimer:
        timer = FakeTimer(self.now + delay, callback)
        self.timers.append(timer)
        return timer

    def advance(self, seconds: float) -> None:
        self.now += seconds
        due = sorted((t for t in self.timers if t.when <= self.now), key=lambda t: t.when)
        self.timers = [t for t in self.timers if t.when > self.now]
        for timer in due:
            if not timer.cancelled:
                timer.callback()

    @property
    def active(self) -> int:
        return sum(not t.cancelled for t in self.timers)


def new_queue(timers: FakeTimers, backoff: Backoff = DEFAULT_RETRY_BACKOFF) -> WorkQueue[str]:
    return WorkQueue("test", backoff=backoff, timers=timers)


async def drain(queue: WorkQueue[str]) -> list[str]:
    """Every key queued now, each marked done."""
    keys = []
    while queue.depth:
        key = await queue.get()
        queue.done(key)
        keys.append(key)
    return keys


async def until(condition: Callable[[], bool], what: str) -> None:
    for _ in range(10_000):
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError(f"never happened: {what}")


async def test_a_queued_key_is_not_queued_twice_and_order_is_kept() -> None:
    queue = new_queue(FakeTimers())
    for key in ["a", "b", "a", "c", "b"]:
        queue.add(key)
    assert queue.depth == len(queue) == 3
    assert queue.stats.adds == 3
    assert await drain(queue) == ["a", "b", "c"]


async def test_a_key_added_while_in_work_is_processed_once_more_after_done() -> None:
    queue = new_queue(FakeTimers())
    queue.add("a")
    assert await queue.get() == "a"
    assert queue.processing == 1
    queue.add("a")
    queue.add("a")
    assert queue.depth == 0  # not handed to a second worker while in work
    queue.done("a")
    assert queue.depth == 1
    assert await drain(queue) == ["a"]
    assert queue.processing == 0
    assert queue.stats.adds == 2


async def test_a_key_in_work_waits_for_done_even_with_an_idle_worker() -> None:
    queue = new_queue(FakeTimers())
    queue.add("a")
    first = await queue.get()
    queue.add("a")
    second_worker = asyncio.create_task(queue.get())
    await until(lambda: queue.depth == 0, "nothing queued")
    for _ in range(10):
        await asyncio.sleep(0)
    assert not second_worker.done()
    queue.done(first)
    assert await asyncio.wait_for(second_worker, timeout=5) == "a"


async def test_get_waits_for_an_add() -> None:
    queue = new_queue(FakeTimers())
    worker = asyncio.create_task(queue.get())
    for _ in range(10):
        await asyncio.sleep(0)
    assert not worker.done()
    queue.add("x")
    assert await asyncio.wait_for(worker, timeout=5) == "x"


async def test_each_waiting_worker_gets_a_different_key() -> None:
    queue = new_queue(FakeTimers())
    workers = [asyncio.create_task(queue.get()) for _ in range(3)]
    await asyncio.sleep(0)
    queue.add("a")
    queue.add("b")
    queue.add("c")
    keys = await asyncio.wait_for(asyncio.gather(*workers), timeout=5)
    assert sorted(keys) == ["a", "b", "c"]


async def test_add_after_queues_the_key_when_its_delay_is_over() -> None:
    timers = FakeTimers()
    queue = new_queue(timers)
    queue.add_after("a", 10.0)
    assert (queue.depth, queue.delayed) == (0, 1)
    timers.advance(9.9)
    assert queue.depth == 0
    timers.advance(0.1)
    assert (queue.depth, queue.delayed) == (1, 0)
    assert await drain(queue) == ["a"]


async def test_a_key_waiting_twice_keeps_the_earlier_time() -> None:
    timers = FakeTimers()
    queue = new_queue(timers)
    queue.add_after("sooner", 10.0)
    queue.add_after("sooner", 5.0)
    queue.add_after("later", 10.0)
    queue.add_after("later", 20.0)
    assert queue.delayed == 2
    assert timers.active == 2
    timers.advance(5.0)
    assert await drain(queue) == ["sooner"]
    timers.advance(5.0)
    assert await drain(queue) == ["later"]
    timers.advance(100.0)
    assert queue.depth == 0


async def test_add_after_without_delay_adds_now() -> None:
    timers = FakeTimers()
    queue = new_queue(timers)
    queue.add_after("a", 0.0)
    queue.add_after("b", -1.0)
    assert queue.delayed == 0
    assert await drain(queue) == ["a", "b"]


async def test_a_delayed_key_already_queued_is_not_queued_twice() -> None:
    timers = FakeTimers()
    queue = new_queue(timers)
    queue.add("a")
    queue.add_after("a", 1.0)
    timers.advance(1.0)
    assert await drain(queue) == ["a"]


async def test_retry_backs_off_per_key_until_forgotten() -> None:
    timers = FakeTimers()
    queue = new_queue(timers, Backoff(initial=0.005, maximum=1000.0))
    delays = [queue.retry("a") for _ in range(4)]
    assert delays == pytest.approx([0.005, 0.01, 0.02, 0.04])
    assert queue.retry("b") == pytest.approx(0.005)  # each key has its own backoff
    assert queue.retries("a") == 4
    assert queue.stats.retries == 5
    queue.forget("a")
    assert queue.retries("a") == 0
    assert queue.retry("a") == pytest.approx(0.005)
    for _ in range(30):
        queue.retry("c")
    assert queue.retry("c") == 1000.0


async def test_retry_adds_the_key_after_its_delay() -> None:
    timers = FakeTimers()
    queue = new_queue(timers, Backoff(initial=2.0, maximum=60.0))
    queue.add("a")
    key = await queue.get()
    queue.retry(key)
    queue.done(key)
    assert queue.depth == 0
    timers.advance(1.9)
    assert queue.depth == 0
    timers.advance(0.1)
    assert await drain(queue) == ["a"]


def test_the_default_retry_backoff_is_client_gos() -> None:
    assert Backoff(initial=0.005, maximum=1000.0, factor=2.0) == DEFAULT_RETRY_BACKOFF


async def test_shutdown_hands_out_what_is_queued_then_stops_workers() -> None:
    timers = FakeTimers()
    queue = new_queue(timers)
    queue.add("a")
    queue.add_after("later", 1.0)
    queue.shutdown()
    assert queue.is_shut_down
    queue.add("b")
    queue.add_after("c", 1.0)
    queue.retry("d")
    assert (queue.depth, queue.delayed, timers.active) == (1, 0, 0)
    timers.advance(10.0)
    assert await queue.get() == "a"
    with pytest.raises(QueueShutDownError, match="'test' is shut down"):
        await queue.get()


async def test_shutdown_wakes_waiting_workers() -> None:
    queue = new_queue(FakeTimers())
    workers = [asyncio.create_task(queue.get()) for _ in range(2)]
    await asyncio.sleep(0)
    queue.shutdown()
    results = await asyncio.wait_for(asyncio.gather(*workers, return_exceptions=True), timeout=5)
    assert all(isinstance(result, QueueShutDownError) for result in results)


async def test_immediate_shutdown_drops_queued_keys() -> None:
    queue = new_queue(FakeTimers())
    queue.add("a")
    queue.add("b")
    in_work = await queue.get()
    queue.add(in_work)
    queue.shutdown(immediate=True)
    queue.done(in_work)
    assert queue.depth == 0
    with pytest.raises(QueueShutDownError):
        await queue.get()


async def test_done_for_a_key_not_in_work_is_an_error() -> None:
    queue = new_queue(FakeTimers())
    queue.add("a")
    with pytest.raises(ValueError, match=r"done\('a'\) for a key not in work"):
        queue.done("a")


async def test_the_event_loop_is_the_default_clock() -> None:
    queue: WorkQueue[str] = WorkQueue("loop-timers")
    queue.add_after("soon", 0.001)
    assert await asyncio.wait_for(queue.get(), timeout=5) == "soon"
