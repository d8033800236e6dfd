"""TensorFusionWorkloads after admission (admission.md §12).

- A pod without a controller was admitted with `pending-owned-workload=<workload>`: its
  workload gets the pod as controller owner (so the garbage collector deletes the workload with
  the pod), then the annotation goes from the pod.
- A dynamic workload (`workload-mode=dynamic`, written by admission) that has had no pods for
  10 minutes is deleted, with a Normal Event `WorkloadCollected`; the next pod of the workload
  recreates it. A new leader starts the 10 minutes from its own first look.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any, Final

from tensorfusion.adapters.kube.object_client import ObjectClient
from tensorfusion.controller.fenced_writes import EventSink, Fence, FencedWriter, involved
from tensorfusion.controller.reconcile_loop import ReconcileLoop
from tensorfusion.domain.admission.workload import WORKLOAD_KIND, collectable, pod_as_owner
from tensorfusion.domain.annotations import KEYS
from tensorfusion.domain.object_views import Obj, controller_of, is_deleting, metadata_of, uid_of
from tensorfusion.runtime.informer import ObjectCache
from tensorfusion.runtime.informer_store import EventKind, InformerEvent, ObjectKey

__all__ = ["COLLECTED", "COLLECT_AFTER_S", "WorkloadLifecycle"]

_log = logging.getLogger(__name__)

COLLECT_AFTER_S: Final = 600.0
COLLECTED: Final = "WorkloadCollected"


class WorkloadLifecycle:
    """Owners of ownerless pods' workloads, and collection of dynamic workloads without pods.

    Wire `on_pod` to the worker-pod informer and `on_workload` to the workload informer; run
    `run()` under the Supervisor on the leader.
    """

    def __init__(
        self,
        *,
        pods: ObjectCache,
        workloads: ObjectCache,
        client: ObjectClient,
        fence: Fence,
        recorder: EventSink | None,
        clock: Callable[[], float],
        collect_after: float = COLLECT_AFTER_S,
    ) -> None:
        self._pods = pods
        self._workloads = workloads
        self._clock = clock
        self._collect_after = collect_after
        self.writer = FencedWriter(client, fence, events=recorder)
        self.owners: ReconcileLoop[ObjectKey] = ReconcileLoop("workload-owner", self.adopt)
        self.collection: ReconcileLoop[ObjectKey] = ReconcileLoop(
            "workload-collection", self.collect
        )
        self._empty_since: dict[ObjectKey, float] = {}

    # ---- handlers ---------------------------------------------------------------------------

    def on_pod(self, event: InformerEvent) -> None:
        """A worker pod changed: adopt its workload if pending; look at its workload if it went."""
        pod = event.obj
        metadata = metadata_of(pod)
        pending = (metadata.get("annotations") or {}).get(KEYS.pending_owned_workload)
        if event.kind is not EventKind.DELETED and pending and not is_deleting(pod):
            self.owners.add(event.key)
        workload = (metadata.get("labels") or {}).get(KEYS.workload)
        if workload and (event.kind is EventKind.DELETED or is_deleting(pod)):
            self.collection.add(ObjectKey(event.key.namespace, str(workload)))

    def on_workload(self, event: InformerEvent) -> None:
        """A workload changed: see whether it is to be collected."""
        if event.kind is EventKind.DELETED:
            self._empty_since.pop(event.key, None)
        else:
            self.collection.add(event.key)

    async def run(self) -> None:
        """Both loops until cancelled."""
        async with asyncio.TaskGroup() as group:
            group.create_task(self.owners.run())
            group.create_task(self.collection.run())

    # ---- ownerless pods ---------------------------------------------------------------------

    async def adopt(self, key: ObjectKey) -> None:
        """Make the pod its workload's controller owner, then drop `pending-owned-workload`."""
        pod = self._pods.get(key.name, key.namespace)
        annotation = KEYS.pending_owned_workload
        name = (metadata_of(pod).get("annotations") or {}).get(annotation) if pod else None
        if pod is None or not name or is_deleting(pod):
            return
        owner = pod_as_owner(pod)

        def own(current: Obj) -> dict[str, Any] | None:
            refs = list(metadata_of(current).get("ownerReferences") or ())
            if any(ref.get("uid") == owner["uid"] for ref in refs):
                return None
            controller = controller_of(current)
            if controller is not None:
                _log.warning("workload %s/%s is already controlled by %s %s; pod %s not made its "
                             "owner", key.namespace, name, controller.get("kind"),
                             controller.get("name"), key.name)  # fmt: skip
                return None
            return {"metadata": {"ownerReferences": [*refs, owner]}}

        written = await self.writer.patch_fresh(WORKLOAD_KIND, str(name), own,
                                                namespace=key.namespace)  # fmt: skip
        if written is None:
            _log.warning("workload %s/%s of pod %s is gone; nothing to own", key.namespace, name,
                         key.name)  # fmt: skip
        uid = uid_of(pod)

        def settled(current: Obj) -> dict[str, Any] | None:
            annotations = metadata_of(current).get("annotations") or {}
            if uid_of(current) != uid or annotation not in annotations:
                return None
            return {"metadata": {"annotations": {annotation: None}}}

        await self.writer.patch_fresh("Pod", key.name, settled, namespace=key.namespace,
                                      cached=pod)  # fmt: skip

    # ---- collection -------------------------------------------------------------------------

    def pods_of(self, key: ObjectKey) -> int:
        """The pods of workload `key` that are not being deleted."""
        label = KEYS.workload
        return sum(
            1 for pod in self._pods.list(key.namespace)
            if (metadata_of(pod).get("labels") or {}).get(label) == key.name
            and not is_deleting(pod)
        )  # fmt: skip

    async def collect(self, key: ObjectKey) -> float | None:
        """Delete a dynamic workload without pods for `collect_after`; else when to look again."""
        workload = self._workloads.get(key.name, key.namespace)
        if workload is None or not collectable(workload, self.pods_of(key), KEYS):
            self._empty_since.pop(key, None)
            return None
        now = self._clock()
        left = self._empty_since.setdefault(key, now) + self._collect_after - now
        if left > 0:
            return left
        self._empty_since.pop(key, None)
        if await self.writer.delete(WORKLOAD_KIND, key.name, key.namespace):
            minutes = self._collect_after / 60
            _log.info("workload %s/%s collected: no pods for %.0f min", key.namespace, key.name,
                      minutes)  # fmt: skip
            await self.writer.note(involved(WORKLOAD_KIND, workload), "Normal", COLLECTED,
                                   f"no pods for {minutes:.0f} min: deleted (the next pod of "
                                   "the workload creates it again)")  # fmt: skip
        return None
