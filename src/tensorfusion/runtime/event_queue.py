"""Events written off the caller's path (the extender's binds and filters).

`EventQueue.submit` never blocks: it queues the Event and returns. `run` writes the queue in
order through the sink (an `EventRecorder`, which aggregates repeats into one Event with a
count) with `writers` calls in flight, each under the leadership fence: once the fence is
closed the queued Events are dropped, since a replica that no longer leads must not write. At
most `limit` Events wait; beyond it the oldest is dropped. Drops are counted and logged, never
silent.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Final, Literal

from tensorfusion.adapters.kube.events import EventSink, InvolvedObject
from tensorfusion.runtime.fence import Fence, fenced_call
from tensorfusion.runtime.leader_election import NotLeaderError

__all__ = ["EventQueue", "QueuedEvent"]

_log = logging.getLogger(__name__)
DEFAULT_LIMIT: Final = 10_000
DEFAULT_WRITERS: Final = 4


@dataclass(frozen=True, slots=True)
class QueuedEvent:
    """One Event waiting to be written."""

    involved: InvolvedObject
    type: Literal["Normal", "Warning"]
    reason: str
    message: str


class EventQueue:
    """A bounded queue of Events and the writers that drain it (`run`, as a supervised task)."""

    def __init__(
        self,
        sink: EventSink,
        *,
        fence: Fence,
        writers: int = DEFAULT_WRITERS,
        limit: int = DEFAULT_LIMIT,
    ) -> None:
        self._sink = sink
        self._fence = fence
        self._writers = writers
        self._limit = limit
        self._pending: deque[QueuedEvent] = deque()
        self._ready = asyncio.Event()
        self.written = 0
        self.dropped = 0

    @property
    def pending(self) -> int:
        """Events waiting to be written."""
        return len(self._pending)

    def submit(
        self,
        involved: InvolvedObject,
        type_: Literal["Normal", "Warning"],
        reason: str,
        message: str,
    ) -> None:
        """Queue one Event; never blocks nor raises."""
        if len(self._pending) >= self._limit:
            dropped = self._pending.popleft()
            self._drop(1, f"the queue holds {self._limit} Events (oldest: {dropped.reason} on "
                          f"{dropped.involved.kind} {dropped.involved.name})")  # fmt: skip
        self._pending.append(QueuedEvent(involved, type_, reason, message))
        self._ready.set()

    async def run(self) -> None:
        """Write the queue until cancelled."""
        async with asyncio.TaskGroup() as group:
            for i in range(self._writers):
                group.create_task(self._write_forever(), name=f"event writer {i}")

    async def _write_forever(self) -> None:
        while True:
            if not self._pending:
                self._ready.clear()
                await self._ready.wait()
                continue
            event = self._pending.popleft()

            def write(_left: float, e: QueuedEvent = event) -> Awaitable[None]:
                return self._sink.record(e.involved, e.type, e.reason, e.message)

            try:
                await fenced_call(self._fence, write)
            except NotLeaderError as error:
                count = 1 + len(self._pending)
                self._pending.clear()
                self._drop(count, f"not the leader ({error})")
                continue
            except TimeoutError:
                self._drop(1, f"{event.reason} on {event.involved.kind} {event.involved.name} "
                              "was cut off when the leadership fence closed")  # fmt: skip
                continue
            self.written += 1

    def _drop(self, count: int, why: str) -> None:
        self.dropped += count
        _log.warning("%d Event(s) not written: %s (%d dropped so far)", count, why, self.dropped)
