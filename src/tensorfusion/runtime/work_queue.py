"""A de-duplicating work queue with delayed adds and per-key exponential backoff.

The rules of client-go's workqueue (rate-limiting flavour):

- a key is queued at most once: :meth:`WorkQueue.add` of a queued key does nothing;
- a key is handed to one worker at a time: a key added while it is being processed is queued
  again when :meth:`WorkQueue.done` is called for it, so it is processed once more;
- :meth:`WorkQueue.add_after` adds the key after a delay; a key waiting twice keeps the earlier
  time;
- :meth:`WorkQueue.retry` adds the key after its own backoff (5 ms, doubling, at most 1000 s
  by default), which grows with each retry until :meth:`WorkQueue.forget`;
- after :meth:`WorkQueue.shutdown` adds are ignored, waiting adds are dropped, and
  :meth:`WorkQueue.get` hands out what is still queued, then raises :class:`QueueShutDownError`.

Unlike client-go there is no overall token bucket: only the per-key backoff limits retries.
"""

from __future__ import annotations

import asyncio
import functools
from collections import deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Final, Generic, Protocol, TypeVar

from tensorfusion.domain.backoff import Backoff

__all__ = [
    "DEFAULT_RETRY_BACKOFF",
    "Cancellable",
    "QueueShutDownError",
    "Timers",
    "WorkQueue",
    "WorkQueueStats",
]

K = TypeVar("K", bound=Hashable)

DEFAULT_RETRY_BACKOFF: Final = Backoff(initial=0.005, maximum=1000.0)
"""client-go's ``DefaultItemBasedRateLimiter``: 5 ms, doubling, capped at 1000 s."""


class QueueShutDownError(Exception):
    """:meth:`WorkQueue.get` on a queue that is shut down and empty."""


class Cancellable(Protocol):
    """A scheduled callback (``asyncio.TimerHandle`` is one)."""

    def cancel(self) -> None: ...


class Timers(Protocol):
    """A clock and a way to call back later; the running event loop by default."""

    def time(self) -> float: ...

    def call_later(self, delay: float, callback: Callable[[], None]) -> Cancellable: ...


class _LoopTimers:
    """Timers of the running event loop."""

    def time(self) -> float:
        return asyncio.get_running_loop().time()

    def call_later(self, delay: float, callback: Callable[[], None]) -> Cancellable:
        return asyncio.get_running_loop().call_later(delay, callback)


@dataclass(slots=True)
class WorkQueueStats:
    """Counters of one queue, read by a metrics adapter (gauges are properties of the queue)."""

    adds: int = 0
    """Keys that entered the queue (not counting adds of a key already queued)."""
    retries: int = 0
    """Calls of :meth:`WorkQueue.retry`."""


@dataclass(slots=True)
class _Waiting:
    ready_at: float
    handle: Cancellable


class WorkQueue(Generic[K]):
    """Keys to process, each at most once in the queue and in one worker's hands."""

    def __init__(
        self,
        name: str = "",
        *,
        backoff: Backoff = DEFAULT_RETRY_BACKOFF,
        timers: Timers | None = None,
    ) -> None:
        self.name = name
        self.stats = WorkQueueStats()
        self._backoff = backoff
        self._timers: Timers = timers if timers is not None else _LoopTimers()
        self._queue: deque[K] = deque()
        self._dirty: set[K] = set()  # keys that need processing (queued, or re-added in work)
        self._processing: set[K] = set()
        self._waiting: dict[K, _Waiting] = {}
        self._failures: dict[K, int] = {}
        self._shut_down = False
        self._wakeup = asyncio.Event()

    # ------------------------------------------------------------------ gauges

    @property
    def depth(self) -> int:
        """Keys queued and not yet handed out."""
        return len(self._queue)

    @property
    def delayed(self) -> int:
        """Keys waiting for their delay (``add_after``, ``retry``)."""
        return len(self._waiting)

    @property
    def processing(self) -> int:
        """Keys handed out and not yet ``done``."""
        return len(self._processing)

    @property
    def is_shut_down(self) -> bool:
        return self._shut_down

    def __len__(self) -> int:
        return len(self._queue)

    # ------------------------------------------------------------------ adding

    def add(self, key: K) -> None:
        """Queue ``key`` unless it is queued already (or the queue is shut down)."""
        if self._shut_down or key in self._dirty:
            return
        self._dirty.add(key)
        if key in self._processing:
            return  # queued again by done()
        self.stats.adds += 1
        self._queue.append(key)
        self._wakeup.set()

    def add_after(self, key: K, delay: float) -> None:
        """Queue ``key`` in ``delay`` seconds; a key already waiting keeps the earlier time."""
        if self._shut_down:
            return
        if delay <= 0:
            self.add(key)
            return
        ready_at = self._timers.time() + delay
        waiting = self._waiting.get(key)
        if waiting is not None:
            if waiting.ready_at <= ready_at:
                return
            waiting.handle.cancel()
        handle = self._timers.call_later(delay, functools.partial(self._ready, key))
        self._waiting[key] = _Waiting(ready_at, handle)

    def retry(self, key: K) -> float:
        """Queue ``key`` after its backoff, which doubles with each retry; returns the delay."""
        failures = self._failures.get(key, 0) + 1
        self._failures[key] = failures
        self.stats.retries += 1
        delay = self._backoff.delay(failures)
        self.add_after(key, delay)
        return delay

    def forget(self, key: K) -> None:
        """Reset the backoff of ``key`` (call it once the key was processed successfully)."""
        self._failures.pop(key, None)

    def retries(self, key: K) -> int:
        """Retries of ``key`` since it was last forgotten."""
        return self._failures.get(key, 0)

    # ------------------------------------------------------------------ processing

    async def get(self) -> K:
        """Wait for the next key and mark it as being processed; call :meth:`done` after."""
        while not self._queue:
            if self._shut_down:
                raise QueueShutDownError(f"work queue {self.name!r} is shut down")
            self._wakeup.clear()
            await self._wakeup.wait()
        key = self._queue.popleft()
        self._dirty.discard(key)
        self._processing.add(key)
        return key

    def done(self, key: K) -> None:
        """Processing of ``key`` ended; queue it again if it was added meanwhile."""
        if key not in self._processing:
            raise ValueError(f"work queue {self.name!r}: done({key!r}) for a key not in work")
        self._processing.discard(key)
        if key in self._dirty:
            self.stats.adds += 1
            self._queue.append(key)
            self._wakeup.set()

    def shutdown(self, *, immediate: bool = False) -> None:
        """Ignore further adds and drop waiting ones; ``immediate`` also drops queued keys.

        Workers blocked in :meth:`get` raise :class:`QueueShutDownError` once the queue is empty.
        """
        self._shut_down = True
        for waiting in self._waiting.values():
            waiting.handle.cancel()
        self._waiting.clear()
        if immediate:
            self._queue.clear()
            self._dirty.clear()
        self._wakeup.set()

    def _ready(self, key: K) -> None:
        self._waiting.pop(key, None)
        self.add(key)
