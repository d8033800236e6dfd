"""The informer caches every controller replica keeps, and their wiring to the allocator state."""

from __future__ import annotations

from dataclasses import dataclass

from tensorfusion.adapters.kube.client import KubeClient
from tensorfusion.controller.allocator_state import AllocatorState, StateCaches
from tensorfusion.controller.native_state import NativeState
from tensorfusion.domain.annotations import KEYS
from tensorfusion.runtime.informer import Informer
from tensorfusion.runtime.informer_lightkube import LightkubeSource, not_equal, resource_named
from tensorfusion.runtime.supervision import Supervisor

__all__ = ["ControllerInformers"]


@dataclass(frozen=True, slots=True)
class ControllerInformers:
    """One informer per resource the controller reads."""

    gpus: Informer
    gpu_nodes: Informer
    nodes: Informer
    pools: Informer
    templates: Informer
    quotas: Informer
    clusters: Informer
    workers: Informer
    bound_pods: Informer
    hypervisor_pods: Informer
    profiles: Informer
    namespaces: Informer
    workloads: Informer

    @classmethod
    def create(cls, client: KubeClient, namespace: str) -> ControllerInformers:
        """Informers over the API server (worker pods by their component label, node-agent
        pods in the controller's namespace)."""

        def custom(kind: str) -> Informer:
            return Informer(LightkubeSource(client, resource_named(kind)), name=kind)

        return cls(
            gpus=custom("GPU"),
            gpu_nodes=custom("GPUNode"),
            nodes=Informer(LightkubeSource(client, resource_named("Node")), name="Node"),
            pools=custom("GPUPool"),
            templates=custom("SchedulingConfigTemplate"),
            quotas=custom("GPUResourceQuota"),
            clusters=custom("TensorFusionCluster"),
            workers=Informer(
                LightkubeSource(client, resource_named("Pod"), labels={KEYS.component: "worker"}),
                name="worker-pods",
            ),
            bound_pods=Informer(
                LightkubeSource(
                    client, resource_named("Pod"), fields={"spec.nodeName": not_equal("")}
                ),
                name="bound-pods",
            ),
            profiles=custom("WorkloadProfile"),
            namespaces=Informer(
                LightkubeSource(client, resource_named("Namespace")), name="Namespace"
            ),
            workloads=custom("TensorFusionWorkload"),
            hypervisor_pods=Informer(
                LightkubeSource(
                    client,
                    resource_named("Pod"),
                    namespace=namespace,
                    labels={KEYS.component: "hypervisor"},
                ),
                name="hypervisor-pods",
            ),
        )

    def all(self) -> tuple[Informer, ...]:
        """Every informer."""
        return (self.gpus, self.gpu_nodes, self.nodes, self.pools, self.templates, self.quotas,
                self.clusters, self.workers, self.bound_pods, self.hypervisor_pods,
                self.profiles, self.namespaces, self.workloads)  # fmt: skip

    def start(self, supervisor: Supervisor) -> None:
        """Run every informer under the supervisor."""
        for informer in self.all():
            supervisor.start(f"informer {informer.name}", informer.run)

    @property
    def synced(self) -> bool:
        """Whether every cache holds its first list."""
        return all(informer.has_synced for informer in self.all())

    async def wait_synced(self) -> None:
        """Until every cache holds its first list."""
        for informer in self.all():
            await informer.wait_synced()

    def caches(self) -> StateCaches:
        """The caches the allocator state reads."""
        return StateCaches(
            gpus=self.gpus, gpu_nodes=self.gpu_nodes, nodes=self.nodes, pools=self.pools,
            templates=self.templates, quotas=self.quotas, pods=self.workers,
        )  # fmt: skip

    def feed_native(self, native: NativeState) -> None:
        """Keep the native view (Nodes and bound pods) current."""
        self.nodes.add_handler(native.on_node)
        self.bound_pods.add_handler(native.on_pod)

    def feed(self, state: AllocatorState) -> None:
        """Send every cache change to the allocator state (ignored until it recovered)."""
        self.gpus.add_handler(state.on_gpu)
        self.pools.add_handler(state.on_pool_or_template)
        self.templates.add_handler(state.on_pool_or_template)
        self.quotas.add_handler(state.on_quota)
        self.nodes.add_handler(state.on_node)
        self.gpu_nodes.add_handler(state.on_node)
        self.workers.add_handler(state.on_pod)
