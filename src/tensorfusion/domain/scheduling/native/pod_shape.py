"""Whether a pod manifest has the shape the scheduling code can read (simulator workload
entries, `tensor-fusion simulate-schedule`, `POST /api/simulate-schedule`)."""

from __future__ import annotations

from typing import Any

from tensorfusion.domain.scheduling.native.pod import PodRequirements
from tensorfusion.domain.scheduling.native.resources import NativeInputError

__all__ = ["pod_shape_problem"]


def pod_shape_problem(pod: Any) -> str | None:
    """What is wrong with the shape of a pod manifest (None when it can be scheduled)."""
    if not isinstance(pod, dict):
        return "a pod must be a mapping"
    if pod.get("kind", "Pod") != "Pod":
        return f"kind must be Pod, got {pod.get('kind')!r}"
    metadata = pod.get("metadata", {})
    if not isinstance(metadata, dict):
        return "metadata must be a mapping"
    for key in ("labels", "annotations"):
        values = metadata.get(key) or {}
        if not isinstance(values, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in values.items()
        ):
            return f'metadata.{key} must map strings to strings (quote values like "true")'
    spec = pod.get("spec")
    if not isinstance(spec, dict) or not isinstance(spec.get("containers"), list):
        return "spec.containers: a pod needs at least one container"
    if not spec["containers"]:
        return "spec.containers: a pod needs at least one container"
    try:
        PodRequirements.from_pod(pod)
    except NativeInputError as exc:
        return str(exc)
    return None
