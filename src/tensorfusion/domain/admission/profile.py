"""The WorkloadProfile a pod references: the base spec that annotations override (§4 step 4)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tensorfusion.domain.admission.resources import resource_from_json
from tensorfusion.domain.allocation_request import ResourceAmount
from tensorfusion.domain.annotation_errors import Problem, invalid_value, problem
from tensorfusion.domain.annotation_values import enum_rule
from tensorfusion.domain.vocabulary import IsolationMode, QoSLevel

__all__ = ["PASSTHROUGH_FIELDS", "ProfileSpec", "parse_profile"]

# Spec fields copied verbatim into the TensorFusionWorkload (§12).
PASSTHROUGH_FIELDS = (
    "autoScalingConfig",
    "nodeAffinity",
    "workerPodTemplate",
    "gangScheduling",
    "replicas",
)
_RANK = "workload-profile"


@dataclass(frozen=True, slots=True)
class ProfileSpec:
    """A WorkloadProfile spec in typed form; None = not set in the profile."""

    name: str = ""
    where: str = "WorkloadProfile spec"
    pool_name: str | None = None
    requests: ResourceAmount = field(default_factory=ResourceAmount)
    limits: ResourceAmount = field(default_factory=ResourceAmount)
    qos: QoSLevel | None = None
    is_local_gpu: bool | None = None
    sidecar_worker: bool | None = None
    isolation: IsolationMode | None = None
    partition_template_id: str | None = None
    gpu_model: str | None = None
    vendor: str | None = None
    gpu_count: int | None = None
    gpu_indices: tuple[int, ...] | None = None
    passthrough: Mapping[str, Any] = field(default_factory=dict)


def _string(spec: Mapping[str, Any], name: str) -> str | None:
    value = spec.get(name)
    return value if isinstance(value, str) and value else None


def _bool(spec: Mapping[str, Any], name: str, where: str, problems: list[Problem]) -> bool | None:
    value = spec.get(name)
    if value is None or isinstance(value, bool):
        return value
    problems.append(
        invalid_value(f"{where}.{name}", str(value), "must be a boolean", rank_as=_RANK)
    )
    return None


def parse_profile(profile: Mapping[str, Any]) -> tuple[ProfileSpec, list[Problem]]:
    """Read a WorkloadProfile object; problems name the profile field."""
    name = str((profile.get("metadata") or {}).get("name", ""))
    where = f'WorkloadProfile "{name}" spec'
    spec = profile.get("spec") or {}
    problems: list[Problem] = []
    resources = spec.get("resources") or {}
    requests, found = resource_from_json(
        resources.get("requests"), f"{where}.resources.requests", _RANK
    )
    problems += found
    limits, found = resource_from_json(resources.get("limits"), f"{where}.resources.limits", _RANK)
    problems += found
    qos: QoSLevel | None = None
    if spec.get("qos"):
        try:
            qos = QoSLevel(spec["qos"])
        except ValueError:
            problems.append(
                invalid_value(f"{where}.qos", str(spec["qos"]), enum_rule(QoSLevel), rank_as=_RANK)
            )
    isolation: IsolationMode | None = None
    if spec.get("isolation"):
        try:
            isolation = IsolationMode(spec["isolation"])
        except ValueError:
            problems.append(
                invalid_value(
                    f"{where}.isolation",
                    str(spec["isolation"]),
                    enum_rule(IsolationMode),
                    rank_as=_RANK,
                )
            )
    count = spec.get("gpuCount")
    if count is not None and (isinstance(count, bool) or not isinstance(count, int)):
        problems.append(
            invalid_value(f"{where}.gpuCount", str(count), "must be an integer", rank_as=_RANK)
        )
        count = None
    indices_value = spec.get("gpuIndices")
    indices: tuple[int, ...] | None = None
    if indices_value:
        if not isinstance(indices_value, list) or any(
            isinstance(item, bool) or not isinstance(item, int) or item < 0
            for item in indices_value
        ):
            problems.append(
                problem(f"{where}.gpuIndices: must be a list of integers >= 0", about=_RANK)
            )
        else:
            indices = tuple(indices_value)
    return (
        ProfileSpec(
            name=name,
            where=where,
            pool_name=_string(spec, "poolName"),
            requests=requests,
            limits=limits,
            qos=qos,
            is_local_gpu=_bool(spec, "isLocalGPU", where, problems),
            sidecar_worker=_bool(spec, "sidecarWorker", where, problems),
            isolation=isolation,
            partition_template_id=_string(spec, "partitionTemplateId"),
            gpu_model=_string(spec, "gpuModel"),
            vendor=_string(spec, "vendor"),
            gpu_count=count,
            gpu_indices=indices,
            passthrough={key: spec[key] for key in PASSTHROUGH_FIELDS if spec.get(key) is not None},
        ),
        problems,
    )
