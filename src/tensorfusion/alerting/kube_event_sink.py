"""The controller's event sink (alerting.md §7.5): a Warning Event on the TensorFusionCluster
for each report (a bad rule, a rejected config.yaml, the store or delivery failing), plus the
structured log line of the log sink.

`WarningSink.warning` is synchronous (the config watcher and the evaluator call it in passing);
the Event is written by a task on the running loop through `EventRecorder`, which deduplicates
identical Events as `kubectl describe` shows them and never raises. The task first waits for
the TensorFusionCluster cache to hold its first list, then writes on the cluster named by the
sink or, without a name, the oldest one. With no cluster at all the report stays a log line
(counted in `skipped`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any, Final, Protocol

from tensorfusion.adapters.kube.events import InvolvedObject
from tensorfusion.alerting.event_sink import LogEventSink, WarningSink
from tensorfusion.domain.object_views import name_of
from tensorfusion.runtime.informer import ObjectCache, SyncedObjectCache

__all__ = [
    "EventWriter",
    "KubernetesEventSink",
    "cluster_target",
]

_log = logging.getLogger(__name__)
CLUSTER_KIND: Final = "TensorFusionCluster"
CLUSTER_API_VERSION: Final = "tensor-fusion.ai/v1"
_MAX_IN_FLIGHT: Final = 256


class EventWriter(Protocol):
    """What the sink needs of `adapters.kube.events.EventRecorder`."""

    async def record(
        self, involved: InvolvedObject, type_: Any, reason: str, message: str
    ) -> None: ...


def cluster_target(cache: ObjectCache, name: str | None = None) -> InvolvedObject | None:
    """The TensorFusionCluster named `name`, or the oldest one (then by name); None if none."""
    clusters = [obj for obj in cache.list() if name_of(obj)]
    if name is not None:
        clusters = [obj for obj in clusters if name_of(obj) == name]
    if not clusters:
        return None

    def age(obj: Mapping[str, Any]) -> tuple[str, str]:
        metadata = obj["metadata"]
        return str(metadata.get("creationTimestamp") or ""), str(metadata["name"])

    metadata = min(clusters, key=age)["metadata"]
    return InvolvedObject(
        CLUSTER_KIND,
        str(metadata["name"]),
        uid=str(metadata.get("uid") or ""),
        api_version=CLUSTER_API_VERSION,
    )


class KubernetesEventSink:
    """Warning Events on a TensorFusionCluster, plus the log line."""

    def __init__(
        self,
        recorder: EventWriter,
        clusters: SyncedObjectCache,
        *,
        cluster_name: str | None = None,
        log_sink: WarningSink | None = None,
        ready_timeout_s: float = 60.0,
    ) -> None:
        self._recorder = recorder
        self._clusters = clusters
        self._cluster_name = cluster_name
        self._log_sink = log_sink or LogEventSink()
        self._ready_timeout_s = ready_timeout_s
        self._tasks: set[asyncio.Task[None]] = set()
        self.reported = 0
        self.written = 0
        self.skipped = 0

    def warning(self, reason: str, message: str) -> None:
        """Log at once; write the Event in the background (never raises, never blocks)."""
        self.reported += 1
        self._log_sink.warning(reason, message)
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self.skipped += 1
            _log.warning("event %s not written as an Event: no event loop is running", reason)
            return
        if len(self._tasks) >= _MAX_IN_FLIGHT:
            self.skipped += 1
            _log.warning("event %s not written: %d Events are still being written", reason,
                         len(self._tasks))  # fmt: skip
            return
        task = loop.create_task(self._write(reason, message), name=f"event:{reason}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _write(self, reason: str, message: str) -> None:
        try:
            await asyncio.wait_for(self._clusters.wait_synced(), self._ready_timeout_s)
        except TimeoutError:
            _log.warning("event %s: the TensorFusionCluster cache has not synced", reason)
        target = cluster_target(self._clusters, self._cluster_name)
        if target is None:
            self.skipped += 1
            which = f"named {self._cluster_name}" if self._cluster_name else "at all"
            _log.warning("event %s not written: no TensorFusionCluster %s", reason, which)
            return
        await self._recorder.record(target, "Warning", reason, message)
        self.written += 1

    async def drain(self) -> None:
        """Wait for the Events being written (tests, shutdown)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def close(self) -> None:
        """Cancel the Events still being written."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
