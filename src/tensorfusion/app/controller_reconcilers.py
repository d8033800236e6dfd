"""The controller's leader-only reconcilers, wired to the informers of every replica.

Each reconciler is built in `ControllerReconcilers.create` and registered there by one
`Registration` (its name, the informer events it handles, its queues and writer); the list
order is the order of handlers on each informer, of the leader tasks and of `/metrics`.
Handlers are registered on every replica (the queues only collect keys); the reconcilers run
while the replica leads. The pod releaser's handler comes before the allocator state's, so the
release Event still finds the pod's record.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from tensorfusion import __version__
from tensorfusion.adapters.kube.client import KubeClient
from tensorfusion.adapters.kube.custom_resources import resource_of
from tensorfusion.adapters.kube.events import EventRecorder
from tensorfusion.adapters.kube.object_client import LightkubeObjects
from tensorfusion.app.controller_informers import ControllerInformers
from tensorfusion.controller.allocator_state import AllocatorState
from tensorfusion.controller.cluster_reconciler import ClusterReconciler
from tensorfusion.controller.component_rollout import ComponentRollout
from tensorfusion.controller.fenced_writes import FencedWriter
from tensorfusion.controller.gpu_node_reconciler import GPUNodeReconciler
from tensorfusion.controller.hypervisor_pods import HypervisorPodReconciler
from tensorfusion.controller.node_taint import ProgressiveTaintReconciler
from tensorfusion.controller.pod_release import PodReleaser
from tensorfusion.controller.pool_reconciler import PoolStatusReconciler
from tensorfusion.controller.problem_reports import ProblemReporter
from tensorfusion.controller.reconcile_loop import ReconcileLoop
from tensorfusion.controller.reconciler import Registration, register_handlers
from tensorfusion.controller.replica_recount import ReplicaRecount
from tensorfusion.controller.status_writeback import GPUStatusWriter, QuotaStatusWriter
from tensorfusion.controller.workload_lifecycle import WorkloadLifecycle
from tensorfusion.domain.alerting.dynamic_config import DynamicConfig
from tensorfusion.domain.desired_state.hypervisor_pods import (
    HypervisorPodSettings,
    metrics_write_target,
)
from tensorfusion.domain.settings.controller_settings import ControllerSettings
from tensorfusion.runtime.informer import Informer
from tensorfusion.runtime.informer_lightkube import LightkubeSource

__all__ = ["ControllerReconcilers"]

Fence = Callable[[], float]
HYPERVISOR_IMAGE = f"tensorfusion/tensor-fusion-hypervisor:{__version__}"
"""The agent image of a pool that names none (the controller's own version, deployment.md §4)."""


@dataclass(frozen=True, slots=True)
class ControllerReconcilers:
    """Every leader-only reconciler of the controller, in registration order."""

    registrations: Sequence[Registration]

    @classmethod
    def create(
        cls,
        *,
        client: KubeClient,
        fence: Fence,
        state: AllocatorState,
        settings: ControllerSettings,
        caches: ControllerInformers,
        dynamic_config: Callable[[], DynamicConfig] = DynamicConfig,
    ) -> ControllerReconcilers:
        """The reconcilers over the replica's caches, writing through `client` once fenced;
        `dynamic_config` is the hot-reloaded `config.yaml` (crash guard, extra metric labels)."""
        flags, env = settings.flags, settings.env
        objects = LightkubeObjects(client)
        writes: dict[str, Any] = {
            "client": objects,
            "fence": fence,
            "recorder": EventRecorder(client, "tensor-fusion-controller"),
        }
        timed: dict[str, Any] = {**writes, "clock": time.time}
        providers = Informer(LightkubeSource(client, resource_of("ProviderConfig")),
                             name="ProviderConfig")  # fmt: skip
        agent_pods = HypervisorPodReconciler(
            gpu_nodes=caches.gpu_nodes, nodes=caches.nodes, pools=caches.pools,
            hypervisor_pods=caches.hypervisor_pods, templates=caches.templates,
            provider_configs=providers, wait_synced=providers.wait_synced,
            settings=HypervisorPodSettings(
                namespace=env.namespace, default_image=HYPERVISOR_IMAGE,
                service_account=env.hypervisor_service_account,
                isolation_policy=env.isolation_policy.value,
                detect_in_used_gpus=env.progressive_migration,
                metrics=metrics_write_target(env),
            ),
            max_crash_count=lambda: dynamic_config().hypervisor_max_crash_count,
            metrics_extra_labels=lambda: dynamic_config().metrics_extra_pod_labels,
            **writes,
        )  # fmt: skip
        recount = ReplicaRecount(pods=caches.workers, **timed)
        clusters = ClusterReconciler(clusters=caches.clusters, pools=caches.pools, **timed)
        gpu_nodes = GPUNodeReconciler(
            nodes=caches.nodes,
            gpu_nodes=caches.gpu_nodes,
            gpus=caches.gpus,
            pools=caches.pools,
            hypervisor_pods=caches.hypervisor_pods,
            state=state,
            initial_selector=env.gpu_node_selector,
            agent_readiness=flags.agent_readiness,
            **timed,
        )
        pools = PoolStatusReconciler(
            pools=caches.pools, gpu_nodes=caches.gpu_nodes, state=state, **timed
        )
        pods = PodReleaser(
            pods=caches.workers, state=state, recount=recount.after_decrement, **timed
        )
        gpu_status = GPUStatusWriter(
            gpus=caches.gpus, state=state, client=objects, fence=fence, clock=time.time
        )
        quota_status = QuotaStatusWriter(quotas=caches.quotas, state=state, **timed)
        taint = ProgressiveTaintReconciler(
            nodes=caches.nodes,
            state=state,
            client=objects,
            fence=fence,
            enabled=env.progressive_migration,
        )
        workloads = WorkloadLifecycle(pods=caches.workers, workloads=caches.workloads, **timed)
        rollout = ComponentRollout(
            pools=caches.pools,
            gpu_nodes=caches.gpu_nodes,
            hypervisor_pods=caches.hypervisor_pods,
            client_pods=caches.workers,
            agents=agent_pods,
            agent_readiness_mode=flags.agent_readiness,
            **timed,
        )
        problems = ProblemReporter(
            state=state,
            client=objects,
            fence=fence,
            recorder=writes["recorder"],
            caches={
                "GPU": caches.gpus,
                "GPUNode": caches.gpu_nodes,
                "GPUPool": caches.pools,
                "GPUResourceQuota": caches.quotas,
                "Pod": caches.workers,
                "SchedulingConfigTemplate": caches.templates,
            },
        )
        return cls((
            Registration("clusters", clusters, (
                (caches.pools, clusters.on_pool), (caches.clusters, clusters.on_cluster),
            ), (clusters.loop,), clusters.writer),
            Registration("gpu-nodes", gpu_nodes, (
                (caches.gpus, gpu_nodes.on_gpu), (caches.gpu_nodes, gpu_nodes.on_gpu_node),
                (caches.pools, gpu_nodes.on_pool), (caches.nodes, gpu_nodes.on_node),
                (caches.hypervisor_pods, gpu_nodes.on_hypervisor_pod),
            ), (gpu_nodes.loop,), gpu_nodes.writer),
            Registration("pools", pools, (
                (caches.gpu_nodes, pools.on_gpu_node), (caches.pools, pools.on_pool),
            ), (pools.loop,), pools.writer),
            Registration("pods", pods, ((caches.workers, pods.on_pod),), (pods.loop,),
                         pods.writer),
            Registration("gpu-status", gpu_status, ((caches.gpus, gpu_status.on_gpu),),
                         writer=gpu_status.writer),
            Registration("quota-status", quota_status, writer=quota_status.writer),
            Registration("taint", taint, ((caches.nodes, taint.on_node),), (taint.loop,),
                         taint.writer),
            Registration("replica-recount", recount, ((caches.workers, recount.on_pod),),
                         (recount.loop,), recount.writer),
            Registration("workloads", workloads, (
                (caches.workers, workloads.on_pod), (caches.workloads, workloads.on_workload),
            ), (workloads.owners, workloads.collection), workloads.writer),
            # ProviderConfigs (their hardware metadata goes into agent pods), listed by the leader.
            Registration("provider-configs", providers),
            Registration("hypervisor-pods", agent_pods, (
                (caches.gpu_nodes, agent_pods.on_gpu_node), (caches.nodes, agent_pods.on_node),
                (caches.hypervisor_pods, agent_pods.on_pod), (caches.pools, agent_pods.on_pool),
                (caches.templates, agent_pods.on_template),
                (providers, agent_pods.on_provider_config),
            ), (agent_pods.loop,), agent_pods.writer),
            Registration("rollout", rollout, (
                (caches.pools, rollout.on_pool), (caches.gpu_nodes, rollout.on_gpu_node),
                (caches.hypervisor_pods, rollout.on_hypervisor_pod),
                (caches.workers, rollout.on_client_pod),
            ), (rollout.loop,), rollout.writer),
            Registration("problems", problems, writer=problems.writer),
        ))  # fmt: skip

    def register(self) -> None:
        """Send cache changes to the reconcilers' queues (before the allocator state's)."""
        register_handlers(self.registrations)

    def loops(self) -> list[ReconcileLoop[Any]]:
        """The reconcilers' work queues (the status writers work on timers)."""
        return [loop for registration in self.registrations for loop in registration.loops]

    def writers(self) -> list[tuple[str, FencedWriter]]:
        """Each reconciler's API writer, by loop name."""
        return [(r.name, r.writer) for r in self.registrations if r.writer is not None]

    def work(self) -> list[tuple[str, Callable[[], Awaitable[None]]]]:
        """The leader-only loops, by name."""
        return [(r.name, r.reconciler.run) for r in self.registrations]
