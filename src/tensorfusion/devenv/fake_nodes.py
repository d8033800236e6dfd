"""Fake GPU nodes: `Node` objects with capacity and a Ready condition, and no kubelet; and the
simulated GPU file each node's agent reads (`domain/devices/simulation.py`'s format).

kube-scheduler binds pods to them; the pods never run until something marks them Running (the
dev environment's `workload_pods`). Status is written through the `status` subresource, which
is the only way it is kept.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import yaml
from lightkube import AsyncClient
from lightkube.resources.core_v1 import Node
from lightkube.types import PatchType

from tensorfusion.domain.timestamps import format_rfc3339
from tensorfusion.sim.cluster_file import ClusterFile, HardwareModel, NodeSpec
from tensorfusion.sim.cluster_objects import node_object, numa_of, nvlink_peers

__all__ = [
    "GPU_RESOURCE",
    "FakeNode",
    "WorkerGPUUsage",
    "create_node",
    "fake_nodes",
    "gpu_node_labels",
    "node_status",
    "simulation_document",
    "simulation_text",
]

GPU_RESOURCE = "nvidia.com/gpu"
IDLE_TEMPERATURE_C = 45


def gpu_node_labels(name: str, gpus: int, product: str) -> dict[str, str]:
    """Labels a GPU node carries in a real cluster (kubelet, NVIDIA GPU feature discovery)."""
    return {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.count": str(gpus),
        "nvidia.com/gpu.product": product,
    }


def node_status(
    resources: Mapping[str, str], *, ready: bool = True, hostname: str | None = None
) -> dict[str, object]:
    """A ``NodeStatus`` body: capacity = allocatable = ``resources``, one Ready condition."""
    now = format_rfc3339(time.time())
    status: dict[str, object] = {
        "capacity": dict(resources),
        "allocatable": dict(resources),
        "conditions": [
            {
                "type": "Ready",
                "status": "True" if ready else "False",
                "reason": "KubeletReady" if ready else "KubeletNotReady",
                "message": "fake node of the test control plane",
                "lastHeartbeatTime": now,
                "lastTransitionTime": now,
            }
        ],
    }
    if hostname:
        status["addresses"] = [{"type": "Hostname", "address": hostname}]
    return status


@dataclass(frozen=True, slots=True)
class FakeNode:
    """One node of a cluster file, with its GPUs' hardware."""

    name: str
    spec: NodeSpec
    hardware: HardwareModel

    @property
    def product(self) -> str:
        """The `nvidia.com/gpu.product` label value (GPU feature discovery's form)."""
        return self.hardware.model.replace(" ", "-")

    def gpu_uuid(self, index: int) -> str:
        """The simulated GPU's UUID (stable across agent restarts)."""
        return f"GPU-{self.name}-{index}"


def fake_nodes(cluster: ClusterFile) -> list[FakeNode]:
    """Every node of the cluster file, replicas expanded."""
    hardware = {h.model: h for h in cluster.hardware}
    return [FakeNode(name, spec, hardware[spec.gpus.model])
            for spec in cluster.nodes for name in spec.node_names()]  # fmt: skip


async def create_node(kube: AsyncClient, node: FakeNode) -> None:
    """Create the Node (labels and taints of the cluster file, GPU discovery's labels) and write
    its status: the file's CPU, memory, pods and disk, and one `nvidia.com/gpu` per card."""
    body = node_object(node.name, node.spec)
    metadata = body["metadata"]
    metadata["labels"] = {
        **gpu_node_labels(node.name, node.spec.gpus.count, node.product),
        **metadata["labels"],
    }
    await kube.create(Node.from_dict({**body, "status": {}}))  # type: ignore[no-untyped-call]
    resources = {
        "cpu": node.spec.cpu,
        "memory": node.spec.memory,
        "pods": str(node.spec.pods),
        "ephemeral-storage": node.spec.ephemeral_storage,
        GPU_RESOURCE: str(node.spec.gpus.count),
    }
    await kube.patch(Node.Status, node.name,
                     {"status": node_status(resources, hostname=node.name)},
                     patch_type=PatchType.MERGE)  # fmt: skip


@dataclass(frozen=True, slots=True)
class WorkerGPUUsage:
    """What one worker pod uses of one simulated GPU."""

    pod: str
    gpu_index: int
    compute_percent: float
    memory_bytes: int


def simulation_document(node: FakeNode, workers: Sequence[WorkerGPUUsage] = ()) -> dict[str, Any]:
    """The simulated GPU file of `node`: one entry per card (model, memory, UUID, NUMA node, an
    idle temperature), the workers' usage on their cards, and the NVLink groups of the file."""
    spec = node.spec
    gpus: list[dict[str, Any]] = []
    for index in range(spec.gpus.count):
        entry: dict[str, Any] = {
            "model": node.hardware.model, "vendor": node.hardware.vendor,
            "vram": node.hardware.vram, "uuid": node.gpu_uuid(index),
            "numaNode": numa_of(index, spec), "usage": {"temperature": IDLE_TEMPERATURE_C},
        }  # fmt: skip
        mine = {w.pod: {"compute": round(w.compute_percent, 2), "memoryUsed": w.memory_bytes}
                for w in workers if w.gpu_index == index}  # fmt: skip
        if mine:
            entry["workers"] = mine
        gpus.append(entry)
    groups = sorted({tuple(sorted([i, *nvlink_peers(i, spec)])) for i in range(spec.gpus.count)
                     if nvlink_peers(i, spec)})  # fmt: skip
    document: dict[str, Any] = {
        "node": {"name": node.name, "hostRAM": spec.host_ram or spec.memory,
                 "dataDisk": spec.data_disk},
        "gpus": gpus,
    }  # fmt: skip
    if groups:
        document["nvlink"] = [{"gpus": list(group)} for group in groups]
    return document


def simulation_text(node: FakeNode, workers: Sequence[WorkerGPUUsage] = ()) -> str:
    """`simulation_document` as YAML."""
    return yaml.safe_dump(simulation_document(node, workers), sort_keys=False)
