"""Informer.run against a scripted source: list, watch, resume, relist on 410, backoff, handlers."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any, Final

import pytest

from tensorfusion.domain.backoff import Backoff
from tensorfusion.runtime.informer import EventKind, Informer, InformerEvent, ObjectKey
from tensorfusion.runtime.informer_source import (
    ApiAnswerError,
    Listing,
    ResourceExpiredError,
    WatchEvent,
    WatchType,
)
from tensorfusion.runtime.supervision import Supervisor

LOGGER = "tensorfusion.runtime.informer"
END: Final = "end of watch"


def obj(name: str, version: str, *, uid: str = "", **data: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": name,
            "namespace": "ns",
            "resourceVersion": version,
            "uid": uid or name,
        },
        "data": data,
    }


def bookmark(version: str) -> WatchEvent:
    return WatchEvent(WatchType.BOOKMARK, {"metadata": {"resourceVersion": version}})


class ScriptedSource:
    """Answers each list and each watch step with what the test queued (and waits until then)."""

    description = "fake ConfigMaps"

    def __init__(self) -> None:
        self.list_answers: asyncio.Queue[Listing | Exception] = asyncio.Queue()
        self.watch_steps: asyncio.Queue[WatchEvent | Exception | str] = asyncio.Queue()
        self.lists = 0
        self.watched_from: list[str] = []

    def answer_list(self, version: str, *objects: dict[str, Any]) -> None:
        self.list_answers.put_nowait(Listing(list(objects), version))

    def fail_list(self, error: Exception) -> None:
        self.list_answers.put_nowait(error)

    def send(self, *steps: WatchEvent | Exception | str) -> None:
        for step in steps:
            self.watch_steps.put_nowait(step)

    async def list(self) -> Listing:
        answer = await self.list_answers.get()
        self.lists += 1
        if isinstance(answer, Exception):
            raise answer
        return answer

    async def watch(self, resource_version: str) -> AsyncIterator[WatchEvent]:
        self.watched_from.append(resource_version)
        while True:
            step = await self.watch_steps.get()
            if isinstance(step, Exception):
                raise step
            if isinstance(step, str):
                return
            yield step

    @property
    def idle(self) -> bool:
        """Everything queued was consumed."""
        return self.list_answers.empty() and self.watch_steps.empty()


class Recorder:
    """A handler that keeps every event, and what the cache held for its key at that moment."""

    def __init__(self, informer: Informer) -> None:
        self.informer = informer
        self.events: list[InformerEvent] = []
        self.cached_then: list[object] = []

    def __call__(self, event: InformerEvent) -> None:
        self.events.append(event)
        self.cached_then.append(self.informer.get(event.key.name, event.key.namespace))

    def summary(self) -> list[tuple[str, str, str, bool]]:
        return [
            (
                e.kind.value,
                e.key.name,
                e.obj["metadata"]["resourceVersion"],
                e.final_state_unknown,
            )
            for e in self.events
        ]


class FakeSleep:
    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, delay: float) -> None:
        self.delays.append(delay)
        await asyncio.sleep(0)


async def until(condition: Callable[[], bool], what: str) -> None:
    for _ in range(10_000):
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError(f"never happened: {what}")


class Harness:
    def __init__(self) -> None:
        self.source = ScriptedSource()
        self.sleep = FakeSleep()
        self.informer = Informer(
            self.source, backoff=Backoff(initial=0.8, maximum=30.0), sleep=self.sleep
        )
        self.recorder = Recorder(self.informer)
        self.informer.add_handler(self.recorder)
        self.task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self.task = asyncio.create_task(self.informer.run())

    async def settle(self, what: str = "the informer consumed its script") -> None:
        await until(lambda: self.source.idle, what)
        for _ in range(20):  # let the last step's processing finish
            await asyncio.sleep(0)

    async def stop(self) -> None:
        assert self.task is not None
        self.task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await self.task


@pytest.fixture
async def harness() -> AsyncIterator[Harness]:
    h = Harness()
    yield h
    if h.task is not None and not h.task.done():
        await h.stop()


async def test_the_first_list_fills_the_cache_and_then_has_synced(harness: Harness) -> None:
    informer = harness.informer
    harness.start()
    await asyncio.sleep(0)
    assert not informer.has_synced
    a, b = obj("a", "5", value="1"), obj("b", "6")
    harness.source.answer_list("10", a, b)
    await asyncio.wait_for(informer.wait_synced(), timeout=5)
    assert informer.has_synced
    assert harness.recorder.summary() == [("ADDED", "a", "5", False), ("ADDED", "b", "6", False)]
    assert harness.recorder.cached_then == [a, b]  # handlers run after the cache changed
    assert informer.resource_version == "10"
    assert informer.get("a", "ns") == a
    assert informer.get("a") is None  # cluster-scoped key: another object
    assert informer.list() == [a, b]
    assert informer.list("ns") == [a, b]
    assert informer.list("other") == []
    assert informer.keys() == [ObjectKey("ns", "a"), ObjectKey("ns", "b")]
    assert len(informer) == 2
    await until(lambda: harness.source.watched_from == ["10"], "watch from the list's version")
    assert informer.stats.lists == 1


async def test_watch_events_change_the_cache_and_reach_handlers_in_order(
    harness: Harness,
) -> None:
    a1, a2, b = obj("a", "11", value="1"), obj("a", "12", value="2"), obj("b", "13")
    harness.start()
    harness.source.answer_list("10")
    harness.source.send(
        WatchEvent(WatchType.ADDED, a1),
        WatchEvent(WatchType.ADDED, b),
        WatchEvent(WatchType.MODIFIED, a2),
        WatchEvent(WatchType.DELETED, b),
    )
    await harness.settle()
    events = harness.recorder.events
    assert harness.recorder.summary() == [
        ("ADDED", "a", "11", False),
        ("ADDED", "b", "13", False),
        ("MODIFIED", "a", "12", False),
        ("DELETED", "b", "13", False),
    ]
    assert events[2].old == a1
    assert harness.recorder.cached_then == [a1, b, a2, None]
    assert harness.informer.list() == [a2]
    assert harness.informer.resource_version == "13"
    assert harness.informer.stats.events == 4


async def test_a_bookmark_moves_the_version_on_without_an_event(harness: Harness) -> None:
    harness.start()
    harness.source.answer_list("10", obj("a", "5"))
    harness.source.send(bookmark("42"))
    await harness.settle()
    assert harness.informer.resource_version == "42"
    assert harness.recorder.summary() == [("ADDED", "a", "5", False)]
    assert harness.informer.stats.invalid_objects == 0
    assert harness.informer.get("a", "ns") == obj("a", "5")


async def test_an_ended_watch_resumes_from_the_last_version_without_a_relist(
    harness: Harness,
) -> None:
    harness.start()
    harness.source.answer_list("10")
    harness.source.send(WatchEvent(WatchType.ADDED, obj("a", "11")), bookmark("15"), END)
    await until(lambda: len(harness.source.watched_from) == 2, "a second watch")
    assert harness.source.watched_from == ["10", "15"]
    assert harness.source.lists == 1
    assert harness.sleep.delays == []
    harness.source.send(WatchEvent(WatchType.MODIFIED, obj("a", "16")))
    await harness.settle()
    assert harness.recorder.summary() == [
        ("ADDED", "a", "11", False),
        ("MODIFIED", "a", "16", False),
    ]


async def test_a_watch_that_ends_empty_waits_before_the_next(harness: Harness) -> None:
    harness.start()
    harness.source.answer_list("10")
    harness.source.send(END, END)
    await until(lambda: len(harness.source.watched_from) == 3, "a third watch")
    assert harness.sleep.delays == [0.8, 1.6]
    assert harness.source.watched_from == ["10", "10", "10"]


async def test_410_lists_again_at_once_and_delivers_what_changed_meanwhile(
    harness: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    harness.start()
    kept, changed, gone = obj("kept", "1"), obj("changed", "2", value="old"), obj("gone", "3")
    harness.source.answer_list("10", kept, changed, gone)
    harness.source.send(
        WatchEvent(WatchType.ADDED, obj("short-lived", "11")),
        ResourceExpiredError("too old resource version: 11 (40)"),
    )
    changed_now, new = obj("changed", "30", value="new"), obj("new", "31")
    harness.source.answer_list("40", kept, changed_now, new)
    await harness.settle()
    assert harness.recorder.summary()[4:] == [
        ("DELETED", "gone", "3", True),
        ("DELETED", "short-lived", "11", True),
        ("MODIFIED", "changed", "30", False),
        ("ADDED", "new", "31", False),
    ]
    assert harness.recorder.events[6].old == changed
    assert harness.sleep.delays == []
    assert harness.source.lists == 2
    await until(lambda: harness.source.watched_from == ["10", "40"], "watch from the relist")
    assert harness.informer.stats.expired == 1
    assert sorted(o["metadata"]["name"] for o in harness.informer.list()) == [
        "changed",
        "kept",
        "new",
    ]
    assert any("listing again" in r.getMessage() for r in caplog.records)


async def test_410_right_after_a_list_backs_off_before_listing_again(harness: Harness) -> None:
    harness.start()
    for version in ["10", "11", "12"]:
        harness.source.answer_list(version)
        harness.source.send(ResourceExpiredError("too old"))
    harness.source.answer_list("13")
    await harness.settle()
    await until(lambda: harness.source.watched_from[-1:] == ["13"], "a watch from 13")
    assert harness.sleep.delays == [0.8, 1.6, 3.2]
    assert harness.informer.stats.expired == 3


async def test_a_failed_watch_is_logged_and_resumed_after_a_growing_backoff(
    harness: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    harness.start()
    harness.source.answer_list("10")
    harness.source.send(
        WatchEvent(WatchType.ADDED, obj("a", "11")),
        ConnectionError("reset by peer"),
        ConnectionError("refused"),
        ConnectionError("refused again"),
        WatchEvent(WatchType.MODIFIED, obj("a", "12")),
        ConnectionError("reset once more"),
    )
    await harness.settle()
    await until(lambda: len(harness.source.watched_from) == 5, "a fifth watch")
    assert harness.sleep.delays == [0.8, 1.6, 3.2, 0.8]
    assert harness.source.watched_from == ["10", "11", "11", "11", "12"]
    assert harness.source.lists == 1
    assert harness.informer.stats.errors == 4
    warnings = [r for r in caplog.records if r.name == LOGGER and r.levelno == logging.WARNING]
    assert len(warnings) == 4
    assert "watch failed (1 in a row)" in warnings[0].getMessage()
    assert "reset by peer" in warnings[0].getMessage()
    assert "fake ConfigMaps" in warnings[0].getMessage()
    assert warnings[0].exc_info is not None


async def test_an_error_answer_of_the_api_server_is_one_line_without_a_traceback(
    harness: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    """A 429 while the API server throttles a starting controller is retried: a user reading
    the logs for errors (the guide's Verify) sees one line, not a traceback."""
    harness.start()
    harness.source.fail_list(ApiAnswerError(429, "list of fake ConfigMaps: the API server "
                                                 "answered 429: too many requests"))  # fmt: skip
    harness.source.answer_list("10", obj("a", "1"))
    await asyncio.wait_for(harness.informer.wait_synced(), timeout=5)
    [warning] = [r for r in caplog.records if r.name == LOGGER and r.levelno == logging.WARNING]
    assert warning.exc_info is None
    assert warning.getMessage().endswith("answered 429: too many requests")
    assert "\n" not in warning.getMessage()


async def test_a_failed_list_is_retried_after_a_backoff(harness: Harness) -> None:
    harness.start()
    harness.source.fail_list(PermissionError("forbidden"))
    harness.source.fail_list(TimeoutError("slow"))
    await until(lambda: harness.source.lists == 2, "two lists")
    assert not harness.informer.has_synced
    harness.source.answer_list("10", obj("a", "1"))
    await asyncio.wait_for(harness.informer.wait_synced(), timeout=5)
    assert harness.sleep.delays == [0.8, 1.6]
    assert harness.informer.stats.errors == 2


async def test_a_handler_that_raises_is_logged_and_the_others_still_run(
    harness: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(event: InformerEvent) -> None:
        raise KeyError("bug in a handler")

    later = Recorder(harness.informer)
    harness.informer.add_handler(broken)
    harness.informer.add_handler(later)
    harness.start()
    harness.source.answer_list("10", obj("a", "1"))
    harness.source.send(WatchEvent(WatchType.ADDED, obj("b", "11")))
    await harness.settle()
    assert (
        later.summary()
        == harness.recorder.summary()
        == [
            ("ADDED", "a", "1", False),
            ("ADDED", "b", "11", False),
        ]
    )
    assert harness.informer.stats.handler_errors == 2
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert "raised on ADDED ns/a" in errors[0].getMessage()
    assert errors[0].exc_info is not None
    assert harness.task is not None
    assert not harness.task.done()


async def test_a_late_handler_first_gets_the_cached_objects(harness: Harness) -> None:
    harness.start()
    harness.source.answer_list("10", obj("a", "1"), obj("b", "2"))
    await harness.settle()
    late = Recorder(harness.informer)
    harness.informer.add_handler(late)
    assert late.summary() == [("ADDED", "a", "1", False), ("ADDED", "b", "2", False)]
    harness.informer.remove_handler(late)
    harness.source.send(WatchEvent(WatchType.ADDED, obj("c", "11")))
    await harness.settle()
    assert len(late.events) == 2
    assert len(harness.recorder.events) == 3


async def test_an_object_deleted_and_recreated_while_away_is_a_delete_and_an_add(
    harness: Harness,
) -> None:
    harness.start()
    harness.source.answer_list("10", obj("pod", "1", uid="first"))
    harness.source.send(ResourceExpiredError("gone"))
    harness.source.answer_list("50", obj("pod", "49", uid="second"))
    await harness.settle()
    assert harness.recorder.summary() == [
        ("ADDED", "pod", "1", False),
        ("DELETED", "pod", "1", True),
        ("ADDED", "pod", "49", False),
    ]


async def test_objects_without_a_name_are_skipped_and_counted(harness: Harness) -> None:
    harness.start()
    harness.source.answer_list("10", {"metadata": {"resourceVersion": "3"}}, obj("a", "1"))
    harness.source.send(WatchEvent(WatchType.ADDED, {"metadata": {"resourceVersion": "12"}}))
    await harness.settle()
    assert harness.informer.stats.invalid_objects == 2
    assert harness.recorder.summary() == [("ADDED", "a", "1", False)]
    assert harness.informer.resource_version == "12"


async def test_run_twice_at_once_is_refused(harness: Harness) -> None:
    harness.start()
    await asyncio.sleep(0)
    with pytest.raises(RuntimeError, match="run\\(\\) is already active"):
        await asyncio.wait_for(harness.informer.run(), timeout=5)


async def test_a_restarted_run_lists_again_and_delivers_deletes_missed_meanwhile() -> None:
    source = ScriptedSource()
    informer = Informer(source, sleep=FakeSleep())
    recorder = Recorder(informer)
    informer.add_handler(recorder)
    async with Supervisor(sleep=FakeSleep()) as supervisor:
        supervisor.start("informer", informer.run)
        source.answer_list("10", obj("a", "1"), obj("b", "2"))
        await asyncio.wait_for(informer.wait_synced(), timeout=5)
        await supervisor.cancel("informer")
        supervisor.start("informer", informer.run)
        source.answer_list("20", obj("b", "2"))
        await until(lambda: source.lists == 2 and len(recorder.events) == 3, "the relist")
    assert recorder.summary() == [
        ("ADDED", "a", "1", False),
        ("ADDED", "b", "2", False),
        ("DELETED", "a", "1", True),
    ]
    assert recorder.events[2].kind is EventKind.DELETED
