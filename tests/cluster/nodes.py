"""Fake GPU nodes: ``Node`` objects with capacity and a Ready condition, and no kubelet.

kube-scheduler binds pods to them; the pods never run (patch ``pods/status`` in a test that
needs a Running pod). Status is written through the ``status`` subresource, which is the only
way it is kept.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from lightkube import AsyncClient
from lightkube.models.core_v1 import Node as NodeModel
from lightkube.models.core_v1 import NodeSpec, Taint
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Node
from lightkube.types import PatchType

from tensorfusion.devenv.fake_nodes import gpu_node_labels, node_status

__all__ = ["DEFAULT_GPU_PRODUCT", "GPU_RESOURCE", "FakeGpuNodes", "create_fake_gpu_node",
           "gpu_node_labels", "node_status"]  # fmt: skip

GPU_RESOURCE = "nvidia.com/gpu"
DEFAULT_GPU_PRODUCT = "NVIDIA-H100-80GB-HBM3"


async def create_fake_gpu_node(
    client: AsyncClient,
    name: str,
    *,
    gpus: int = 4,
    gpu_product: str = DEFAULT_GPU_PRODUCT,
    cpu: str = "64",
    memory: str = "512Gi",
    pods: int = 110,
    ephemeral_storage: str = "1Ti",
    extra_resources: Mapping[str, str] | None = None,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    taints: Sequence[Taint] = (),
    ready: bool = True,
) -> NodeModel:
    """Creates a Ready node with ``gpus`` × ``nvidia.com/gpu`` and the usual GPU labels.

    ``pods`` must be in allocatable or every pod fails to fit with "Too many pods".
    """
    all_labels = gpu_node_labels(name, gpus, gpu_product)
    all_labels.update(labels or {})
    await client.create(
        Node(
            metadata=ObjectMeta(name=name, labels=all_labels, annotations=dict(annotations or {})),
            spec=NodeSpec(taints=list(taints) or None),
        )
    )
    resources = {
        "cpu": cpu,
        "memory": memory,
        "pods": str(pods),
        "ephemeral-storage": ephemeral_storage,
        GPU_RESOURCE: str(gpus),
    }
    resources.update(extra_resources or {})
    node: NodeModel = await client.patch(
        Node.Status,
        name,
        {"status": node_status(resources, ready=ready, hostname=name)},
        patch_type=PatchType.MERGE,
    )
    return node


class FakeGpuNodes(Protocol):
    """The ``fake_gpu_nodes`` fixture: ``await fake_gpu_nodes(count, **options)``."""

    async def __call__(self, count: int = 1, **options: Any) -> list[NodeModel]: ...
