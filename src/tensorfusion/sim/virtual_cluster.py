"""The virtual cluster: the cluster file's objects loaded into an allocator by the controller's
own mapping code (`domain.allocator.mapping`), plus the what-if policy overrides."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from tensorfusion.domain.allocator.allocator import Allocator, PoolSettings
from tensorfusion.domain.allocator.mapping import (
    gpu_state,
    host_facts,
    hypervisor_index0,
    pool_settings,
    quota_spec,
)
from tensorfusion.domain.allocator.oversubscription import OversubscriptionSettings
from tensorfusion.domain.vocabulary import IsolationPolicy, PlacementMode
from tensorfusion.sim.cluster_file import ClusterFile, NodeSpec, PoolSpec
from tensorfusion.sim.cluster_objects import VirtualClusterObjects, cluster_objects

__all__ = ["PolicyOverrides", "VirtualCluster", "build_cluster"]


@dataclass(frozen=True, slots=True)
class PolicyOverrides:
    """What-if settings applied to every pool (or to the named pool only)."""

    placement_mode: PlacementMode | None = None
    oversubscription: OversubscriptionSettings | None = None
    disable_oversubscription: bool = False
    pool: str | None = None

    def applies_to(self, pool: str) -> bool:
        """Whether the overrides target this pool."""
        return self.pool is None or self.pool == pool

    def apply(self, settings: PoolSettings) -> PoolSettings:
        """The pool's settings with the overrides that target it."""
        if not self.applies_to(settings.name):
            return settings
        over = settings.oversubscription
        if self.disable_oversubscription:
            over = None
        elif self.oversubscription is not None:
            over = self.oversubscription
        return dataclasses.replace(
            settings,
            placement_mode=self.placement_mode or settings.placement_mode,
            oversubscription=over,
        )


@dataclass(slots=True)
class VirtualCluster:
    """The allocator, the API objects it was built from, and each node's file entry."""

    allocator: Allocator
    objects: VirtualClusterObjects
    pools: dict[str, PoolSpec]

    @property
    def nodes(self) -> dict[str, NodeSpec]:
        """Each node's entry of the cluster file."""
        return self.objects.node_specs

    @property
    def node_objects(self) -> dict[str, dict[str, Any]]:
        """The Kubernetes Node objects."""
        return self.objects.nodes


def build_cluster(cluster: ClusterFile, overrides: PolicyOverrides | None = None) -> VirtualCluster:
    """Create the allocator state and API objects of a cluster file."""
    overrides = overrides or PolicyOverrides()
    objects = cluster_objects(cluster)
    allocator = Allocator(isolation_policy=IsolationPolicy(cluster.isolation_policy))
    for pool in objects.pools.values():
        allocator.set_pool(overrides.apply(pool_settings(pool, objects.templates)))
    for quota in objects.quotas.values():
        allocator.set_quota(quota_spec(quota))
    for gpu in objects.gpus:
        allocator.upsert_gpu(gpu_state(gpu).state)
    for name, gpu_node in objects.gpu_nodes.items():
        ram, disk = host_facts(gpu_node)
        allocator.set_node_facts(
            name,
            ram_bytes=ram,
            disk_bytes=disk,
            hypervisor_index0=hypervisor_index0(objects.nodes[name]),
        )
    return VirtualCluster(allocator, objects, {p.name: p for p in cluster.pools})
