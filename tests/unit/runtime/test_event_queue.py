"""The Event queue of the extender: submit never waits, writes keep order, drops are counted."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Literal

import pytest

from tensorfusion.adapters.kube.events import InvolvedObject
from tensorfusion.runtime.event_queue import EventQueue
from tensorfusion.runtime.leader_election import NotLeaderError

POD = InvolvedObject(kind="Pod", name="p", namespace="ns", uid="u", api_version="v1")
DEADLINE_S = 10.0


class SlowSink:
    """Records each Event once `gate` is open."""

    def __init__(self) -> None:
        self.gate = asyncio.Event()
        self.written: list[str] = []

    async def record(
        self,
        involved: InvolvedObject,
        type_: Literal["Normal", "Warning"],
        reason: str,
        message: str,
    ) -> None:
        await self.gate.wait()
        self.written.append(message)


def always_leading() -> float:
    return 10.0


async def until(condition: Callable[[], bool]) -> None:
    async with asyncio.timeout(DEADLINE_S):
        while not condition():
            await asyncio.sleep(0)


async def test_submit_returns_at_once_and_one_writer_keeps_the_order() -> None:
    sink = SlowSink()
    queue = EventQueue(sink, fence=always_leading, writers=1)
    for i in range(5):
        queue.submit(POD, "Normal", "GPUDeviceAllocated", f"m{i}")
    assert queue.pending == 5 and sink.written == []
    task = asyncio.create_task(queue.run())
    try:
        sink.gate.set()
        await until(lambda: queue.written == 5)
        assert sink.written == [f"m{i}" for i in range(5)]
        assert queue.pending == 0 and queue.dropped == 0
    finally:
        task.cancel()


async def test_a_full_queue_drops_the_oldest_and_says_so(caplog: pytest.LogCaptureFixture) -> None:
    sink = SlowSink()
    sink.gate.set()
    queue = EventQueue(sink, fence=always_leading, writers=1, limit=3)
    for i in range(5):
        queue.submit(POD, "Normal", "GPUDeviceAllocated", f"m{i}")
    assert queue.pending == 3 and queue.dropped == 2
    assert "not written: the queue holds 3 Events" in caplog.text
    task = asyncio.create_task(queue.run())
    try:
        await until(lambda: queue.written == 3)
        assert sink.written == ["m2", "m3", "m4"]
    finally:
        task.cancel()


async def test_nothing_is_written_once_the_fence_is_closed() -> None:
    sink = SlowSink()
    sink.gate.set()
    leading = [False]

    def fence() -> float:
        if not leading[0]:
            raise NotLeaderError("lost the Lease")
        return 10.0

    queue = EventQueue(sink, fence=fence, writers=2)
    for i in range(4):
        queue.submit(POD, "Normal", "GPUDeviceAllocated", f"m{i}")
    task = asyncio.create_task(queue.run())
    try:
        await until(lambda: queue.dropped == 4)
        assert sink.written == [] and queue.pending == 0
        leading[0] = True
        queue.submit(POD, "Warning", "FailedGPUScheduling", "later")
        await until(lambda: queue.written == 1)
        assert sink.written == ["later"]
    finally:
        task.cancel()


async def test_several_writers_write_at_once() -> None:
    sink = SlowSink()
    queue = EventQueue(sink, fence=always_leading, writers=3)
    task = asyncio.create_task(queue.run())
    try:
        for i in range(3):
            queue.submit(POD, "Normal", "GPUDeviceAllocated", f"m{i}")
        await until(lambda: queue.pending == 0)  # all three taken while the sink waits
        assert sink.written == []
        sink.gate.set()
        await until(lambda: queue.written == 3)
    finally:
        task.cancel()
