"""The cluster file as the API objects a real cluster would hold.

Pools, their SchedulingConfigTemplates, quotas, one GPU object per card, one GPUNode and one
Node per node: the shapes the controller reads from its informer cache. The simulator then
fills its allocator and admission facts through the same domain code as the controller
(`domain.allocator.mapping`, `domain.admission`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

from tensorfusion.domain.allocator.mapping import HOSTNAME_KEY
from tensorfusion.domain.annotations import KEYS
from tensorfusion.domain.model import (
    API_VERSION,
    GPU,
    GPUNode,
    GPUPool,
    GPUResourceQuota,
    SchedulingConfigTemplate,
    load_as,
    to_wire,
)
from tensorfusion.domain.vocabulary import GPUPhase
from tensorfusion.sim.cluster_file import ClusterFile, HardwareModel, NodeSpec, PoolSpec
from tensorfusion.sim.native_pods import GPU_RESOURCE

__all__ = [
    "AGENT_INDEX_CAPACITY",
    "NVLINK_BANDWIDTH_MBPS",
    "VirtualClusterObjects",
    "cluster_objects",
    "node_object",
    "numa_of",
    "nvlink_peers",
]

NVLINK_BANDWIDTH_MBPS: Final = 600_000
AGENT_INDEX_CAPACITY: Final = 36
"""`tensorfusion.ai/index_0` allocatable of a node whose agent is up (api.md §6)."""


@dataclass(slots=True)
class VirtualClusterObjects:
    """Every object of the virtual cluster, by name (quotas by namespace)."""

    pools: dict[str, GPUPool] = field(default_factory=dict)
    templates: dict[str, SchedulingConfigTemplate] = field(default_factory=dict)
    quotas: dict[str, GPUResourceQuota] = field(default_factory=dict)
    gpus: list[GPU] = field(default_factory=list)
    gpu_nodes: dict[str, GPUNode] = field(default_factory=dict)
    nodes: dict[str, dict[str, Any]] = field(default_factory=dict)
    node_specs: dict[str, NodeSpec] = field(default_factory=dict)


def _template_name(pool: str) -> str:
    return f"{pool}-placement"


def _pool(pool: PoolSpec) -> tuple[GPUPool, SchedulingConfigTemplate]:
    spec: dict[str, Any] = {
        "schedulingConfigTemplate": _template_name(pool.name),
        "nodeManagerConfig": {"defaultIsolationMode": pool.default_isolation_mode},
    }
    over = pool.capacity_config.oversubscription
    if over is not None:
        spec["capacityConfig"] = {"oversubscription": to_wire(over)}
    if pool.default_qos is not None:
        spec["qosConfig"] = {"defaultQoS": pool.default_qos}
    annotations = {KEYS.is_default_pool: "true" if pool.is_default else "false"}
    gpu_pool = load_as(
        GPUPool,
        {"apiVersion": API_VERSION, "kind": "GPUPool",
         "metadata": {"name": pool.name, "annotations": annotations}, "spec": spec},
    )  # fmt: skip
    template = load_as(
        SchedulingConfigTemplate,
        {"apiVersion": API_VERSION, "kind": "SchedulingConfigTemplate",
         "metadata": {"name": _template_name(pool.name)},
         "spec": {"placement": {"mode": pool.placement_mode.value},
                  "verticalScalingRules": [to_wire(r) for r in pool.vertical_scaling_rules]}},
    )  # fmt: skip
    return gpu_pool, template


def numa_of(index: int, spec: NodeSpec) -> int:
    """The NUMA node of GPU `index` (the GPUs split evenly over `numaNodes`), -1 if unknown."""
    domains = spec.gpus.numa_nodes
    if domains <= 0:
        return -1
    per_domain = max(1, -(-spec.gpus.count // domains))
    return index // per_domain


def nvlink_peers(index: int, spec: NodeSpec) -> list[int]:
    """The GPUs GPU `index` has NVLink to, per the node's `nvlink` mode."""
    mode, count = spec.gpus.nvlink, spec.gpus.count
    if mode == "none":
        return []
    if mode == "all":
        group = list(range(count))
    elif mode == "pairs":
        base = index - index % 2
        group = [i for i in (base, base + 1) if i < count]
    else:
        numa = numa_of(index, spec)
        group = [i for i in range(count) if numa_of(i, spec) == numa]
    return [i for i in group if i != index]


