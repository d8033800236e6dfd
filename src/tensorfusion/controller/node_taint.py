"""Progressive migration's node taint (scheduling.md §11, deployment.md §12): a node where
TensorFusion holds GPUs carries `tensor-fusion.ai/used-by=tensor-fusion:PreferNoSchedule`, so
the NVIDIA device plugin's pods prefer other nodes; it is removed when the node is idle again.

Only with progressive migration on (`NVIDIA_OPERATOR_PROGRESSIVE_MIGRATION=true`). The decision
reads the allocator's committed state (`progressive_migration.wants_progressive_taint`) for the
nodes its change cursor reports, and for Nodes whose taints someone else changed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, Final

from tensorfusion.adapters.kube.object_client import ObjectClient
from tensorfusion.controller.allocator_state import AllocatorChanges, AllocatorState
from tensorfusion.controller.fenced_writes import EventSink, Fence, FencedWriter
from tensorfusion.controller.reconcile_loop import ReconcileLoop, every
from tensorfusion.domain.allocator.progressive_migration import (
    taints_with_progressive_taint,
    wants_progressive_taint,
)
from tensorfusion.domain.object_views import Obj
from tensorfusion.runtime.informer import ObjectCache
from tensorfusion.runtime.informer_store import EventKind, InformerEvent

__all__ = ["ProgressiveTaintReconciler"]

Sleep = Callable[[float], Awaitable[None]]
NOT_READY_RETRY_S: Final = 1.0


def _taints(node: Obj) -> list[Any]:
    return list((node.get("spec") or {}).get("taints") or ())


class ProgressiveTaintReconciler:
    """Adds and removes the `used-by` taint on Nodes following the allocator.

    With `enabled=False` (progressive migration off) it does nothing at all. Wire `on_node` to
    the Node informer; run `run()` under the Supervisor on the leader.
    """

    def __init__(
        self,
        *,
        nodes: ObjectCache,
        state: AllocatorState,
        client: ObjectClient,
        fence: Fence,
        enabled: bool,
        recorder: EventSink | None = None,
        workers: int = 1,
        change_interval: float = 1.0,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        self._nodes = nodes
        self._state = state
        self._enabled = enabled
        self._change_interval = change_interval
        self._sleep = sleep
        self.writer = FencedWriter(client, fence, events=recorder)
        self.loop: ReconcileLoop[str] = ReconcileLoop(
            "progressive-taint", self.reconcile, workers=workers
        )
        self._changes = AllocatorChanges(state, "progressive-taint")

    def on_node(self, event: InformerEvent) -> None:
        """A Node appeared or its taints changed."""
        if not self._enabled or event.kind is EventKind.DELETED:
            return
        if event.old is not None and _taints(event.old) == _taints(event.obj):
            return
        self.loop.add(event.key.name)

    async def run(self) -> None:
        """Follow the allocator and reconcile until cancelled (idle when disabled)."""
        if not self._enabled:
            await asyncio.Event().wait()
        async with asyncio.TaskGroup() as group:
            group.create_task(self.loop.run())
            group.create_task(self._follow_allocator())

    async def _follow_allocator(self) -> None:
        await every(self._change_interval, self.take_changes,
                    "progressive-taint: reading the allocator's changes", self._sleep)  # fmt: skip

    def take_changes(self) -> set[str]:
        """Queue the nodes the allocator changed since the last call; returns them."""
        if not self._enabled:
            return set()
        changed, _ = self._changes.take()
        for name in changed:
            self.loop.add(name)
        return changed

    async def reconcile(self, name: str) -> float | None:
        """Add or remove the taint on one Node."""
        if not self._enabled:
            return None
        allocator = self._state.allocator
        if allocator is None:
            return NOT_READY_RETRY_S
        node = self._nodes.get(name)
        if node is None:
            return None

        def build(current: Obj) -> dict[str, Any] | None:
            state = self._state.allocator.nodes.get(name) if self._state.allocator else None
            wanted = state is not None and wants_progressive_taint(state)
            taints = taints_with_progressive_taint(_taints(current), wanted)
            return None if taints is None else {"spec": {"taints": taints}}

        await self.writer.patch_fresh("Node", name, build, cached=node)
        return None
