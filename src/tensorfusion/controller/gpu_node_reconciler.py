"""GPUNodes: one per Kubernetes Node that joins a pool, its status from the allocator's memory,
its phase and its GPUs' phases from the node agent's readiness (api.md §2.3, §2.4,
deployment.md §10; the rules are in `domain.desired_state.node_selection` and `.gpu_nodes`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final

from tensorfusion.adapters.kube.object_client import KubeError, ObjectClient
from tensorfusion.controller.allocator_state import AllocatorChanges, AllocatorState
from tensorfusion.controller.fenced_writes import EventSink, Fence, FencedWriter, involved
from tensorfusion.controller.reconcile_loop import ReconcileLoop, every
from tensorfusion.domain.allocator.allocator import Allocator
from tensorfusion.domain.allocator.capacity_figures import node_capacity
from tensorfusion.domain.allocator.mapping import HOSTNAME_KEY
from tensorfusion.domain.annotations import KEYS
from tensorfusion.domain.desired_state.gpu_nodes import (
    STALE,
    AgentReadiness,
    AgentReadinessMode,
    agent_readiness,
    current_hypervisor_pod,
    gpu_node_status,
    gpu_phase,
    heartbeat_time,
    missing_since,
)
from tensorfusion.domain.desired_state.node_selection import (
    gpu_node_body,
    gpu_node_metadata_patch,
    is_managed_gpu_node,
    parse_label_query,
    pool_for_node,
)
from tensorfusion.domain.desired_state.objects import merge_patch
from tensorfusion.domain.object_views import (
    Obj,
    annotations_of,
    is_deleting,
    labels_of,
    metadata_of,
    name_of,
    status_of,
)
from tensorfusion.runtime.informer import ObjectCache
from tensorfusion.runtime.informer_store import EventKind, InformerEvent, ObjectKey

__all__ = ["GPUNodeReconciler"]

_log = logging.getLogger(__name__)
ALLOCATION_STATUS_INTERVAL_S: Final = 5.0
"""A node's allocation figures (GPUNode status) follow the allocator at most this late."""
Sleep = Callable[[float], Awaitable[None]]

NOT_READY_RETRY_S: Final = 1.0
"""How soon a reconcile looks again while the allocator is still recovering."""
HEARTBEAT_STALE: Final = "HypervisorHeartbeatStale"
GPU_MISSING: Final = "GPUMissing"
NODE_NOT_READY: Final = "GPUNodeNotReady"
NODE_SEVERAL_POOLS: Final = "NodeMatchesSeveralPools"
_IGNORED_METADATA: Final = ("resourceVersion", "managedFields", "generation")


