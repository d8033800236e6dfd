"""GPUPool status: sums over its GPUNodes from the allocator's memory, and its phase (api.md
§2.2; the rules are in `domain.desired_state.pools`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from tensorfusion.adapters.kube.object_client import ObjectClient
from tensorfusion.controller.allocator_state import AllocatorState
from tensorfusion.controller.fenced_writes import EventSink, Fence, FencedWriter, involved
from tensorfusion.controller.reconcile_loop import ReconcileLoop
from tensorfusion.domain.allocator.capacity_figures import NodeCapacity, node_capacity
from tensorfusion.domain.annotations import KEYS
from tensorfusion.domain.desired_state.objects import merge_patch
from tensorfusion.domain.desired_state.pools import pool_status
from tensorfusion.domain.object_views import Obj, is_deleting, labels_of, name_of, status_of
from tensorfusion.domain.timestamps import format_rfc3339
from tensorfusion.runtime.informer import ObjectCache
from tensorfusion.runtime.informer_store import InformerEvent

__all__ = ["PoolStatusReconciler"]

NOT_READY_RETRY_S: Final = 1.0
POOL_NOT_READY: Final = "PoolNotReady"
_NODE_FIELDS: Final = (
    "phase", "totalTFlops", "totalVRAM", "availableTFlops", "availableVRAM", "virtualTFlops",
    "virtualVRAM", "virtualAvailableTFlops", "virtualAvailableVRAM", "totalGPUPods",
)  # fmt: skip


class PoolStatusReconciler:
    """Each GPUPool's status from its GPUNodes (label `tensor-fusion.ai/managed-by=<pool>`).

    Wire `on_pool` to the GPUPool informer and `on_gpu_node` to the GPUNode one; run `run()`
    under the Supervisor on the leader. A pool is reconciled at most once per `min_interval`
    (5 s: each look sums every node of the pool, and while pods are bound its figures change
    all the time)."""

    def __init__(
        self,
        *,
        pools: ObjectCache,
        gpu_nodes: ObjectCache,
        state: AllocatorState,
        client: ObjectClient,
        fence: Fence,
        recorder: EventSink | None,
        clock: Callable[[], float],
        workers: int = 1,
        min_interval: float = 5.0,
    ) -> None:
        self._pools = pools
        self._gpu_nodes = gpu_nodes
        self._state = state
        self._clock = clock
        self.writer = FencedWriter(client, fence, events=recorder)
        self.loop: ReconcileLoop[str] = ReconcileLoop(
            "gpupool", self.reconcile, workers=workers, min_interval=min_interval
        )

    def on_pool(self, event: InformerEvent) -> None:
        """A GPUPool changed (its own status writes too: a cached copy that caught up with an
        older write of ours is corrected at the next reconcile)."""
        self.loop.add(event.key.name)

    def on_gpu_node(self, event: InformerEvent) -> None:
        """A GPUNode changed: its pool, when its phase, figures or pool changed."""
        if not event.changed(_node_facts):
            return
        for obj in (event.obj, event.old):
            pool = labels_of(obj).get(KEYS.managed_by) if obj is not None else None
            if pool:
                self.loop.add(pool)

    async def run(self) -> None:
        """Reconcile until cancelled."""
        await self.loop.run()

    async def reconcile(self, name: str) -> float | None:
        """Write the pool's status when it changed."""
        allocator = self._state.allocator
        if allocator is None:
            return NOT_READY_RETRY_S
        pool = self._pools.get(name)
        if pool is None:
            return None
        members = [
            node for node in self._gpu_nodes.list() if labels_of(node).get(KEYS.managed_by) == name
        ]
        capacities: dict[str, NodeCapacity] = {}
        for node in members:
            state = allocator.nodes.get(name_of(node))
            if state is not None:
                capacities[name_of(node)] = node_capacity(allocator, state)
        now = format_rfc3339(self._clock())
        before = status_of(pool)

        def build(current: Obj) -> dict[str, Any] | None:
            desired = pool_status(current, members, capacities, now)
            patch = merge_patch(status_of(current), desired)
            return {"status": patch} if patch else None

        written = await self.writer.patch_fresh("GPUPool", name, build, status=True, cached=pool)
        status = status_of(written)
        if (
            written is not None
            and before.get("phase") == "Running"
            and status.get("phase") != "Running"
        ):
            ready: dict[str, Any] = next(
                (c for c in status.get("conditions") or () if c.get("type") == "Ready"), {}
            )
            await self.writer.note(
                involved("GPUPool", written), "Warning", POOL_NOT_READY,
                f"pool {name} is {status.get('phase')}: {ready.get('message', '')}",
            )  # fmt: skip
        return None


def _node_facts(node: Obj) -> tuple[object, ...]:
    status = status_of(node)
    return (
        labels_of(node).get(KEYS.managed_by),
        is_deleting(node),
        *(status.get(field) for field in _NODE_FIELDS),
    )
