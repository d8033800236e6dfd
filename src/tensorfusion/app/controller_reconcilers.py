"""The controller's leader-only reconcilers, wired to the informers of every replica.

Handlers are registered on every replica (the queues only collect keys); the reconcilers run
while the replica leads. The pod releaser's handler comes before the allocator state's, so the
release Event still finds the pod's record.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from lightkube import AsyncClient

from tensorfusion import __version__
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
from tensorfusion.controller.replica_recount import ReplicaRecount
from tensorfusion.controller.status_writeback import GPUStatusWriter, QuotaStatusWriter
from tensorfusion.controller.workload_lifecycle import WorkloadLifecycle
from tensorfusion.domain.alerting.dynamic_config import DynamicConfig
from tensorfusion.domain.desired_state.hypervisor_pods import (
    HypervisorPodSettings,
    metrics_write_target,
)
from tensorfusion.domain.settings.controller_environment import ControllerEnvironment
from tensorfusion.domain.settings.controller_flags import ControllerFlags
from tensorfusion.runtime.informer import Informer
from tensorfusion.runtime.informer_lightkube import LightkubeSource

__all__ = ["ControllerReconcilers"]

Fence = Callable[[], float]
HYPERVISOR_IMAGE = f"tensorfusion/tensor-fusion-hypervisor:{__version__}"
"""The agent image of a pool that names none (the controller's own version, deployment.md §4)."""


@dataclass(frozen=True, slots=True)
class ControllerReconcilers:
    """Every leader-only reconciler of the controller."""

    clusters: ClusterReconciler
    gpu_nodes: GPUNodeReconciler
    pools: PoolStatusReconciler
    pods: PodReleaser
    gpu_status: GPUStatusWriter
    quota_status: QuotaStatusWriter
    taint: ProgressiveTaintReconciler
    recount: ReplicaRecount
    workloads: WorkloadLifecycle
    hypervisor_pods: HypervisorPodReconciler
    rollout: ComponentRollout
    provider_configs: Informer
    """ProviderConfigs (their hardware metadata goes into agent pods), listed by the leader."""
    problems: ProblemReporter

    @classmethod
    def create(
        cls,
        *,
        client: AsyncClient,
        fence: Fence,
        state: AllocatorState,
        flags: ControllerFlags,
        env: ControllerEnvironment,
        caches: ControllerInformers,
        dynamic_config: Callable[[], DynamicConfig] = DynamicConfig,
    ) -> ControllerReconcilers:
        """The reconcilers over the replica's caches, writing through `client` once fenced;
        `dynamic_config` is the hot-reloaded `config.yaml` (crash guard, extra metric labels)."""
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
        return cls(
            clusters=ClusterReconciler(clusters=caches.clusters, pools=caches.pools, **timed),
            gpu_nodes=GPUNodeReconciler(
                nodes=caches.nodes, gpu_nodes=caches.gpu_nodes, gpus=caches.gpus,
                pools=caches.pools, hypervisor_pods=caches.hypervisor_pods, state=state,
                initial_selector=env.gpu_node_selector, agent_readiness=flags.agent_readiness,
                **timed,
            ),
            pools=PoolStatusReconciler(pools=caches.pools, gpu_nodes=caches.gpu_nodes,
                                       state=state, **timed),
            pods=PodReleaser(pods=caches.workers, state=state, recount=recount.after_decrement,
                             **timed),
            gpu_status=GPUStatusWriter(gpus=caches.gpus, state=state, client=objects,
                                       fence=fence, clock=time.time),
            quota_status=QuotaStatusWriter(quotas=caches.quotas, state=state, **timed),
            taint=ProgressiveTaintReconciler(nodes=caches.nodes, state=state, client=objects,
                                             fence=fence, enabled=env.progressive_migration),
            recount=recount,
            workloads=WorkloadLifecycle(pods=caches.workers, workloads=caches.workloads, **timed),
            hypervisor_pods=agent_pods,
            rollout=ComponentRollout(
                pools=caches.pools, gpu_nodes=caches.gpu_nodes,
                hypervisor_pods=caches.hypervisor_pods, client_pods=caches.workers,
                agents=agent_pods, agent_readiness_mode=flags.agent_readiness, **timed,
            ),
            provider_configs=providers,
            problems=ProblemReporter(
                state=state, client=objects, fence=fence, recorder=writes["recorder"],
                caches={"GPU": caches.gpus, "GPUNode": caches.gpu_nodes, "GPUPool": caches.pools,
                        "GPUResourceQuota": caches.quotas, "Pod": caches.workers,
                        "SchedulingConfigTemplate": caches.templates},
            ),
        )  # fmt: skip

    def register(self, caches: ControllerInformers) -> None:
        """Send cache changes to the reconcilers' queues (before the allocator state's)."""
        caches.workers.add_handler(self.pods.on_pod)
        caches.workers.add_handler(self.recount.on_pod)
        caches.workers.add_handler(self.workloads.on_pod)
        caches.workloads.add_handler(self.workloads.on_workload)
        caches.gpus.add_handler(self.gpu_nodes.on_gpu)
        caches.gpus.add_handler(self.gpu_status.on_gpu)
        caches.gpu_nodes.add_handler(self.gpu_nodes.on_gpu_node)
        caches.gpu_nodes.add_handler(self.pools.on_gpu_node)
        caches.pools.add_handler(self.clusters.on_pool)
        caches.pools.add_handler(self.gpu_nodes.on_pool)
        caches.pools.add_handler(self.pools.on_pool)
        caches.clusters.add_handler(self.clusters.on_cluster)
        caches.nodes.add_handler(self.gpu_nodes.on_node)
        caches.nodes.add_handler(self.taint.on_node)
        caches.hypervisor_pods.add_handler(self.gpu_nodes.on_hypervisor_pod)
        caches.gpu_nodes.add_handler(self.hypervisor_pods.on_gpu_node)
        caches.nodes.add_handler(self.hypervisor_pods.on_node)
        caches.hypervisor_pods.add_handler(self.hypervisor_pods.on_pod)
        caches.pools.add_handler(self.hypervisor_pods.on_pool)
        caches.templates.add_handler(self.hypervisor_pods.on_template)
        self.provider_configs.add_handler(self.hypervisor_pods.on_provider_config)
        caches.pools.add_handler(self.rollout.on_pool)
        caches.gpu_nodes.add_handler(self.rollout.on_gpu_node)
        caches.hypervisor_pods.add_handler(self.rollout.on_hypervisor_pod)
        caches.workers.add_handler(self.rollout.on_client_pod)

    def loops(self) -> list[ReconcileLoop[Any]]:
        """The reconcilers' work queues (the status writers work on timers)."""
        return [self.clusters.loop, self.gpu_nodes.loop, self.pools.loop, self.pods.loop,
                self.taint.loop, self.recount.loop, self.workloads.owners,
                self.workloads.collection, self.hypervisor_pods.loop,
                self.rollout.loop]  # fmt: skip

    def writers(self) -> list[tuple[str, FencedWriter]]:
        """Each reconciler's API writer, by loop name."""
        return [("clusters", self.clusters.writer), ("gpu-nodes", self.gpu_nodes.writer),
                ("pools", self.pools.writer), ("pods", self.pods.writer),
                ("gpu-status", self.gpu_status.writer), ("quota-status", self.quota_status.writer),
                ("taint", self.taint.writer), ("replica-recount", self.recount.writer),
                ("workloads", self.workloads.writer),
                ("hypervisor-pods", self.hypervisor_pods.writer),
                ("rollout", self.rollout.writer), ("problems", self.problems.writer)]  # fmt: skip

    def work(self) -> list[tuple[str, Callable[[], Awaitable[None]]]]:
        """The leader-only loops, by name."""
        return [
            ("clusters", self.clusters.run),
            ("gpu-nodes", self.gpu_nodes.run),
            ("pools", self.pools.run),
            ("pods", self.pods.run),
            ("gpu-status", self.gpu_status.run),
            ("quota-status", self.quota_status.run),
            ("taint", self.taint.run),
            ("replica-recount", self.recount.run),
            ("workloads", self.workloads.run),
            ("provider-configs", self.provider_configs.run),
            ("hypervisor-pods", self.hypervisor_pods.run),
            ("rollout", self.rollout.run),
            ("problems", self.problems.run),
        ]