class GPUNodeReconciler:
    """A GPUNode per Node matching a pool, kept in step with the allocator and the agent.

    Wire `on_node` (Node informer), `on_gpu_node` (GPUNode), `on_gpu` (GPU), `on_pool`
    (GPUPool) and `on_hypervisor_pod` (pods labelled `tensor-fusion.ai/component=hypervisor`:
    in `pod` mode their readiness, in `heartbeat` mode their creation, which a heartbeat must
    follow); run `run()` under the Supervisor on the leader.
    `initial_selector` is `INITIAL_GPU_NODE_LABEL_SELECTOR` (a `kubectl -l` string;
    `LabelQueryError` when it does not parse).
    """

    def __init__(
        self,
        *,
        nodes: ObjectCache,
        gpu_nodes: ObjectCache,
        gpus: ObjectCache,
        pools: ObjectCache,
        hypervisor_pods: ObjectCache | None,
        state: AllocatorState,
        client: ObjectClient,
        fence: Fence,
        recorder: EventSink | None,
        clock: Callable[[], float],
        initial_selector: str = "nvidia.com/gpu.present=true",
        agent_readiness: AgentReadinessMode = "pod",
        workers: int = 2,
        change_interval: float = 1.0,
        allocation_interval: float = ALLOCATION_STATUS_INTERVAL_S,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        self._nodes = nodes
        self._gpu_nodes = gpu_nodes
        self._gpus = gpus
        self._pools = pools
        self._agent_pods = hypervisor_pods
        self._state = state
        self._clock = clock
        self._initial = parse_label_query(initial_selector)
        self._mode: AgentReadinessMode = agent_readiness
        self._change_interval = change_interval
        self._allocation_interval = allocation_interval
        self._sleep = sleep
        self.writer = FencedWriter(client, fence, events=recorder)
        self.loop: ReconcileLoop[str] = ReconcileLoop("gpunode", self.reconcile, workers=workers)
        self._pods_by_node: dict[str, set[ObjectKey]] = {}
        self._changes = AllocatorChanges(state, "gpunode-reconciler")
        self._missing_reported: dict[str, str] = {}
        self._several_pools_reported: dict[str, tuple[str, ...]] = {}

    # ---- handlers ---------------------------------------------------------------------------

    def on_node(self, event: InformerEvent) -> None:
        """A Node changed: its membership when its labels or deletion changed."""
        old = event.old
        if (
            old is None
            or event.kind is not EventKind.MODIFIED
            or labels_of(old) != labels_of(event.obj)
            or is_deleting(old) != is_deleting(event.obj)
        ):
            self.loop.add(event.key.name)

    def on_gpu_node(self, event: InformerEvent) -> None:
        """A GPUNode changed: not for our own `last-sync` stamp alone, nor for a newer heartbeat
        of a Running node (the staleness recheck reads the latest beat when it is due); a beat
        that moved back in time (a restored or edited status) is looked at."""
        old = event.old
        forward = old is not None and (heartbeat_time(event.obj) or 0.0) >= (
            heartbeat_time(old) or 0.0)  # fmt: skip
        if event.changed(lambda o: _comparable(o, ignore_beat=forward)):
            self.loop.add(event.key.name)

    def on_gpu(self, event: InformerEvent) -> None:
        """A GPU changed: its node, when its phase, node, annotations or labels changed."""
        old = event.old
        if (
            event.kind is EventKind.MODIFIED
            and old is not None
            and _gpu_facts(old) == _gpu_facts(event.obj)
        ):
            return
        for obj in (event.obj, old):
            node = _gpu_node_name(obj) if obj is not None else ""
            if node:
                self.loop.add(node)

    def on_pool(self, event: InformerEvent) -> None:
        """A GPUPool changed: every node's membership, when its spec or deletion changed."""
        old = event.old
        if (
            event.kind is EventKind.MODIFIED
            and old is not None
            and old.get("spec") == event.obj.get("spec")
            and is_deleting(old) == is_deleting(event.obj)
        ):
            return
        for name in {name_of(n) for n in self._nodes.list()} | {
            name_of(n) for n in self._gpu_nodes.list()
        }:
            self.loop.add(name)

    def on_hypervisor_pod(self, event: InformerEvent) -> None:
        """A hypervisor pod changed: its node's readiness."""
        node = str((event.obj.get("spec") or {}).get("nodeName") or "")
        if event.kind is EventKind.DELETED:
            for keys in self._pods_by_node.values():
                keys.discard(event.key)
        elif node:
            self._pods_by_node.setdefault(node, set()).add(event.key)
        if node:
            self.loop.add(node)

    # ---- loops ------------------------------------------------------------------------------

    async def run(self) -> None:
        """Reconcile, and follow the allocator's node changes, until cancelled."""
        async with asyncio.TaskGroup() as group:
            group.create_task(self.loop.run())
            group.create_task(self._follow_allocator())

    async def _follow_allocator(self) -> None:
        await every(self._change_interval, self.take_changes,
                    "gpunode: reading the allocator's changes", self._sleep)  # fmt: skip

    def take_changes(self) -> set[str]:
        """Queue the nodes the allocator changed since the last call, each no sooner than
        `allocation_interval` after its last reconcile (a burst of binds on a node is one
        status write); returns them."""
        changed, _ = self._changes.take()
        for name in changed:
            self.loop.add(name, min_interval=self._allocation_interval)
        return changed

    # ---- reconcile --------------------------------------------------------------------------

    def _hypervisor_pod(self, node: str) -> Obj | None:
        if self._agent_pods is None:
            return None
        pods = [
            pod
            for key in self._pods_by_node.get(node, ())
            if (pod := self._agent_pods.get(key.name, key.namespace)) is not None
            and (pod.get("spec") or {}).get("nodeName") == node
        ]
        return current_hypervisor_pod(pods)

    async def reconcile(self, name: str) -> float | None:
        """The node's GPUNode (created, moved or deleted), its status and its GPUs' phases."""
        allocator = self._state.allocator
        if allocator is None:
            return NOT_READY_RETRY_S
        node = self._nodes.get(name)
        gpu_node = self._gpu_nodes.get(name)
        match = None
        if node is not None and not is_deleting(node):
            match = pool_for_node(node, self._pools.list(), self._initial)
        if match is None:
            if gpu_node is not None and await self._delete_gpu_node(gpu_node):
                why = "the node is gone" if node is None else "no pool selects the node"
                _log.info("deleted GPUNode %s: %s", name, why)
            return None
        pool = self._pools.get(match.pool)
        if pool is None:
            return NOT_READY_RETRY_S
        if match.others and self._several_pools_reported.get(name) != match.others:
            self._several_pools_reported[name] = match.others
            await self.writer.note(
                involved("Node", node or {}, "v1"), "Warning", NODE_SEVERAL_POOLS,
                f"node {name} matches the node selectors of pools {match.pool}, "
                f"{', '.join(match.others)}; it joins {match.pool} (first by name)",
            )  # fmt: skip
        if gpu_node is None:
            try:
                gpu_node = await self.writer.create(
                    "GPUNode", gpu_node_body(name, pool, match.vendor)
                )
                _log.info("created GPUNode %s in pool %s", name, match.pool)
            except KubeError as error:
                if error.code != 409:
                    raise
                gpu_node = await self.writer.read("GPUNode", name)
                if gpu_node is None:
                    raise
        if gpu_node_metadata_patch(gpu_node, pool, match.vendor) is not None:
            gpu_node = await self.writer.patch_fresh(
                "GPUNode", name,
                lambda current: gpu_node_metadata_patch(current, pool, match.vendor),
                cached=gpu_node,
            )  # fmt: skip
            if gpu_node is None:
                return None
        return await self._sync_status(name, gpu_node, allocator)

    async def _delete_gpu_node(self, gpu_node: Obj) -> bool:
        """Delete a GPUNode the controller manages (not one made by hand, nor twice)."""
        if not is_managed_gpu_node(gpu_node) or is_deleting(gpu_node):
            return False
        return await self.writer.delete("GPUNode", name_of(gpu_node))

    async def _sync_status(self, name: str, gpu_node: Obj, allocator: Allocator) -> float | None:
        pod = self._hypervisor_pod(name)
        before = status_of(gpu_node)
        verdicts: list[AgentReadiness] = []

        def build(current: Obj) -> dict[str, Any] | None:
            # Judged on the object written to: a 409 is mostly a heartbeat that just came in.
            readiness = agent_readiness(self._mode, current, pod, self._clock())
            verdicts[:] = [readiness]
            state = allocator.nodes.get(name)
            capacity = (
                node_capacity(allocator, state, allocated_pods=True) if state is not None else None
            )
            patch = merge_patch(status_of(current), gpu_node_status(current, capacity, readiness))
            return {"status": patch} if patch else None

        written = await self.writer.patch_fresh("GPUNode", name, build, status=True,
                                                cached=gpu_node)  # fmt: skip
        if written is None or not verdicts:
            return None
        readiness = verdicts[0]
        await self._report_node(written, before, readiness)
        state = allocator.nodes.get(name)
        gpu_names = [g.name for g in (*state.gpus, *state.missing_gpus)] if state else []
        # the node's GPUs at once: each write is a round trip to a possibly busy API server
        results = await asyncio.gather(
            *(self._sync_gpu(gpu_name, written, readiness) for gpu_name in gpu_names),
            return_exceptions=True,
        )
        for result in results:
            if isinstance(result, BaseException):
                raise result
        return readiness.recheck_after

    async def _report_node(
        self, written: Obj, before: Mapping[str, Any], readiness: AgentReadiness
    ) -> None:
        status = status_of(written)
        was_stale = (before.get("hypervisorStatus") or {}).get("hypervisorState") == STALE
        if readiness.stale and not was_stale:
            await self.writer.note(involved("GPUNode", written), "Warning", HEARTBEAT_STALE,
                                   readiness.reason or "the node agent's heartbeat is older "
                                   "than 90s")  # fmt: skip
        if before.get("phase") == "Running" and status.get("phase") != "Running":
            await self.writer.note(involved("GPUNode", written), "Warning", NODE_NOT_READY,
                                   f"node agent not ready: {readiness.reason}")  # fmt: skip

    async def _sync_gpu(self, gpu_name: str, gpu_node: Obj, readiness: AgentReadiness) -> None:
        gpu = self._gpus.get(gpu_name)
        if gpu is None:
            return
        since = missing_since(gpu)
        if since and self._missing_reported.get(gpu_name) != since:
            self._missing_reported[gpu_name] = since
            message = (
                f"GPU {gpu_name} on node {name_of(gpu_node)} is missing since {since}: the "
                "node agent no longer finds the device; it leaves the node's totals and "
                "placement, and is deleted once idle"
            )
            await self.writer.note(involved("GPU", gpu), "Warning", GPU_MISSING, message)
            await self.writer.note(involved("GPUNode", gpu_node), "Warning", GPU_MISSING, message)
        elif not since:
            self._missing_reported.pop(gpu_name, None)
        if gpu_phase(gpu, readiness.ready) is None:
            return

        def build(current: Obj) -> dict[str, Any] | None:
            phase = gpu_phase(current, readiness.ready)
            return {"status": {"phase": phase}} if phase else None

        await self.writer.patch_fresh("GPU", gpu_name, build, status=True, cached=gpu)


def _comparable(gpu_node: Obj, *, ignore_beat: bool = True) -> dict[str, Any]:
    """The GPUNode without what changes on every write of ours (version, `last-sync`) and,
    while it is Running and `ignore_beat`, without the time of its agent's last heartbeat."""
    metadata = {k: v for k, v in metadata_of(gpu_node).items() if k not in _IGNORED_METADATA}
    annotations = {k: v for k, v in annotations_of(gpu_node).items() if k != KEYS.last_sync}
    metadata["annotations"] = annotations
    status = dict(status_of(gpu_node))
    agent = status.get("hypervisorStatus")
    if ignore_beat and status.get("phase") == "Running" and isinstance(agent, Mapping):
        status["hypervisorStatus"] = {k: v for k, v in agent.items() if k != "lastHeartbeatTime"}
    return {**gpu_node, "metadata": metadata, "status": status}


def _gpu_facts(gpu: Obj) -> tuple[object, ...]:
    status = status_of(gpu)
    return (
        status.get("phase"),
        status.get("nodeSelector"),
        status.get("capacity"),
        dict(labels_of(gpu)),
        dict(annotations_of(gpu)),
        is_deleting(gpu),
    )


def _gpu_node_name(gpu: Obj) -> str:
    selector = status_of(gpu).get("nodeSelector")
    if isinstance(selector, Mapping) and selector.get(HOSTNAME_KEY):
        return str(selector[HOSTNAME_KEY])
    return ""
