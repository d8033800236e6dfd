"""Warning Events for the objects the leader's allocator could not read or refused (a quantity
beyond the bounds, an allocation that would over-commit a GPU): one per new problem, on the
object itself, found in its informer cache (controller.md, "Bad objects")."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from typing import Final

from tensorfusion.adapters.kube.object_client import ObjectClient
from tensorfusion.controller.allocator_state import AllocatorState, ObjectCache, ProblemNotice
from tensorfusion.controller.fenced_writes import EventSink, Fence, FencedWriter, involved
from tensorfusion.controller.reconcile_loop import every

__all__ = ["ProblemReporter"]

_CORE_KINDS: Final = frozenset({"Pod", "Node"})


class ProblemReporter:
    """Drains `AllocatorState.notices` into Events; `caches` maps a kind to its informer
    cache (an object no longer cached gets no Event: it is gone)."""

    def __init__(
        self,
        *,
        state: AllocatorState,
        caches: Mapping[str, ObjectCache],
        client: ObjectClient,
        fence: Fence,
        recorder: EventSink | None,
        interval: float = 1.0,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self._state = state
        self._caches = caches
        self._interval = interval
        self._sleep = sleep
        self.writer = FencedWriter(client, fence, events=recorder)

    async def publish(self) -> int:
        """Record an Event for each queued notice; returns how many were recorded."""
        notices, self._state.notices[:] = list(self._state.notices), []
        recorded = 0
        for notice in notices:
            recorded += await self._record(notice)
        return recorded

    async def _record(self, notice: ProblemNotice) -> int:
        kind, _, ref = notice.key.partition(" ")
        namespace, _, name = ref.rpartition("/")
        cache = self._caches.get(kind)
        obj = cache.get(name, namespace) if cache is not None else None
        if obj is None:
            return 0
        api_version = "v1" if kind in _CORE_KINDS else "tensor-fusion.ai/v1"
        subject = involved(kind, obj, api_version)
        await self.writer.note(subject, "Warning", notice.reason, notice.message)
        return 1

    async def run(self) -> None:
        """Publish until cancelled."""
        await every(self._interval, self.publish, "problem reports", self._sleep)
