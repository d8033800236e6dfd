"""The allocator's memory written back to the API server (scheduling.md §3, *Memory → API
server*): GPU status of changed GPUs, the GPUNodes' `last-sync` stamp, and quota status.

GPU status: the GPUs the allocator changed (its own change cursor) are written in batches, each
GPU once it has been changed for `settle` (0.5 s: the binds of a burst that land on one GPU
are one write) and at most once per `min_interval` (1 s), as a merge patch of the status
subresource with the
fields the allocator owns (`domain.desired_state.gpus`), on the latest object with conflict
retry. A failed write stays queued and is tried again after a backoff (1 s doubling to 60 s).
After a batch, `tensor-fusion.ai/last-sync` (RFC 3339) is stamped on the GPUNodes of the GPUs
written. `on_gpu` requeues a GPU whose owned fields someone else changed (or whose cached copy
caught up with our own write), so the stored status always ends equal to memory.

Quota status: every 10 s, each quota whose status would change (besides `lastUpdateTime`) is
written; a quota whose `AlertThresholdReached` turns True gets a Warning Event.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from tensorfusion.adapters.kube.object_client import ObjectClient
from tensorfusion.controller.allocator_state import AllocatorChanges, AllocatorState
from tensorfusion.controller.fenced_writes import EventSink, Fence, FencedWriter, involved
from tensorfusion.controller.reconcile_loop import every
from tensorfusion.domain.allocator.allocator import Allocator
from tensorfusion.domain.annotations import KEYS
from tensorfusion.domain.backoff import Backoff
from tensorfusion.domain.desired_state.gpus import gpu_owned_status
from tensorfusion.domain.desired_state.objects import Exactly, merge_patch
from tensorfusion.domain.desired_state.quotas import (
    QuotaRole,
    QuotaStatusUpdate,
    desired_quota_status,
    quota_roles,
)
from tensorfusion.domain.object_views import Obj, metadata_of, name_of, status_of
from tensorfusion.domain.timestamps import format_rfc3339
from tensorfusion.runtime.informer import ObjectCache
from tensorfusion.runtime.informer_store import EventKind, InformerEvent

__all__ = ["GPUStatusWriter", "QuotaStatusWriter"]

_log = logging.getLogger(__name__)
Sleep = Callable[[float], Awaitable[None]]

_OWNED_GPU_FIELDS: Final = (
    "available", "runningApps", "allocatedPartitions", "activeIsolationMode",
    "dynamicIsolationConflict",
)  # fmt: skip
QUOTA_THRESHOLD: Final = "QuotaAlertThresholdReached"
WRITE_BACKOFF: Final = Backoff(initial=1.0, maximum=60.0)
"""Retry delay of a GPU whose write failed: 1 s doubling to 60 s."""


@dataclass(slots=True)
class FlushReport:
    """What one batch did."""

    written: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    stamped: list[str] = field(default_factory=list)


class GPUStatusWriter:
    """Writes the allocator's owned GPU fields back to GPU status, then stamps the GPUNodes.

    Wire `on_gpu` to the GPU informer; run `run()` under the Supervisor on the leader.
    """

    def __init__(
        self,
        *,
        gpus: ObjectCache,
        state: AllocatorState,
        client: ObjectClient,
        fence: Fence,
        clock: Callable[[], float],
        recorder: EventSink | None = None,
        tick: float = 0.2,
        min_interval: float = 1.0,
        settle: float = 0.5,
        concurrency: int = 16,
        backoff: Backoff = WRITE_BACKOFF,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        self._gpus = gpus
        self._state = state
        self._clock = clock
        self._tick = tick
        self._min_interval = min_interval
        self._settle = settle
        self._limit = asyncio.Semaphore(concurrency)
        self._backoff = backoff
        self._sleep = sleep
        self.writer = FencedWriter(client, fence, events=recorder)
        self._changes = AllocatorChanges(state, "gpu-status-writeback")
        self._dirty: dict[str, float] = {}
        """GPU name → when it was first seen changed since its last write."""
        self._last_write: dict[str, float] = {}
        self._failures: dict[str, int] = {}
        self._retry_at: dict[str, float] = {}
        self._unstamped: set[str] = set()

    @property
    def pending(self) -> int:
        """GPUs waiting to be written (a gauge)."""
        return len(self._dirty)

    def on_gpu(self, event: InformerEvent) -> None:
        """A GPU changed: written again when its owned fields differ from before."""
        if event.kind is EventKind.DELETED:
            self._dirty.pop(event.key.name, None)
            return
        old = event.old
        if old is not None and _owned(old) == _owned(event.obj):
            return
        self._dirty.setdefault(event.key.name, self._clock())

    async def run(self) -> None:
        """Write back until cancelled."""
        await every(self._tick, self.flush, "gpu-status: write-back batch", self._sleep)

    async def flush(self) -> FlushReport:
        """One batch: the changed GPUs that are due, then the GPUNodes' stamp."""
        report = FlushReport()
        allocator = self._state.allocator
        if allocator is None:
            return report
        now = self._clock()
        for name in self._changes.take()[1]:
            self._dirty.setdefault(name, now)
        due = sorted(
            name
            for name, since in self._dirty.items()
            if since + self._settle <= now
            and self._last_write.get(name, float("-inf")) + self._min_interval <= now
            and self._retry_at.get(name, 0.0) <= now
        )
        stamp = format_rfc3339(now)
        jobs = []
        for name in due:
            del self._dirty[name]
            gpu = allocator.gpus.get(name)
            if gpu is None:
                self._forget(name)
                continue
            jobs.append((name, gpu.node))
        outcomes = await asyncio.gather(
            *(self._write(name, stamp) for name, _ in jobs), return_exceptions=True
        )
        nodes = set(self._unstamped)
        for (name, node), outcome in zip(jobs, outcomes, strict=True):
            if isinstance(outcome, BaseException):
                if isinstance(outcome, asyncio.CancelledError):
                    raise outcome
                failures = self._failures.get(name, 0) + 1
                self._failures[name] = failures
                delay = self._backoff.delay(failures)
                self._retry_at[name] = now + delay
                self._dirty.setdefault(name, now)
                report.failed.append(name)
                _log.error("gpu-status: GPU %s not written (retry in %.3gs): %s", name, delay,
                           outcome, extra={"object": f"GPU {name}"})  # fmt: skip
                continue
            self._failures.pop(name, None)
            self._retry_at.pop(name, None)
            if outcome:
                self._last_write[name] = now
                report.written.append(name)
                if node:
                    nodes.add(node)
            else:
                report.unchanged.append(name)
        self._unstamped = set()
        for node in sorted(nodes):
            try:
                await self.writer.patch(
                    "GPUNode", node, {"metadata": {"annotations": {KEYS.last_sync: stamp}}}
                )
            except Exception as error:
                self._unstamped.add(node)
                _log.error("gpu-status: last-sync of GPUNode %s not stamped: %s", node, error,
                           extra={"object": f"GPUNode {node}"})  # fmt: skip
            else:
                report.stamped.append(node)
        return report

    async def _write(self, name: str, stamp: str) -> bool:
        """Write one GPU's owned fields; False when nothing differed (or the GPU is gone)."""
        wrote = False

        def build(current: Obj) -> dict[str, Any] | None:
            nonlocal wrote
            allocator = self._state.allocator
            gpu = allocator.gpus.get(name) if allocator is not None else None
            if gpu is None:
                return None
            desired = gpu_owned_status(gpu, allocator.records if allocator else {}, current, stamp)
            patch = merge_patch(status_of(current), desired)
            wrote = bool(patch)
            return {"status": patch} if patch else None

        async with self._limit:
            written = await self.writer.patch_fresh(
                "GPU", name, build, status=True, cached=self._gpus.get(name)
            )
        return wrote and written is not None

    def _forget(self, name: str) -> None:
        self._last_write.pop(name, None)
        self._failures.pop(name, None)
        self._retry_at.pop(name, None)


