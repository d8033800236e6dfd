"""Worker pods that end or go away: their allocation released once per UID, an Event saying
so, and `tensor-fusion.ai/finalizer` removed from a deleting pod after the release
(scheduling.md §12, *Release*).

`AllocatorState.on_pod` releases on the cache event itself; this reconciler releases again
(idempotent) before it removes the finalizer, so the order of the two handlers does not matter.
Every 3 minutes a sweep releases committed records whose pod ended, or is gone from the cache
on two sweeps in a row (a pod bound a moment ago may not be cached yet), and queues every
deleting pod that still carries the finalizer.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from tensorfusion.adapters.kube.events import InvolvedObject
from tensorfusion.adapters.kube.object_client import ObjectClient
from tensorfusion.controller.allocator_state import AllocatorState
from tensorfusion.controller.fenced_writes import EventSink, Fence, FencedWriter, involved
from tensorfusion.controller.reconcile_loop import ReconcileLoop, every
from tensorfusion.controller.replica_recount import CounterSlot, counter_of
from tensorfusion.domain.admission.replica_gate import decremented_count
from tensorfusion.domain.allocator.records import AllocationRecord, RecordState
from tensorfusion.domain.allocator.recovery import worker_gpu_ids
from tensorfusion.domain.annotations import KEYS
from tensorfusion.domain.object_views import Obj, is_deleting, metadata_of, uid_of
from tensorfusion.runtime.informer import ObjectCache
from tensorfusion.runtime.informer_store import EventKind, InformerEvent, ObjectKey

__all__ = ["SWEEP_INTERVAL_S", "PodReleaser"]

_log = logging.getLogger(__name__)
Sleep = Callable[[float], Awaitable[None]]

SWEEP_INTERVAL_S: Final = 180.0
NOT_READY_RETRY_S: Final = 1.0
RELEASED: Final = "GPUResourcesReleased"
_REMEMBERED_UIDS: Final = 65536


@dataclass(frozen=True, slots=True)
class _Note:
    subject: InvolvedObject
    message: str


def _ended(pod: Obj) -> str:
    """Why the pod's GPUs are released ("" while it lives)."""
    if is_deleting(pod):
        return "deleted"
    phase = (pod.get("status") or {}).get("phase")
    return str(phase) if phase in ("Succeeded", "Failed") else ""


def _finalizers(pod: Obj) -> list[str]:
    return [str(f) for f in metadata_of(pod).get("finalizers") or ()]


