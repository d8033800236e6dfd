"""The patched TF pod (admission.md §11): labels, normalised annotations and spec changes."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from tensorfusion.domain.admission.resolved import ResolvedWorkload
from tensorfusion.domain.annotations import COMPONENT_WORKER, Keys, encode_index
from tensorfusion.domain.native_resources import strip_native_resources
from tensorfusion.domain.quantities import format_bytes, format_milli

__all__ = ["build_worker_pod", "normalised_annotations", "owned_annotation_keys"]


def owned_annotation_keys(keys: Keys) -> tuple[str, ...]:
    """Annotations the webhook writes or removes; every other annotation is left untouched."""
    return (
        keys.gpupool,
        keys.gpu_count,
        keys.qos,
        keys.isolation,
        keys.is_local_gpu,
        keys.sidecar_worker,
        keys.inject_container,
        keys.tflops_request,
        keys.tflops_limit,
        keys.vram_request,
        keys.vram_limit,
        keys.compute_percent_request,
        keys.compute_percent_limit,
        keys.gpu_model,
        keys.vendor,
        keys.gpu_indices,
        keys.partition_id,
        keys.container_gpu_count,
        keys.pending_owned_workload,
        keys.pod_counter_key,
        keys.index,
        keys.gpu_ids,
    )


def _bool(value: bool) -> str:
    return "true" if value else "false"


def normalised_annotations(resolved: ResolvedWorkload, keys: Keys) -> dict[str, str]:
    """The scheduler's only input: the normalised annotation set (zero resources omitted)."""
    out = {
        keys.gpupool: resolved.pool,
        keys.gpu_count: str(resolved.gpu.count),
        keys.qos: resolved.qos.value,
        keys.isolation: resolved.mode.isolation.value,
        keys.is_local_gpu: _bool(resolved.mode.is_local_gpu),
        keys.sidecar_worker: _bool(resolved.mode.sidecar_worker),
        keys.inject_container: ",".join(resolved.inject_containers),
    }
    requests, limits = resolved.requests, resolved.limits
    for key, milli in (
        (keys.tflops_request, requests.tflops_milli),
        (keys.tflops_limit, limits.tflops_milli),
        (keys.compute_percent_request, requests.percent_milli),
        (keys.compute_percent_limit, limits.percent_milli),
    ):
        if milli:
            out[key] = format_milli(milli)
    for key, count in (
        (keys.vram_request, requests.vram_bytes),
        (keys.vram_limit, limits.vram_bytes),
    ):
        if count:
            out[key] = format_bytes(count)
    if resolved.gpu_model:
        out[keys.gpu_model] = resolved.gpu_model
    if resolved.vendor:
        out[keys.vendor] = resolved.vendor
    if resolved.gpu.indices:
        out[keys.gpu_indices] = ",".join(str(index) for index in resolved.gpu.indices)
    if resolved.mode.partition_template_id:
        out[keys.partition_id] = resolved.mode.partition_template_id
    if resolved.gpu.container_gpu_count:
        out[keys.container_gpu_count] = json.dumps(
            dict(resolved.gpu.container_gpu_count), separators=(",", ":")
        )
    if resolved.controller is None:
        out[keys.pending_owned_workload] = resolved.name
    if resolved.pod_counter_key:
        out[keys.pod_counter_key] = resolved.pod_counter_key
    return out


def _child(parent: dict[str, Any], key: str, empty: Any) -> Any:
    """`parent[key]` as a shallow copy of its own (so the input pod is never changed), `empty`
    when missing or null."""
    value = parent.get(key)
    if value is None:
        value = empty
    elif isinstance(value, Mapping):
        value = dict(value)
    elif isinstance(value, list):
        value = list(value)
    parent[key] = value
    return value


def _own_containers(spec: dict[str, Any]) -> None:
    """Copies of the containers and of their resource maps, the parts the index and the
    native-resource removal change."""
    for group in ("initContainers", "containers"):
        containers = spec.get(group)
        if not containers:
            continue
        owned = []
        for original in containers:
            container = dict(original)
            resources = container.get("resources")
            if isinstance(resources, Mapping):
                container["resources"] = {
                    side: dict(values) if isinstance(values, Mapping) else values
                    for side, values in resources.items()
                }
            owned.append(container)
        spec[group] = owned


def _has_toleration(tolerations: list[Any], keys: Keys) -> bool:
    for toleration in tolerations:
        if not isinstance(toleration, Mapping) or toleration.get("key") != keys.used_by:
            continue
        if toleration.get("effect") not in (None, "", keys.taint_effect):
            continue
        if toleration.get("operator") == "Exists" or toleration.get("value") == keys.used_by_value:
            return True
    return False


def build_worker_pod(
    pod: Mapping[str, Any],
    resolved: ResolvedWorkload,
    *,
    pod_index: int,
    native_resources: Mapping[str, str],
    keys: Keys,
) -> dict[str, Any]:
    """A mutated copy of `pod`; the input is not changed. Only the parts the mutation changes
    are copied: the rest is shared with `pod` (the patch diff skips it by identity)."""
    out: dict[str, Any] = dict(pod)
    metadata = _child(out, "metadata", {})
    if not metadata.get("namespace"):
        metadata["namespace"] = resolved.namespace
    labels = _child(metadata, "labels", {})
    if resolved.auto_migrated:
        labels[keys.enabled] = "true"
    labels[keys.component] = COMPONENT_WORKER
    labels[keys.gpupool] = resolved.pool
    labels[keys.pod_template_hash] = resolved.pool_template_hash
    labels[keys.workload] = resolved.name

    annotations = _child(metadata, "annotations", {})
    for key in owned_annotation_keys(keys):
        annotations.pop(key, None)
    annotations.update(normalised_annotations(resolved, keys))

    finalizers = _child(metadata, "finalizers", [])
    if keys.finalizer not in finalizers:
        finalizers.append(keys.finalizer)

    spec = _child(out, "spec", {})
    _own_containers(spec)
    spec["schedulerName"] = keys.scheduler_name
    tolerations = _child(spec, "tolerations", [])
    if not _has_toleration(tolerations, keys):
        tolerations.append(keys.toleration())
    priority_class = keys.priority_class_for(resolved.qos.value)
    if priority_class and not spec.get("priorityClassName"):
        spec["priorityClassName"] = priority_class
        spec.pop("priority", None)

    strip_native_resources(out, native_resources)
    index_name, index_value = encode_index(pod_index, keys)
    for group in ("initContainers", "containers"):
        for container in spec.get(group) or ():
            resources = container.get("resources") or {}
            for side in ("requests", "limits"):
                values = resources.get(side) or {}
                for name in [name for name in values if keys.is_index_resource(name)]:
                    del values[name]
            if group == "containers" and container.get("name") in resolved.inject_containers:
                resources = _child(container, "resources", {})
                _child(resources, "limits", {})[index_name] = str(index_value)
                _child(resources, "requests", {})[index_name] = str(index_value)
    return out
