"""The WorkloadProfile a pod references: the base spec that annotations override (§4 step 4)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tensorfusion.domain.admission.resources import resource_amount
from tensorfusion.domain.allocation_request import ResourceAmount
from tensorfusion.domain.model import WorkloadProfile
from tensorfusion.domain.model.autoscaling import AutoScalingConfig
from tensorfusion.domain.model.workload import GangScheduling
from tensorfusion.domain.vocabulary import IsolationMode, QoSLevel

__all__ = ["ProfileSpec", "read_profile"]


@dataclass(frozen=True, slots=True)
class ProfileSpec:
    """A WorkloadProfile spec as admission uses it; None = not set in the profile.

    `passthrough`: `nodeAffinity`, `workerPodTemplate` and `replicas`, copied verbatim into
    the TensorFusionWorkload (§12); autoscaling and gang settings are merged with the
    annotations first.
    """

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
    auto_scaling_config: AutoScalingConfig | None = None
    gang_scheduling: GangScheduling | None = None
    passthrough: Mapping[str, Any] = field(default_factory=dict)


def read_profile(profile: WorkloadProfile) -> ProfileSpec:
    """The profile's spec; the model has already checked every value (`load_as`)."""
    name = profile.metadata.name or ""
    spec = profile.spec
    passthrough = {
        "nodeAffinity": spec.node_affinity,
        "workerPodTemplate": spec.worker_pod_template,
        "replicas": spec.replicas,
    }
    return ProfileSpec(
        name=name,
        where=f'WorkloadProfile "{name}" spec',
        pool_name=spec.pool_name or None,
        requests=resource_amount(spec.resources.requests),
        limits=resource_amount(spec.resources.limits),
        qos=spec.qos,
        is_local_gpu=spec.is_local_gpu,
        sidecar_worker=spec.sidecar_worker,
        # The model defaults `isolation` to soft; admission needs to know whether it was set.
        isolation=spec.isolation if "isolation" in spec.model_fields_set else None,
        partition_template_id=spec.partition_template_id or None,
        gpu_model=spec.gpu_model or None,
        vendor=spec.vendor or None,
        gpu_count=spec.gpu_count,
        gpu_indices=tuple(spec.gpu_indices) or None,
        auto_scaling_config=spec.auto_scaling_config,
        gang_scheduling=spec.gang_scheduling,
        passthrough={key: value for key, value in passthrough.items() if value is not None},
    )