def _owned(gpu: Obj) -> tuple[object, ...]:
    status = status_of(gpu)
    return tuple(status.get(key) for key in _OWNED_GPU_FIELDS)


class QuotaStatusWriter:
    """Writes GPUResourceQuota status every `interval` (10 s) when it changed.

    Run `run()` under the Supervisor on the leader (no informer handler needed).
    """

    def __init__(
        self,
        *,
        quotas: ObjectCache,
        state: AllocatorState,
        client: ObjectClient,
        fence: Fence,
        recorder: EventSink | None,
        clock: Callable[[], float],
        interval: float = 10.0,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        self._quotas = quotas
        self._state = state
        self._clock = clock
        self._interval = interval
        self._sleep = sleep
        self.writer = FencedWriter(client, fence, events=recorder)

    async def run(self) -> None:
        """Sync every interval until cancelled."""
        await every(self._interval, self.sync, "quota-status: sync", self._sleep)

    async def sync(self) -> list[str]:
        """Write every quota status that changed; returns `namespace/name` of those written.

        A quota that fails is logged and tried again at the next sync; the others go on.
        """
        allocator = self._state.allocator
        if allocator is None:
            return []
        quotas = self._quotas.list()
        roles = quota_roles(quotas)
        now = format_rfc3339(self._clock())
        written = []
        for quota in quotas:
            metadata = metadata_of(quota)
            namespace, name = str(metadata.get("namespace") or ""), name_of(quota)
            role = roles.get((namespace, name))
            if (
                role is None
                or desired_quota_status(quota, role, allocator.quotas, now).status is None
            ):
                continue
            outcome: list[QuotaStatusUpdate] = []
            build = _quota_builder(role, allocator, now, outcome)

            try:
                result = await self.writer.patch_fresh(
                    "GPUResourceQuota", name, build, namespace=namespace, status=True,
                    cached=quota,
                )  # fmt: skip
            except Exception as error:
                _log.error("quota-status: %s/%s not written: %s", namespace, name, error,
                           extra={"object": f"GPUResourceQuota {namespace}/{name}"})  # fmt: skip
                continue
            if result is None or not outcome:
                continue
            written.append(f"{namespace}/{name}")
            alert = outcome[0].alert
            if alert is not None:
                await self.writer.note(
                    involved("GPUResourceQuota", result), "Warning", QUOTA_THRESHOLD,
                    alert.message or "quota alert threshold reached",
                )  # fmt: skip
        return written


def _quota_builder(
    role: QuotaRole, allocator: Allocator, now: str, outcome: list[QuotaStatusUpdate]
) -> Callable[[Obj], dict[str, Any] | None]:
    """Builds a quota's status patch from its freshest read; `outcome` holds the update sent."""

    def build(current: Obj) -> dict[str, Any] | None:
        update = desired_quota_status(current, role, allocator.quotas, now)
        outcome[:] = []
        if update.status is None:
            return None
        patch = merge_patch(status_of(current), _whole(update.status))
        if not patch:
            return None
        outcome.append(update)
        return {"status": patch}

    return build


def _whole(status: Mapping[str, Any]) -> dict[str, Any]:
    """The quota status as a whole: nested maps replaced exactly (the sync owns all of it)."""
    return {
        key: Exactly(value) if isinstance(value, Mapping) else value
        for key, value in status.items()
    } | {key: None for key in ("used", "availablePercent") if key not in status}
