"""`BoundedOffload`: work runs in its own threads, at most `limit` calls at once, 429 beyond,
and a call counts until its thread returns even when the waiting request is cancelled."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable

import pytest

from tensorfusion.api_server.offload import BoundedOffload
from tensorfusion.api_server.responses import ApiError

DEADLINE_S = 10.0


async def until(condition: Callable[[], bool], what: str) -> None:
    """Poll `condition` until it holds (fails after DEADLINE_S)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + DEADLINE_S
    while not condition():
        assert loop.time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.005)


def blocked(release: threading.Event, started: threading.Event | None = None) -> Callable[[], str]:
    def work() -> str:
        if started is not None:
            started.set()
        assert release.wait(DEADLINE_S), "never released"
        return threading.current_thread().name

    return work


async def test_work_runs_in_a_thread_of_its_own_and_returns_its_value() -> None:
    offload = BoundedOffload(name="unit", limit=2)
    try:
        name = await offload.run(threading.current_thread)
        assert name is not threading.current_thread()
        assert name.name.startswith("offload-unit")
        assert offload.in_flight == 0
    finally:
        offload.close()


async def test_an_exception_of_the_work_reaches_the_caller_and_frees_the_slot() -> None:
    offload = BoundedOffload(name="unit", limit=1)

    def fail() -> None:
        raise ValueError("bad body")

    try:
        with pytest.raises(ValueError, match="bad body"):
            await offload.run(fail)
        assert offload.in_flight == 0
        assert await offload.run(lambda: 7) == 7
    finally:
        offload.close()


async def test_a_call_beyond_the_limit_is_429_with_retry_after() -> None:
    offload = BoundedOffload(name="simulate-schedule", limit=2, retry_after_s=3)
    release = threading.Event()
    try:
        calls = [asyncio.create_task(offload.run(blocked(release))) for _ in range(2)]
        await until(lambda: offload.in_flight == 2, "two calls in flight")
        with pytest.raises(ApiError) as refused:
            await offload.run(lambda: "never")
        assert refused.value.status == 429
        assert refused.value.code == "TooManyRequests"
        assert refused.value.headers == {"Retry-After": "3"}
        assert "simulate-schedule: 2 requests already in progress" in refused.value.message
        with pytest.raises(ApiError):
            offload.refuse_if_full()
        release.set()
        assert all(name.startswith("offload-") for name in await asyncio.gather(*calls))
        assert offload.in_flight == 0
        offload.refuse_if_full()  # room again
    finally:
        release.set()
        offload.close()


async def test_a_cancelled_request_keeps_its_slot_until_its_thread_returns() -> None:
    """A client that goes away must not free a slot whose thread still works: otherwise a
    stream of abandoned requests queues unbounded work behind the threads."""
    offload = BoundedOffload(name="unit", limit=1)
    release, started = threading.Event(), threading.Event()
    try:
        call = asyncio.create_task(offload.run(blocked(release, started)))
        await until(started.is_set, "the work to start")
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        assert offload.in_flight == 1
        with pytest.raises(ApiError, match="1 requests already in progress"):
            await offload.run(lambda: "queued behind a busy thread")
        release.set()
        await until(lambda: offload.in_flight == 0, "the thread to return")
        assert await offload.run(lambda: "after") == "after"
    finally:
        release.set()
        offload.close()


@pytest.mark.parametrize("limit", [0, -1])
def test_a_limit_below_one_is_refused(limit: int) -> None:
    with pytest.raises(ValueError, match="at least 1"):
        BoundedOffload(name="unit", limit=limit)


async def test_the_loop_runs_while_the_work_runs() -> None:
    offload = BoundedOffload(name="unit", limit=1)
    release = threading.Event()
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while not release.is_set():
            ticks += 1
            await asyncio.sleep(0)

    try:
        call: Awaitable[str] = asyncio.create_task(offload.run(blocked(release)))
        ticker = asyncio.create_task(tick())
        await until(lambda: ticks > 100, "the loop to run other tasks")
        release.set()
        await call
        await ticker
    finally:
        release.set()
        offload.close()


async def test_shed_refuses_work_with_its_reason_while_it_gives_one() -> None:
    reason: list[str | None] = ["the event loop is 2.0 s behind (limit 0.5 s)"]
    offload = BoundedOffload(name="unit", limit=4, shed=lambda: reason[0])
    try:
        with pytest.raises(ApiError) as refused:
            await offload.run(lambda: "never")
        assert refused.value.status == 429
        assert refused.value.message == (
            "unit: the event loop is 2.0 s behind (limit 0.5 s); retry"
        )
        assert offload.in_flight == 0
        reason[0] = None
        assert await offload.run(lambda: "now") == "now"
    finally:
        offload.close()