def _gpu(name: str, index: int, spec: NodeSpec, hardware: HardwareModel, isolation: str) -> GPU:
    uuids = [f"gpu-{name}-{i}" for i in range(spec.gpus.count)]
    override = next((o for o in spec.gpus.overrides if o.index == index), None)
    numa = numa_of(index, spec)
    if override is not None and override.numa_node is not None:
        numa = override.numa_node
    status: dict[str, Any] = {
        "phase": (override.phase if override and override.phase else GPUPhase.RUNNING).value,
        "usedBy": override.used_by if override and override.used_by is not None
        else "tensor-fusion",
        "vendor": hardware.vendor,
        "model": hardware.model,
        "gpuModel": hardware.model,
        "capacity": {"tflops": hardware.fp16_tflops, "vram": hardware.vram},
        "uuid": uuids[index],
        "index": index,
        "numaNode": numa,
        "nodeSelector": {HOSTNAME_KEY: name},
        "isolationMode": isolation,
        "topology": {"peers": [
            {"peerGPUUUID": uuids[i], "tier": 0, "linkType": "NVLink",
             "bandwidth": NVLINK_BANDWIDTH_MBPS}
            for i in nvlink_peers(index, spec)
        ]},
    }  # fmt: skip
    labels = {KEYS.gpupool: spec.pool, KEYS.managed_by: name}
    return load_as(
        GPU,
        {"apiVersion": API_VERSION, "kind": "GPU",
         "metadata": {"name": uuids[index], "labels": labels}, "status": status},
    )  # fmt: skip


def _gpu_node(name: str, spec: NodeSpec) -> GPUNode:
    info = {"ramSize": spec.host_ram or spec.memory, "dataDiskSize": spec.data_disk}
    return load_as(
        GPUNode,
        {"apiVersion": API_VERSION, "kind": "GPUNode", "metadata": {"name": name},
         "status": {"totalGPUs": spec.gpus.count, "nodeInfo": info}},
    )  # fmt: skip


def node_object(name: str, spec: NodeSpec) -> dict[str, Any]:
    """The Kubernetes Node object the native filters read."""
    allocatable = {
        "cpu": spec.cpu,
        "memory": spec.memory,
        "pods": str(spec.pods),
        "ephemeral-storage": spec.ephemeral_storage,
        KEYS.index_resource_names[0]: str(AGENT_INDEX_CAPACITY) if spec.agent_ready else "0",
        # The device plugin's whole cards, for native pods (sim/native_pods.py).
        GPU_RESOURCE: str(spec.gpus.count),
    }
    labels = {HOSTNAME_KEY: name, "nvidia.com/gpu.present": "true", **spec.labels}
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


def cluster_objects(cluster: ClusterFile) -> VirtualClusterObjects:
    """Build every object of the cluster file (validated by the models as they are built)."""
    objects = VirtualClusterObjects()
    for pool in cluster.pools:
        gpu_pool, template = _pool(pool)
        objects.pools[pool.name] = gpu_pool
        objects.templates[template.metadata.name or ""] = template
    for quota in cluster.quotas:
        objects.quotas[quota.namespace] = load_as(
            GPUResourceQuota,
            {"apiVersion": API_VERSION, "kind": "GPUResourceQuota",
             "metadata": {"name": quota.name, "namespace": quota.namespace},
             "spec": to_wire(quota.spec())},
        )  # fmt: skip
    hardware = {h.model: h for h in cluster.hardware}
    isolation = {p.name: p.default_isolation_mode for p in cluster.pools}
    for spec in cluster.nodes:
        model = hardware[spec.gpus.model]
        for name in spec.node_names():
            objects.node_specs[name] = spec
            objects.nodes[name] = node_object(name, spec)
            objects.gpu_nodes[name] = _gpu_node(name, spec)
            objects.gpus.extend(
                _gpu(name, i, spec, model, isolation[spec.pool]) for i in range(spec.gpus.count)
            )
    return objects
