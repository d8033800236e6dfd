"""The virtual cluster: an allocator and native node facts built from a cluster file."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tensorfusion.domain.allocator.allocator import Allocator, PoolSettings
from tensorfusion.domain.allocator.gpu_state import GPUState
from tensorfusion.domain.allocator.oversubscription import Oversubscription
from tensorfusion.domain.allocator.quota import QuotaCaps, QuotaSpec
from tensorfusion.domain.annotations import KEYS
from tensorfusion.domain.quantities import parse_quantity
from tensorfusion.domain.topology import PeerLink
from tensorfusion.domain.vocabulary import GPUPhase, IsolationPolicy, PlacementMode
from tensorfusion.sim.cluster_file import ClusterFile, NodeSpec, PoolSpec, QuotaAmounts, QuotaFile

__all__ = ["PolicyOverrides", "VirtualCluster", "build_cluster"]

NVLINK_BANDWIDTH_MBPS = 600_000


@dataclass(frozen=True, slots=True)
class PolicyOverrides:
    """What-if settings applied to every pool (or to the named pool only)."""

    placement_mode: PlacementMode | None = None
    oversubscription: Oversubscription | None = None
    disable_oversubscription: bool = False
    pool: str | None = None

    def applies_to(self, pool: str) -> bool:
        """Whether the overrides target this pool."""
        return self.pool is None or self.pool == pool


@dataclass(slots=True)
class VirtualCluster:
    """The allocator plus each node's Kubernetes-side description."""

    allocator: Allocator
    nodes: dict[str, NodeSpec] = field(default_factory=dict)
    node_objects: dict[str, dict[str, Any]] = field(default_factory=dict)
    pools: dict[str, PoolSpec] = field(default_factory=dict)
    default_pool: str | None = None


def _pool_settings(pool: PoolSpec, overrides: PolicyOverrides) -> PoolSettings:
    mode = pool.placement_mode
    over = pool.capacity_config.oversubscription
    settings = (
        None
        if over is None
        else Oversubscription(
            over.tflops_oversell_ratio, over.vram_expand_to_host_mem, over.vram_expand_to_host_disk
        )
    )
    if overrides.applies_to(pool.name):
        mode = overrides.placement_mode or mode
        if overrides.disable_oversubscription:
            settings = None
        elif overrides.oversubscription is not None:
            settings = overrides.oversubscription
    return PoolSettings(pool.name, mode, settings)


def quota_spec(quota: QuotaFile) -> QuotaSpec:
    """The allocator's view of a cluster file's GPUResourceQuota."""

    def caps(amounts: QuotaAmounts) -> QuotaCaps:
        return QuotaCaps(
            tflops=parse_quantity(amounts.tflops).milli() if amounts.tflops else 0,
            vram=parse_quantity(amounts.vram).ceil() if amounts.vram else 0,
        )

    total, single = quota.total, quota.single
    return QuotaSpec(
        namespace=quota.namespace,
        name=quota.name,
        total_requests=caps(total.requests),
        total_limits=caps(total.limits),
        max_workers=total.max_workers,
        single_max_requests=caps(single.max_requests),
        single_max_limits=caps(single.max_limits),
        single_max_gpu_count=single.max_gpu_count or 0,
        alert_threshold_percent=total.alert_threshold_percent,
    )


def _numa_of(index: int, spec: NodeSpec) -> int:
    domains = spec.gpus.numa_nodes
    if domains <= 0:
        return -1
    per_domain = max(1, -(-spec.gpus.count // domains))
    return index // per_domain


def _peers(index: int, uuids: list[str], spec: NodeSpec) -> tuple[PeerLink, ...]:
    mode = spec.gpus.nvlink
    if mode == "none":
        return ()
    group: list[int]
    if mode == "all":
        group = list(range(len(uuids)))
    elif mode == "pairs":
        base = index - index % 2
        group = [i for i in (base, base + 1) if i < len(uuids)]
    else:
        numa = _numa_of(index, spec)
        group = [i for i in range(len(uuids)) if _numa_of(i, spec) == numa]
    return tuple(PeerLink(uuids[i], 0, NVLINK_BANDWIDTH_MBPS) for i in group if i != index)


def node_object(name: str, spec: NodeSpec) -> dict[str, Any]:
    """The Kubernetes Node object the native filters read."""
    allocatable = {
        "cpu": spec.cpu,
        "memory": spec.memory,
        "pods": str(spec.pods),
        "ephemeral-storage": spec.ephemeral_storage,
        KEYS.index_resource_names[0]: "36" if spec.agent_ready else "0",
    }
    labels = {"kubernetes.io/hostname": name, "nvidia.com/gpu.present": "true", **spec.labels}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "unschedulable": spec.unschedulable,
            "taints": [t.model_dump(exclude_defaults=False) for t in spec.taints],
        },
        "status": {"allocatable": allocatable, "capacity": dict(allocatable)},
    }


def build_cluster(cluster: ClusterFile, overrides: PolicyOverrides | None = None) -> VirtualCluster:
    """Create the allocator state and node objects of a cluster file."""
    overrides = overrides or PolicyOverrides()
    allocator = Allocator(isolation_policy=IsolationPolicy(cluster.isolation_policy))
    hardware = {h.model: h for h in cluster.hardware}
    virtual = VirtualCluster(allocator)
    for pool in cluster.pools:
        virtual.pools[pool.name] = pool
        allocator.set_pool(_pool_settings(pool, overrides))
    defaults = sorted(p.name for p in cluster.pools if p.is_default)
    virtual.default_pool = defaults[0] if defaults else None
    for quota in cluster.quotas:
        allocator.set_quota(quota_spec(quota))
    for spec in cluster.nodes:
        model = hardware[spec.gpus.model]
        tflops = parse_quantity(model.fp16_tflops).milli()
        vram = parse_quantity(model.vram).ceil()
        overrides_by_index = {o.index: o for o in spec.gpus.overrides}
        isolation = virtual.pools[spec.pool].default_isolation_mode
        for name in spec.node_names():
            virtual.nodes[name] = spec
            virtual.node_objects[name] = node_object(name, spec)
            uuids = [f"gpu-{name}-{i}" for i in range(spec.gpus.count)]
            for i, uuid in enumerate(uuids):
                override = overrides_by_index.get(i)
                numa = _numa_of(i, spec)
                if override is not None and override.numa_node is not None:
                    numa = override.numa_node
                allocator.upsert_gpu(
                    GPUState(
                        name=uuid,
                        node=name,
                        pool=spec.pool,
                        capacity_tflops=tflops,
                        capacity_vram=vram,
                        phase=(override.phase if override and override.phase else GPUPhase.RUNNING),
                        used_by=(override.used_by if override and override.used_by is not None
                                 else "tensor-fusion"),
                        vendor=model.vendor,
                        model=model.model,
                        uuid=uuid,
                        index=i,
                        numa_node=numa,
                        isolation_mode=isolation,
                        peers=_peers(i, uuids, spec),
                    )
                )  # fmt: skip
            ram = parse_quantity(spec.host_ram or spec.memory).ceil()
            allocator.set_node_facts(
                name,
                ram_bytes=ram,
                disk_bytes=parse_quantity(spec.data_disk).ceil(),
                hypervisor_index0=36 if spec.agent_ready else 0,
            )
    return virtual
