"""Keys from informer handlers into a work queue, N workers calling `reconcile(key)`.

A reconcile returns None, or the seconds after which the key wants another look (a heartbeat
that will age, an allocator still recovering). One that raises is logged in one line naming the
object, counted, and retried after the key's backoff (`WorkQueue.retry`); a success resets it.
`min_interval` spaces the reconciles of one key: a key added sooner after its last reconcile
waits for the rest of the interval, so a burst of events costs one reconcile.

`run()` runs the workers until cancelled and never raises otherwise, so the Supervisor only
restarts it after a bug.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass
from typing import Generic, TypeVar

from tensorfusion.adapters.kube.object_client import KubeError
from tensorfusion.domain.backoff import Backoff
from tensorfusion.runtime.leader_election import NotLeaderError
from tensorfusion.runtime.work_queue import (
    DEFAULT_RETRY_BACKOFF,
    QueueShutDownError,
    Timers,
    WorkQueue,
)

__all__ = ["ReconcileLoop", "ReconcileStats", "every"]

_log = logging.getLogger(__name__)
K = TypeVar("K", bound=Hashable)


@dataclass(slots=True)
class ReconcileStats:
    """Counters of one loop, for `/metrics` (queue depth: `loop.queue.depth`)."""

    reconciles: int = 0
    """Reconciles that ended, with or without error."""
    errors: int = 0
    """Reconciles that raised (each retried with backoff)."""
    requeues: int = 0
    """Reconciles that asked for another look later."""


class ReconcileLoop(Generic[K]):
    """A work queue with N workers calling `reconcile(key)`."""

    def __init__(
        self,
        name: str,
        reconcile: Callable[[K], Awaitable[float | None]],
        *,
        workers: int = 1,
        min_interval: float = 0.0,
        backoff: Backoff = DEFAULT_RETRY_BACKOFF,
        timers: Timers | None = None,
    ) -> None:
        if workers < 1:
            raise ValueError(f"workers must be at least 1, not {workers}")
        self.name = name
        self.queue: WorkQueue[K] = WorkQueue(name, backoff=backoff, timers=timers)
        self.stats = ReconcileStats()
        self._reconcile = reconcile
        self._workers = workers
        self._min_interval = min_interval
        self._timers = timers
        self._last_start: dict[K, float] = {}

    def _now(self) -> float:
        if self._timers is not None:
            return self._timers.time()
        return asyncio.get_running_loop().time()

    def add(self, key: K, *, min_interval: float | None = None) -> None:
        """Queue the key, after the rest of `min_interval` (the loop's unless given) since its
        last reconcile; a key already waiting keeps the earlier time."""
        interval = self._min_interval if min_interval is None else min_interval
        if interval > 0:
            # Keys only ever added without an interval keep no start time (a pod loop's keys).
            wait = self._last_start.setdefault(key, float("-inf")) + interval - self._now()
            if wait > 0:
                self.queue.add_after(key, wait)
                return
        self.queue.add(key)

    def add_after(self, key: K, delay: float) -> None:
        """Queue the key in `delay` seconds."""
        self.queue.add_after(key, delay)

    async def run(self) -> None:
        """Run the workers until cancelled."""
        async with asyncio.TaskGroup() as group:
            for number in range(self._workers):
                group.create_task(self._work(), name=f"{self.name} worker {number}")

    async def _work(self) -> None:
        while True:
            try:
                key = await self.queue.get()
            except QueueShutDownError:
                return
            try:
                await self.process(key)
            finally:
                self.queue.done(key)

    async def process(self, key: K) -> None:
        """Reconcile one key taken from the queue (the workers call it; tests may too)."""
        if self._min_interval > 0 or key in self._last_start:
            self._last_start[key] = self._now()
        try:
            again = await self._reconcile(key)
        except asyncio.CancelledError:
            raise
        except Exception as error:  # every failure is retried: the loop never dies
            self.stats.reconciles += 1
            self.stats.errors += 1
            delay = self.queue.retry(key)
            expected = isinstance(error, KubeError | NotLeaderError | TimeoutError)
            _log.error(
                "%s: reconcile of %s failed (retry in %.3gs): %s",
                self.name, key, delay, _describe(error),
                exc_info=not expected,
                extra={"controller": self.name, "object": str(key)},
            )  # fmt: skip
            return
        self.stats.reconciles += 1
        self.queue.forget(key)
        if again is not None:
            self.stats.requeues += 1
            self.queue.add_after(key, again)


def _describe(error: BaseException) -> str:
    if isinstance(error, NotLeaderError):
        return f"not leader: {error}"
    if isinstance(error, TimeoutError):
        return "timed out (the leadership fence ran out)"
    return str(error) or type(error).__name__


async def every(
    interval: float,
    step: Callable[[], object],
    what: str,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    *,
    first: bool = True,
) -> None:
    """Run `step` (a function or a coroutine function) every `interval` seconds until
    cancelled (after the first interval unless `first`); a failing step is logged with `what`
    and the next one runs as planned."""
    if not first:
        await sleep(interval)
    while True:
        try:
            result = step()
            if inspect.isawaitable(result):
                await result
        except Exception:  # a periodic step never ends its loop
            _log.exception("%s failed", what)
        await sleep(interval)
