"""Allocation annotations a pod may not bring itself (admission.md §2): `gpu-ids`, `index`,
`effective-hard-sm-percent`, `container-gpus`, `allocation-seal` (the extender's bind patch
writes them, an UPDATE the webhook does not intercept) and `partition-uuids`. A created pod
carrying one claims GPUs the scheduler never gave it; the webhook denies it (403) on every
route.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tensorfusion.domain.annotation_errors import Code, Problem, invalid_value
from tensorfusion.domain.annotations import Keys
from tensorfusion.domain.object_views import annotations_of

__all__ = ["allocation_annotation_keys", "allocation_claims"]

_RULE = "written only by the TensorFusion scheduler when it binds the pod; a new pod may not set it"


def allocation_annotation_keys(keys: Keys) -> tuple[str, ...]:
    """The annotations only the scheduler writes."""
    return (keys.gpu_ids, keys.index, keys.effective_hard_sm_percent, keys.container_gpus,
            keys.allocation_seal, keys.partition_uuids)  # fmt: skip


def allocation_claims(pod: Mapping[str, Any], keys: Keys) -> list[Problem]:
    """One Forbidden problem per allocation annotation the pod carries."""
    annotations = annotations_of(pod)
    return [
        invalid_value(key, str(annotations[key]), _RULE, code=Code.FORBIDDEN)
        for key in allocation_annotation_keys(keys)
        if key in annotations
    ]
