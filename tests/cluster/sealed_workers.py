"""Bound workers made as the extender makes them, for tests that play the scheduler: the pod is
created without its allocation, then `gpu-ids` and the allocation seal are patched in at once
(scheduling.md §12, "Sealed allocations")."""

from __future__ import annotations

import copy

from lightkube import AsyncClient
from lightkube.resources.core_v1 import Pod
from lightkube.types import PatchType

from tensorfusion.controller.seal_key import load_seal_key, seal_secret_name
from tensorfusion.domain.allocator.allocation_seal import seal
from tensorfusion.domain.annotations import KEYS
from tensorfusion.domain.settings.controller_environment import DEFAULT_RELEASE


async def create_sealed_worker(
    kube: AsyncClient, pod: Pod, *, release: str = DEFAULT_RELEASE
) -> Pod:
    """Create `pod` (bound, carrying `gpu-ids`) with a seal from the release's key (the
    Secret is made here when no controller made it yet)."""
    unsealed = copy.deepcopy(pod)
    assert unsealed.metadata is not None and unsealed.metadata.annotations is not None
    assert unsealed.spec is not None and unsealed.spec.nodeName
    namespace = str(unsealed.metadata.namespace)
    gpu_ids = unsealed.metadata.annotations.pop(KEYS.gpu_ids)
    created = await kube.create(unsealed)
    assert created.metadata is not None and created.metadata.uid
    key = await load_seal_key(kube, namespace=namespace, name=seal_secret_name(release))
    annotations = {
        KEYS.gpu_ids: gpu_ids,
        KEYS.allocation_seal: seal(key, uid=created.metadata.uid, node=unsealed.spec.nodeName,
                                   gpus=gpu_ids.split(",")),
    }  # fmt: skip
    return await kube.patch(
        Pod, str(created.metadata.name), {"metadata": {"annotations": annotations}},
        namespace=namespace, patch_type=PatchType.MERGE,
    )  # fmt: skip