class PodReleaser:
    """Releases ended worker pods and removes their finalizer.

    Wire `on_pod` to the worker-pod informer (pods labelled `component=worker`); run `run()`
    under the Supervisor on the leader.
    """

    def __init__(
        self,
        *,
        pods: ObjectCache,
        state: AllocatorState,
        client: ObjectClient,
        fence: Fence,
        recorder: EventSink | None,
        clock: Callable[[], float],
        workers: int = 2,
        sweep_interval: float = SWEEP_INTERVAL_S,
        sleep: Sleep = asyncio.sleep,
        recount: Callable[[CounterSlot], None] | None = None,
    ) -> None:
        self._pods = pods
        self._state = state
        self._clock = clock
        self._sweep_interval = sweep_interval
        self._sleep = sleep
        self._recount = recount
        self.writer = FencedWriter(client, fence, events=recorder)
        self.loop: ReconcileLoop[ObjectKey] = ReconcileLoop(
            "pod-release", self.reconcile, workers=workers
        )
        self._reported: OrderedDict[str, None] = OrderedDict()
        self._notes: dict[ObjectKey, _Note] = {}
        self._suspects: set[str] = set()
        self._uncounted: OrderedDict[str, None] = OrderedDict()
        self.released_by_sweep = 0

    # ---- handler ----------------------------------------------------------------------------

    def on_pod(self, event: InformerEvent) -> None:
        """A worker pod changed: note its release once, queue a deleting pod's finalizer."""
        pod = event.obj
        gone = event.kind is EventKind.DELETED
        why = "deleted" if gone else _ended(pod)
        if why:
            self._note_release(event.key, pod, why)
        if not gone and is_deleting(pod) and KEYS.finalizer in _finalizers(pod):
            self.loop.add(event.key)

    def _note_release(self, key: ObjectKey, pod: Obj, why: str) -> None:
        uid = uid_of(pod)
        node = str((pod.get("spec") or {}).get("nodeName") or "")
        gpus = worker_gpu_ids(pod)
        if not uid or not gpus or not node or uid in self._reported:
            return
        self._remember(uid)
        message = f"released GPUs {', '.join(gpus)} on node {node}: the pod {why}"
        self._notes[key] = _Note(involved("Pod", pod, "v1"), message)
        self.loop.add(key)

    def _remember(self, uid: str) -> None:
        self._reported[uid] = None
        while len(self._reported) > _REMEMBERED_UIDS:
            self._reported.popitem(last=False)

    # ---- loops ------------------------------------------------------------------------------

    async def run(self) -> None:
        """Reconcile and sweep until cancelled."""
        async with asyncio.TaskGroup() as group:
            group.create_task(self.loop.run())
            group.create_task(self._sweeps())

    async def _sweeps(self) -> None:
        await every(self._sweep_interval, self.sweep, "pod-release: sweep", self._sleep,
                    first=False)  # fmt: skip

    def sweep(self) -> list[AllocationRecord]:
        """Release committed records whose pod ended or stayed gone for two sweeps, and queue
        deleting pods that still carry the finalizer; returns the records released."""
        allocator = self._state.allocator
        if allocator is None:
            return []
        pods = self._pods.list()
        by_uid: Mapping[str, Obj] = {uid_of(pod): pod for pod in pods}
        released: list[AllocationRecord] = []
        suspects: set[str] = set()
        for uid, record in list(allocator.records.items()):
            if record.state is not RecordState.COMMITTED:
                continue
            pod = by_uid.get(uid)
            if pod is not None and not _ended(pod):
                continue
            if pod is None and uid not in self._suspects:
                suspects.add(uid)
                continue
            if allocator.release(uid) is not None:
                released.append(record)
        self._suspects = suspects
        for record in released:
            request = record.request
            _log.info("pod-release: sweep released pod %s (UID %s) on node %s", request.key,
                      record.uid, record.node)  # fmt: skip
            if record.uid in self._reported:
                continue
            self._remember(record.uid)
            key = ObjectKey(request.namespace, request.pod_name)
            subject = InvolvedObject("Pod", request.pod_name, request.namespace, record.uid, "v1")
            message = (
                f"released GPUs {', '.join(record.gpus)} on node {record.node}: the pod "
                "ended or is gone (sweep)"
            )
            self._notes[key] = _Note(subject, message)
            self.loop.add(key)
        self.released_by_sweep += len(released)
        for pod in pods:
            if is_deleting(pod) and KEYS.finalizer in _finalizers(pod):
                self.loop.add(ObjectKey.of(pod))
        return released

    # ---- reconcile --------------------------------------------------------------------------

    async def _uncount(self, pod: Obj) -> None:
        """One less on the enabled-replicas counter of the pod's owner (admission.md §8), once
        per pod, before the finalizer goes; the key goes at zero; an owner that is gone is
        done. A pod that had ended was already freed by the recount, which runs after."""
        uid = uid_of(pod)
        slot = counter_of(pod)
        if slot is None or uid in self._uncounted:
            return
        if (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed"):

            def build(current: Obj) -> dict[str, Any] | None:
                if slot.key not in (metadata_of(current).get("annotations") or {}):
                    return None
                return {"metadata": {"annotations": {
                    slot.key: decremented_count(current, slot.key)}}}  # fmt: skip

            await self.writer.patch_fresh(slot.kind, slot.name, build, namespace=slot.namespace)
        self._uncounted[uid] = None
        while len(self._uncounted) > _REMEMBERED_UIDS:
            self._uncounted.popitem(last=False)
        if self._recount is not None:
            self._recount(slot)

    async def reconcile(self, key: ObjectKey) -> float | None:
        """Record the release Event; release a deleting pod and remove its finalizer."""
        note = self._notes.pop(key, None)
        if note is not None:
            await self.writer.note(note.subject, "Normal", RELEASED, note.message)
        pod = self._pods.get(key.name, key.namespace)
        finalizer = KEYS.finalizer
        if pod is None or not is_deleting(pod) or finalizer not in _finalizers(pod):
            return None
        allocator = self._state.allocator
        if allocator is None:
            return NOT_READY_RETRY_S  # recovery restores the pod first; release after it
        uid = uid_of(pod)
        allocator.release(uid)
        await self._uncount(pod)

        def build(current: Obj) -> dict[str, Any] | None:
            if uid_of(current) != uid or finalizer not in _finalizers(current):
                return None
            kept = [f for f in _finalizers(current) if f != finalizer]
            return {"metadata": {"finalizers": kept}}

        await self.writer.patch_fresh("Pod", key.name, build, namespace=key.namespace, cached=pod)
        return None
