"""The reconcile loop (queue, workers, retries, spacing) and the fenced writer."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import pytest

from tensorfusion.adapters.kube.events import InvolvedObject
from tensorfusion.adapters.kube.object_client import KubeError
from tensorfusion.controller.fenced_writes import FencedWriter
from tensorfusion.controller.reconcile_loop import ReconcileLoop, every
from tensorfusion.runtime.leader_election import NotLeaderError

from .reconciler_fakes import Call, FakeApi, FakeRecorder, Fence, gpu


class FakeTimers:
    """A clock that moves only when told; callbacks fire when their time comes."""

    def __init__(self) -> None:
        self.now = 0.0
        self.pending: list[tuple[float, Callable[[], None]]] = []

    def time(self) -> float:
        return self.now

    def call_later(self, delay: float, callback: Callable[[], None]) -> Any:
        entry = (self.now + delay, callback)
        self.pending.append(entry)

        class Handle:
            def __init__(self, pending: list[Any]) -> None:
                self.pending = pending

            def cancel(self) -> None:
                if entry in self.pending:
                    self.pending.remove(entry)

        return Handle(self.pending)

    def advance(self, seconds: float) -> None:
        self.now += seconds
        for entry in sorted(self.pending, key=lambda e: e[0]):
            if entry[0] <= self.now:
                self.pending.remove(entry)
                entry[1]()


async def test_a_failed_reconcile_is_logged_once_naming_the_object_and_retried(
    caplog: pytest.LogCaptureFixture,
) -> None:
    timers = FakeTimers()
    outcomes: list[Exception | None] = [KubeError(500, "etcd timeout"), None]

    async def reconcile(key: str) -> float | None:
        outcome = outcomes.pop(0)
        if outcome is not None:
            raise outcome
        return None

    loop: ReconcileLoop[str] = ReconcileLoop("gpunode", reconcile, timers=timers)
    with caplog.at_level(logging.ERROR):
        await loop.process("node-a")
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1
    assert "gpunode: reconcile of node-a failed" in errors[0].getMessage()
    assert "etcd timeout" in errors[0].getMessage()
    assert not errors[0].exc_info  # an API error needs no traceback
    assert errors[0].__dict__["object"] == "node-a"
    assert loop.queue.retries("node-a") == 1 and loop.queue.delayed == 1
    assert loop.stats.errors == 1
    timers.advance(0.005)
    assert loop.queue.depth == 1
    key = await loop.queue.get()
    await loop.process(key)
    loop.queue.done(key)
    assert loop.queue.retries("node-a") == 0 and loop.stats.reconciles == 2


async def test_an_unexpected_error_is_logged_with_its_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def reconcile(key: str) -> float | None:
        raise ValueError("bug")

    loop: ReconcileLoop[str] = ReconcileLoop("x", reconcile, timers=FakeTimers())
    with caplog.at_level(logging.ERROR):
        await loop.process("k")
    assert caplog.records[-1].exc_info  # the traceback of a bug


async def test_a_requested_second_look_and_the_spacing_of_one_key() -> None:
    timers = FakeTimers()

    async def reconcile(key: str) -> float | None:
        return 5.0 if key == "again" else None

    loop: ReconcileLoop[str] = ReconcileLoop("x", reconcile, timers=timers, min_interval=1.0)
    await loop.process("again")
    assert loop.queue.delayed == 1 and loop.stats.requeues == 1
    await loop.process("spaced")
    timers.advance(0.25)
    loop.add("spaced")
    assert loop.queue.depth == 0 and loop.queue.delayed == 2
    timers.advance(0.75)
    assert loop.queue.depth == 1
    loop.add("fresh")  # never reconciled: queued at once
    assert loop.queue.depth == 2


async def test_workers_survive_failures_and_process_every_key() -> None:
    done: dict[str, asyncio.Future[None]] = {}

    async def reconcile(key: str) -> float | None:
        if key == "bad":
            raise RuntimeError("boom")
        done[key].set_result(None)
        return None

    loop: ReconcileLoop[str] = ReconcileLoop("x", reconcile, workers=2)
    task = asyncio.create_task(loop.run())
    for key in ("bad", "a", "b"):
        done[key] = asyncio.get_running_loop().create_future()
        loop.add(key)
    await asyncio.wait_for(asyncio.gather(done["a"], done["b"]), 10)
    assert not task.done()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert loop.queue.processing == 0


# ---- fenced writes -----------------------------------------------------------------------


async def test_no_write_reaches_the_api_once_the_fence_is_closed() -> None:
    api, fence = FakeApi(), Fence()
    api.put(gpu("g1", "n1"))
    writer = FencedWriter(api, fence, events=FakeRecorder())
    await writer.patch("GPU", "g1", {"status": {"phase": "Running"}}, status=True)
    assert fence.calls == 1 and len(api.writes()) == 1
    fence.open = False
    with pytest.raises(NotLeaderError):
        await writer.patch("GPU", "g1", {"status": {"phase": "Pending"}}, status=True)
    with pytest.raises(NotLeaderError):
        await writer.patch_fresh("GPU", "g1", lambda _: {"status": {"phase": "Pending"}})
    with pytest.raises(NotLeaderError):
        await writer.delete("GPU", "g1")
    assert len(api.writes()) == 1 and writer.stats.fenced == 3
    assert api.obj("GPU", "g1")["status"]["phase"] == "Running"


async def test_a_conflict_is_built_again_from_a_fresh_read() -> None:
    api, fence = FakeApi(), Fence()
    stale = api.put(gpu("g1", "n1"))
    api.put({**stale, "metadata": {**stale["metadata"], "labels": {"new": "label"}}})
    writer = FencedWriter(api, fence)
    seen: list[dict[str, Any]] = []

    def build(current: Any) -> dict[str, Any]:
        seen.append(current["metadata"].get("labels", {}))
        return {"status": {"phase": "Running"}}

    written = await writer.patch_fresh("GPU", "g1", build, status=True, cached=stale)
    assert written is not None and written["status"]["phase"] == "Running"
    assert seen == [stale["metadata"]["labels"], {"new": "label"}]
    assert [c.op for c in api.calls] == ["patch", "get", "patch"]
    assert writer.stats.conflicts == 1 and writer.stats.writes == 1


async def test_endless_conflicts_give_up_and_nothing_to_do_writes_nothing() -> None:
    api, fence = FakeApi(), Fence()
    api.put(gpu("g1", "n1"))

    def race(call: Call) -> None:  # another writer wins every time
        api.put(api.obj("GPU", "g1"))

    api.before_write = race
    writer = FencedWriter(api, fence, conflict_attempts=3)
    with pytest.raises(KubeError) as error:
        await writer.patch_fresh("GPU", "g1", lambda _: {"status": {"phase": "Running"}})
    assert error.value.code == 409 and writer.stats.conflicts == 3
    api.before_write = None
    assert await writer.patch_fresh("GPU", "g1", lambda _: None) is not None
    assert await writer.patch_fresh("GPU", "gone", lambda _: {"x": 1}) is None
    assert len(api.writes("patch")) == 3


async def test_a_write_is_cut_off_when_the_fence_runs_out() -> None:
    class Hanging(FakeApi):
        async def patch(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
            await asyncio.Event().wait()
            raise AssertionError("unreachable")

    writer = FencedWriter(Hanging(), lambda: 0.01)
    with pytest.raises(TimeoutError):
        # The outer bound only keeps a broken writer from hanging the test: cut off by it
        # instead of by the fence, the write is cancelled and never counted as failed.
        await asyncio.wait_for(writer.patch("GPU", "g1", {"status": {}}), 30)
    assert writer.stats.failures == 1


async def test_events_are_fenced_and_never_raise() -> None:
    recorder, fence = FakeRecorder(), Fence()
    writer = FencedWriter(FakeApi(), fence, events=recorder)
    subject = InvolvedObject("GPU", "g1")
    await writer.note(subject, "Warning", "GPUMissing", "gone")
    fence.open = False
    await writer.note(subject, "Warning", "GPUMissing", "gone again")
    assert recorder.reasons() == ["GPUMissing"]

    class Broken(FakeRecorder):
        async def record(self, *args: Any) -> None:
            raise RuntimeError("recorder bug")

    await FencedWriter(FakeApi(), Fence(), events=Broken()).note(subject, "Normal", "R", "m")


async def test_every_survives_a_failing_step_and_can_wait_first() -> None:

    calls: list[str] = []
    slept: list[float] = []

    def step() -> None:
        calls.append("step")
        if len(calls) == 1:
            raise RuntimeError("first one fails")

    async def sleep(seconds: float) -> None:
        slept.append(seconds)
        if len(slept) >= 3:
            raise asyncio.CancelledError

    with pytest.raises(asyncio.CancelledError):
        await every(2.0, step, "test step", sleep)
    assert calls == ["step", "step", "step"] and slept == [2.0, 2.0, 2.0]
    calls.clear()
    slept.clear()
    with pytest.raises(asyncio.CancelledError):
        await every(2.0, step, "test step", sleep, first=False)
    assert len(calls) == 2, "waited one interval before the first step"
