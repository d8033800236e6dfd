"""Rolling out each pool's component changes in batches (deployment.md §11), on the leader.

Per pool and component (hypervisor, worker, client) the plan comes from
`domain.desired_state.rollout` and what is written from `.rollout_status`; this shell gathers
the instances, replaces the chosen ones (agent pods through the hypervisor-pod reconciler's
`select`, client pods by deletion, owners recreate them), and writes the pool's annotations,
`status.componentStatus`, its conditions and Events.

Instances: a GPUNode's agent (in sync when its pod is the rendered one, ready as §10 step 6
says for `-agent-readiness`); a client pod of the pool with a controller owner (bare pods are
never deleted, so they are not part of a rollout); no worker instances, since remote workers
are denied (the worker hash is recorded all the same).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any, Final

from pydantic import ValidationError

from tensorfusion.adapters.kube.object_client import ObjectClient
from tensorfusion.controller.fenced_writes import EventSink, Fence, FencedWriter, involved
from tensorfusion.controller.hypervisor_pods import HypervisorPodReconciler
from tensorfusion.controller.reconcile_loop import ReconcileLoop
from tensorfusion.domain.admission.hashing import client_config_hash, stable_hash
from tensorfusion.domain.annotations import (
    COMPONENT_CLIENT,
    COMPONENT_HYPERVISOR,
    COMPONENT_WORKER,
    KEYS,
)
from tensorfusion.domain.desired_state.gpu_nodes import AgentReadinessMode, agent_readiness
from tensorfusion.domain.desired_state.hypervisor_pods import hypervisor_pod_name
from tensorfusion.domain.desired_state.pools import replace_conditions
from tensorfusion.domain.desired_state.rollout import (
    NodeRollout,
    RolloutPlan,
    plan_rollout,
    window_condition,
)
from tensorfusion.domain.desired_state.rollout_status import (
    MAINTENANCE_WINDOW,
    RolloutEvent,
    component_status_fields,
    record_annotations,
    rollout_conditions,
    rollout_events,
    rollout_policy,
    rollout_record,
)
from tensorfusion.domain.model import Condition, GPUPool
from tensorfusion.domain.object_views import (
    Obj,
    controller_of,
    is_deleting,
    labels_of,
    metadata_of,
    name_of,
    status_of,
)
from tensorfusion.domain.timestamps import format_rfc3339, parse_rfc3339
from tensorfusion.runtime.informer import ObjectCache
from tensorfusion.runtime.informer_store import EventKind, InformerEvent

__all__ = ["ComponentRollout"]

_log = logging.getLogger(__name__)

_ENDED: Final = ("Succeeded", "Failed")


class ComponentRollout:
    """The rollouts of every pool, keyed by pool name.

    Wire `on_pool`, `on_gpu_node`, `on_hypervisor_pod` and `on_client_pod` (pods labelled
    `component=worker`); the hypervisor-pod reconciler calls `on_sync` when a node's pod
    changes; run `run()` on the leader.
    """

    def __init__(
        self,
        *,
        pools: ObjectCache,
        gpu_nodes: ObjectCache,
        hypervisor_pods: ObjectCache,
        client_pods: ObjectCache,
        agents: HypervisorPodReconciler,
        agent_readiness_mode: AgentReadinessMode,
        client: ObjectClient,
        fence: Fence,
        recorder: EventSink | None,
        clock: Callable[[], float],
        min_interval: float = 1.0,
    ) -> None:
        self._pools = pools
        self._gpu_nodes = gpu_nodes
        self._agent_pods = hypervisor_pods
        self._client_pods = client_pods
        self._agents = agents
        self._mode = agent_readiness_mode
        self._clock = clock
        self.writer = FencedWriter(client, fence, events=recorder)
        self.loop: ReconcileLoop[str] = ReconcileLoop(
            "rollout", self.reconcile, min_interval=min_interval
        )
        agents.sync_listeners.append(self.on_sync)

    # ---- handlers ---------------------------------------------------------------------------

    def on_pool(self, event: InformerEvent) -> None:
        """A GPUPool changed (spec, annotations, or our own status write)."""
        if event.kind is not EventKind.DELETED:
            self.loop.add(event.key.name)

    def on_gpu_node(self, event: InformerEvent) -> None:
        """A GPUNode came, went or changed phase: its pool (heartbeats alone do not count)."""
        if event.changed(lambda o: status_of(o).get("phase")):
            self._add_pool_of(event.obj)

    def on_hypervisor_pod(self, event: InformerEvent) -> None:
        """An agent pod changed: the pool of its labels."""
        self._add_pool_of(event.obj)

    def on_client_pod(self, event: InformerEvent) -> None:
        """A client pod came or went: its pool, when a client rollout runs there."""
        if event.kind is EventKind.MODIFIED:
            return
        pool = labels_of(event.obj).get(KEYS.gpupool)
        if pool:
            self.loop.add(pool)

    def on_sync(self, pool: str) -> None:
        """A node's agent pod was created, replaced or judged against a new rendering."""
        self.loop.add(pool)

    def _add_pool_of(self, obj: Obj) -> None:
        pool = labels_of(obj).get(KEYS.managed_by)
        if pool:
            self.loop.add(pool)

    # ---- reconcile --------------------------------------------------------------------------

    async def run(self) -> None:
        """Reconcile until cancelled."""
        await self.loop.run()

    async def reconcile(self, name: str) -> float | None:
        """One step of each component's rollout in the pool; the next look's delay."""
        pool = self._pools.get(name)
        if pool is None or is_deleting(pool):
            return None
        now_s = self._clock()
        now = datetime.fromtimestamp(now_s, UTC)
        status = status_of(pool).get("componentStatus") or {}
        plans: dict[str, RolloutPlan] = {}
        for component, component_hash, instances in self._components(pool, now_s):
            if component_hash is None:
                continue
            record = rollout_record(pool, component)
            plans[component] = plan_rollout(
                component_hash=component_hash,
                recorded_hash=_recorded(status, component),
                policy=rollout_policy(pool, component),
                nodes=instances, in_progress=record.in_progress,
                last_batch_at=record.last_batch_at, now=now,
            )  # fmt: skip
        for component, plan in plans.items():
            if plan.replace:
                await self._replace(name, component, plan.replace)
        await self._write(pool, plans, now_s, now)
        waits = [plan.recheck_s for plan in plans.values() if plan.recheck_s is not None]
        return min(waits) if waits else None

    def _components(self, pool: Obj, now: float) -> list[tuple[str, str | None, list[NodeRollout]]]:
        name = name_of(pool)
        worker = ((pool.get("spec") or {}).get("componentConfig") or {}).get("worker") or {}
        client = _client_hash(pool)
        return [
            (COMPONENT_HYPERVISOR, self._agents.component_hash(pool), self._agent_nodes(name, now)),
            (COMPONENT_WORKER, stable_hash(worker), []),
            (COMPONENT_CLIENT, client, self._client_instances(name, client)),
        ]

    def _agent_nodes(self, pool: str, now: float) -> list[NodeRollout]:
        nodes = []
        for gpu_node in self._gpu_nodes.list():
            name = name_of(gpu_node)
            sync = self._agents.sync.get(name)
            if labels_of(gpu_node).get(KEYS.managed_by) != pool or is_deleting(gpu_node):
                continue
            if sync is None or not sync.desired_hash:
                continue  # not judged yet, or no Node to render for
            pod = self._agent_pods.get(hypervisor_pod_name(name), self._agents.namespace)
            ready = agent_readiness(self._mode, gpu_node, pod, now).ready
            nodes.append(NodeRollout(name, _created(gpu_node), sync.in_sync, ready))
        return nodes

    def _client_instances(self, pool: str, target: str | None) -> list[NodeRollout]:
        found = []
        for pod in self._client_pods.list():
            labels = labels_of(pod)
            if labels.get(KEYS.gpupool) != pool or controller_of(pod) is None:
                continue
            if is_deleting(pod) or status_of(pod).get("phase") in _ENDED:
                continue
            current = labels.get(KEYS.pod_template_hash)
            key = f"{metadata_of(pod).get('namespace')}/{name_of(pod)}"
            found.append(NodeRollout(key, _created(pod), current == target,
                                     status_of(pod).get("phase") == "Running"))  # fmt: skip
        return found

    async def _replace(self, pool: str, component: str, names: tuple[str, ...]) -> None:
        _log.info("pool %s: %s rollout batch: %s", pool, component, ", ".join(names))
        if component == COMPONENT_HYPERVISOR:
            self._agents.select(names)
        elif component == COMPONENT_CLIENT:
            for key in names:
                namespace, _, pod = key.partition("/")
                await self.writer.delete("Pod", pod, namespace)

    async def _write(
        self, pool: Obj, plans: Mapping[str, RolloutPlan], now_s: float, now: datetime
    ) -> None:
        name = name_of(pool)
        stamp = format_rfc3339(now_s)
        annotations: dict[str, str | None] = {}
        for component, plan in plans.items():
            annotations.update(record_annotations(pool, component, plan, stamp))
        if annotations:
            await self.writer.patch("GPUPool", name, {"metadata": {"annotations": annotations}})
        policy = rollout_policy(pool, COMPONENT_HYPERVISOR)
        window, _, invalid = window_condition(policy, now)
        generation = metadata_of(pool).get("generation")
        maintenance, synced = rollout_conditions(
            window, plans, generation if isinstance(generation, int) else None
        )
        events: list[RolloutEvent] = []
        component_status: dict[str, Any] = {}
        for component, plan in plans.items():
            component_status.update(component_status_fields(component, plan))

        def build(current: Obj) -> dict[str, Any] | None:
            events[:] = rollout_events(current, maintenance, invalid)
            owned = [Condition.model_validate(c) for c in (maintenance, synced) if c is not None]
            conditions = replace_conditions(current, owned, stamp)
            if maintenance is None:
                conditions = [c for c in conditions if c.get("type") != MAINTENANCE_WINDOW]
            before = status_of(current)
            merged = {**(before.get("componentStatus") or {}), **component_status}
            wanted = {"componentStatus": merged, "conditions": conditions}
            if all(before.get(key) == value for key, value in wanted.items()):
                return None
            return {"status": wanted}

        written = await self.writer.patch_fresh("GPUPool", name, build, status=True, cached=pool)
        if written is None:
            return
        for event in events:
            await self.writer.note(involved("GPUPool", written), event.type, event.reason,
                                   event.message)  # fmt: skip


def _recorded(status: Mapping[str, Any], component: str) -> str | None:
    """The hash the status recorded before this look (None: never recorded)."""
    recorded = status.get(component)
    return str(recorded) if recorded else None


def _client_hash(pool: Obj) -> str | None:
    try:
        return client_config_hash(GPUPool.model_validate(pool))
    except ValidationError:
        _log.warning("pool %s: invalid spec; its client hash is not computed", name_of(pool))
        return None


def _created(obj: Obj) -> float:
    return parse_rfc3339(metadata_of(obj).get("creationTimestamp")) or 0.0
