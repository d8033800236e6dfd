"""Enabled-replicas counters recounted from the live pods (admission.md §8, *Recount*).

The count on an owner is a cache of how many of its pods got TensorFusion treatment. It drifts
when the API server rejects a pod after the webhook counted it (another admission plugin, a
quota) or when a counted pod ends without being deleted. The leader recounts every counter it
knows every 5 minutes and right after the pod controller takes one off: the live pods (neither
ended nor deleting) that carry the counter's `pod-counter-key` and have that controller owner.
`domain.admission.replica_gate.recount` decides: raise at once, lower only once the owner's
resourceVersion has stood still for 30 s. Counters are known from the worker pods that carry
them (a pod's counter is remembered after the pod is gone, until the counter reads 0).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from tensorfusion.adapters.kube.object_client import KubeError, ObjectClient
from tensorfusion.controller.fenced_writes import EventSink, Fence, FencedWriter
from tensorfusion.controller.reconcile_loop import ReconcileLoop, every
from tensorfusion.domain.admission.replica_gate import (
    COUNTED_OWNER_KINDS,
    RecountObservation,
    read_count,
    recount,
)
from tensorfusion.domain.admission.workload_identity import owner_group
from tensorfusion.domain.annotations import KEYS
from tensorfusion.domain.object_views import Obj, controller_of, is_deleting, metadata_of
from tensorfusion.runtime.informer import ObjectCache
from tensorfusion.runtime.informer_store import EventKind, InformerEvent

__all__ = ["RECOUNT_INTERVAL_S", "RECOUNT_SETTLE_S", "CounterSlot", "ReplicaRecount", "counter_of"]

_log = logging.getLogger(__name__)
Sleep = Callable[[float], Awaitable[None]]

RECOUNT_INTERVAL_S: Final = 300.0
RECOUNT_SETTLE_S: Final = 30.0
CONFLICT_RETRY_S: Final = 0.5


@dataclass(frozen=True, slots=True)
class CounterSlot:
    """One counter: annotation `key` on the controller owner `kind`/`name` in `namespace`."""

    namespace: str
    kind: str
    name: str
    key: str


def counter_of(pod: Mapping[str, Any]) -> CounterSlot | None:
    """The counter a pod was counted on (None: not counted, or an owner kind never counted)."""
    metadata = metadata_of(pod)
    key = (metadata.get("annotations") or {}).get(KEYS.pod_counter_key)
    owner = controller_of(pod)
    if not key or owner is None:
        return None
    kind = str(owner.get("kind") or "")
    if (owner_group(owner), kind) not in COUNTED_OWNER_KINDS:
        return None
    return CounterSlot(str(metadata.get("namespace") or ""), kind, str(owner.get("name") or ""),
                       str(key))  # fmt: skip


def ended(pod: Mapping[str, Any]) -> bool:
    """Whether the pod no longer holds its slot: deleting, or Succeeded / Failed."""
    return is_deleting(pod) or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


class ReplicaRecount:
    """Recounts enabled-replicas counters on the leader.

    Wire `on_pod` to the worker-pod informer; `after_decrement(slot)` is the pod controller's
    call; run `run()` under the Supervisor on the leader.
    """

    def __init__(
        self,
        *,
        pods: ObjectCache,
        client: ObjectClient,
        fence: Fence,
        recorder: EventSink | None,
        clock: Callable[[], float],
        interval: float = RECOUNT_INTERVAL_S,
        settle: float = RECOUNT_SETTLE_S,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        self._pods = pods
        self._clock = clock
        self._interval = interval
        self._settle = settle
        self._sleep = sleep
        self.writer = FencedWriter(client, fence, events=recorder)
        self.loop: ReconcileLoop[CounterSlot] = ReconcileLoop("replica-recount", self.reconcile)
        self._known: set[CounterSlot] = set()
        self._seen: dict[CounterSlot, RecountObservation] = {}
        self.corrected = 0

    @property
    def counters(self) -> frozenset[CounterSlot]:
        """The counters known (recounted by each sweep)."""
        return frozenset(self._known)

    def on_pod(self, event: InformerEvent) -> None:
        """Remember the pod's counter; recount it when the pod ended."""
        slot = counter_of(event.obj)
        if slot is None:
            return
        self._known.add(slot)
        phase = (event.obj.get("status") or {}).get("phase")
        if event.kind is not EventKind.DELETED and phase in ("Succeeded", "Failed"):
            self.loop.add(slot)

    def after_decrement(self, slot: CounterSlot) -> None:
        """The pod controller took one off this counter: recount it."""
        self._known.add(slot)
        self.loop.add(slot)

    async def run(self) -> None:
        """Recount on demand and every `interval` until cancelled."""
        async with asyncio.TaskGroup() as group:
            group.create_task(self.loop.run())
            group.create_task(every(self._interval, self.sweep, "replica-recount: sweep",
                                    self._sleep, first=False))  # fmt: skip

    def sweep(self) -> None:
        """Queue every known counter."""
        for slot in self._known:
            self.loop.add(slot)

    def live(self, slot: CounterSlot) -> int:
        """The live pods counted on `slot`."""
        return sum(
            1 for pod in self._pods.list(slot.namespace)
            if not ended(pod) and counter_of(pod) == slot
        )  # fmt: skip

    async def reconcile(self, slot: CounterSlot) -> float | None:
        """Recount one counter; returns when to look again (a lowering waiting to settle)."""
        owner = await self.writer.read(slot.kind, slot.name, slot.namespace)
        if owner is None:
            self._forget(slot)
            return None
        live = self.live(slot)
        stored, corrupt = read_count(owner, slot.key)
        version = str(metadata_of(owner).get("resourceVersion") or "")
        decision = recount(stored=-1 if corrupt else stored, live=live, resource_version=version,
                           seen=self._seen.get(slot), now=self._clock(),
                           settle_s=self._settle)  # fmt: skip
        if decision.observation is None:
            self._seen.pop(slot, None)
        else:
            self._seen[slot] = decision.observation
        if decision.write is not None and not await self._write(slot, owner, decision.write):
            return CONFLICT_RETRY_S
        if live == 0 and (decision.write == 0 or (stored == 0 and not corrupt)):
            self._forget(slot)
        return decision.recheck_s

    async def _write(self, slot: CounterSlot, owner: Obj, count: int) -> bool:
        """Store `count` (0 deletes the key) if the owner did not change; False on a conflict."""
        version = metadata_of(owner).get("resourceVersion")
        before = (metadata_of(owner).get("annotations") or {}).get(slot.key)
        body = {
            "metadata": {
                "resourceVersion": version,
                "annotations": {slot.key: str(count) if count > 0 else None},
            }
        }
        try:
            await self.writer.patch(slot.kind, slot.name, body, namespace=slot.namespace)
        except KubeError as error:
            if error.code == 409:
                return False
            raise
        self.corrected += 1
        _log.info("replica-recount: %s %s/%s %s %s -> %d (live pods)", slot.kind, slot.namespace,
                  slot.name, slot.key, before, count)  # fmt: skip
        return True

    def _forget(self, slot: CounterSlot) -> None:
        self._known.discard(slot)
        self._seen.pop(slot, None)
