"""Warning Events for the objects the leader's allocator could not read or refused (a quantity
beyond the bounds, an allocation that would over-commit a GPU): one per new problem, on the
object itself, found in its informer cache (controller.md, "Bad objects"). GPUPools and
GPUNodes also get the condition `Readable` (False while the problem lasts, True once it is
gone); a condition write that fails is tried again on the next round."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Final

from tensorfusion.adapters.kube.object_client import ObjectClient
from tensorfusion.controller.allocator_state import AllocatorState, ProblemNotice
from tensorfusion.controller.fenced_writes import EventSink, Fence, FencedWriter, involved
from tensorfusion.controller.reconcile_loop import every
from tensorfusion.domain.desired_state.readable_condition import readable_patch
from tensorfusion.domain.timestamps import format_rfc3339
from tensorfusion.runtime.informer import ObjectCache
from tensorfusion.runtime.leader_election import NotLeaderError

__all__ = ["CONDITION_KINDS", "ProblemReporter"]

_log = logging.getLogger(__name__)
_CORE_KINDS: Final = frozenset({"Pod", "Node"})
CONDITION_KINDS: Final = frozenset({"GPUPool", "GPUNode"})
"""Kinds whose status has conditions: they get `Readable`."""


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
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._clock = clock
        self._conditions: dict[str, ProblemNotice | None] = {}
        """Condition writes still to do, by key: the problem, or None once it is gone."""
        self._state = state
        self._caches = caches
        self._interval = interval
        self._sleep = sleep
        self.writer = FencedWriter(client, fence, events=recorder)

    async def publish(self) -> int:
        """Record an Event for each queued notice and write the conditions due; returns how
        many Events were recorded."""
        notices, self._state.notices[:] = list(self._state.notices), []
        cleared, self._state.cleared[:] = list(self._state.cleared), []
        recorded = 0
        for notice in notices:
            recorded += await self._record(notice)
            if notice.key.partition(" ")[0] in CONDITION_KINDS:
                self._conditions[notice.key] = notice
        for key in cleared:
            if key.partition(" ")[0] in CONDITION_KINDS:
                self._conditions[key] = None
        for key, problem in list(self._conditions.items()):
            if await self._write_condition(key, problem):
                del self._conditions[key]
        return recorded

    def _cached(self, key: str) -> tuple[str, str, str, Mapping[str, object] | None]:
        kind, _, ref = key.partition(" ")
        namespace, _, name = ref.rpartition("/")
        cache = self._caches.get(kind)
        return kind, namespace, name, cache.get(name, namespace) if cache is not None else None

    async def _record(self, notice: ProblemNotice) -> int:
        kind, _, _, obj = self._cached(notice.key)
        if obj is None:
            return 0
        api_version = "v1" if kind in _CORE_KINDS else "tensor-fusion.ai/v1"
        subject = involved(kind, obj, api_version)
        await self.writer.note(subject, "Warning", notice.reason, notice.message)
        return 1

    async def _write_condition(self, key: str, notice: ProblemNotice | None) -> bool:
        """Whether the condition is as wanted now (written, or its object gone)."""
        kind, namespace, name, obj = self._cached(key)
        if obj is None:
            return True
        problem = None if notice is None else (notice.reason, notice.message)
        now = format_rfc3339(self._clock())
        try:
            await self.writer.patch_fresh(
                kind, name, lambda current: readable_patch(current, problem, now),
                namespace=namespace, status=True, cached=obj,
            )  # fmt: skip
        except NotLeaderError:  # the next leader's recovery notes the problem anew
            return True
        except Exception as error:  # retried on the next round
            _log.warning("condition Readable on %s not written (will retry): %s", key, error)
            return False
        return True

    async def run(self) -> None:
        """Publish until cancelled."""
        await every(self._interval, self.publish, "problem reports", self._sleep)
