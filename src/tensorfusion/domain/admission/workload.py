"""The TensorFusionWorkload admission creates or patches (admission.md §12), and its life
after: the pod that owns an ownerless pod's workload, the dynamic workloads to collect."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tensorfusion.domain.admission.resolved import ResolvedWorkload
from tensorfusion.domain.annotations import WORKLOAD_MODE_DYNAMIC, Keys
from tensorfusion.domain.json_patch import json_copy, json_equal
from tensorfusion.domain.object_views import annotations_of, deletion_timestamp_of, metadata_of
from tensorfusion.domain.quantities import QuantityError, parse_quantity

__all__ = [
    "WORKLOAD_API_VERSION",
    "WORKLOAD_KIND",
    "WorkloadWrite",
    "build_workload",
    "collectable",
    "pod_as_owner",
    "workload_spec",
    "workload_spec_patch",
]

WORKLOAD_API_VERSION = "tensor-fusion.ai/v1"
WORKLOAD_KIND = "TensorFusionWorkload"


def workload_spec(resolved: ResolvedWorkload) -> dict[str, Any]:
    """The resolved profile as a WorkloadProfileSpec (JSON, zero quantities omitted)."""
    spec: dict[str, Any] = {
        "poolName": resolved.pool,
        "resources": {
            "requests": resolved.requests.to_json(),
            "limits": resolved.limits.to_json(),
        },
        "qos": resolved.qos.value,
        "isLocalGPU": resolved.mode.is_local_gpu,
        "sidecarWorker": resolved.mode.sidecar_worker,
        "isolation": resolved.mode.isolation.value,
        "gpuCount": resolved.gpu.count,
    }
    optional: dict[str, Any] = {
        "partitionTemplateId": resolved.mode.partition_template_id,
        "gpuModel": resolved.gpu_model,
        "vendor": resolved.vendor,
        "gpuIndices": list(resolved.gpu.indices) or None,
        "autoScalingConfig": resolved.auto_scaling_config,
        "nodeAffinity": resolved.passthrough.get("nodeAffinity"),
        "workerPodTemplate": resolved.passthrough.get("workerPodTemplate"),
        "gangScheduling": resolved.gang_scheduling,
        "replicas": resolved.passthrough.get("replicas"),
    }
    spec.update({key: json_copy(value) for key, value in optional.items() if value is not None})
    return spec


def build_workload(
    resolved: ResolvedWorkload, keys: Keys, container_gpu_count: str | None
) -> dict[str, Any]:
    """The object to create when the workload does not exist yet."""
    annotations = {keys.workload_mode: WORKLOAD_MODE_DYNAMIC}
    if container_gpu_count:
        annotations[keys.container_gpu_count] = container_gpu_count
    if resolved.disable_features:
        annotations[keys.disable_features] = resolved.disable_features
    metadata: dict[str, Any] = {
        "name": resolved.name,
        "namespace": resolved.namespace,
        "labels": {keys.gpupool: resolved.pool},
        "annotations": annotations,
    }
    if resolved.root is not None:
        ref = {
            field: resolved.root[field]
            for field in ("apiVersion", "kind", "name", "uid")
            if field in resolved.root
        }
        ref["controller"] = True
        metadata["ownerReferences"] = [ref]
    return {
        "apiVersion": WORKLOAD_API_VERSION,
        "kind": WORKLOAD_KIND,
        "metadata": metadata,
        "spec": workload_spec(resolved),
    }


def _semantic_equal(a: Any, b: Any, in_resources: bool) -> bool:
    if in_resources and isinstance(a, str | int) and isinstance(b, str | int):
        try:
            return parse_quantity(str(a)) == parse_quantity(str(b))
        except QuantityError:
            pass
    return json_equal(a, b)


def _merge_diff(
    old: Mapping[str, Any], new: Mapping[str, Any], in_resources: bool
) -> dict[str, Any]:
    patch: dict[str, Any] = {}
    for key in old:
        if key not in new:
            patch[key] = None
    for key, value in new.items():
        nested = in_resources or key == "resources"
        current = old.get(key)
        if isinstance(current, Mapping) and isinstance(value, Mapping):
            child = _merge_diff(current, value, nested)
            if child:
                patch[key] = child
        elif key not in old or not _semantic_equal(current, value, nested):
            patch[key] = json_copy(value)
    return patch


def workload_spec_patch(
    existing: Mapping[str, Any], desired: Mapping[str, Any]
) -> dict[str, Any] | None:
    """JSON merge patch `{"spec": ...}` turning the existing spec into the desired one, or None
    when they are semantically equal (quantities compared by value)."""
    diff = _merge_diff(existing.get("spec") or {}, desired.get("spec") or {}, False)
    return {"spec": diff} if diff else None


@dataclass(frozen=True, slots=True)
class WorkloadWrite:
    """Step 16(b): create `body`, or patch an existing workload with `spec_patch(existing)`."""

    name: str
    namespace: str
    body: Mapping[str, Any]

    def spec_patch(self, existing: Mapping[str, Any]) -> dict[str, Any] | None:
        """Merge patch for an existing workload of this name; None when nothing differs."""
        return workload_spec_patch(existing, self.body)


def pod_as_owner(pod: Mapping[str, Any]) -> dict[str, Any]:
    """The ownerReference that makes `pod` the controller of its workload (§12: the workload
    of a pod without a controller lives and dies with that pod)."""
    metadata = metadata_of(pod)
    return {"apiVersion": "v1", "kind": "Pod", "name": metadata.get("name"),
            "uid": metadata.get("uid"), "controller": True}  # fmt: skip


def collectable(workload: Mapping[str, Any], pods: int, keys: Keys) -> bool:
    """Whether the workload is collected once it has had no pods long enough: a dynamic one
    (written by admission) without pods and not being deleted already."""
    dynamic = annotations_of(workload).get(keys.workload_mode) == WORKLOAD_MODE_DYNAMIC
    return dynamic and pods == 0 and not deletion_timestamp_of(workload)
