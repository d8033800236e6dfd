"""Everything admission resolved for one TF pod: the input of mutation and of the workload."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tensorfusion.domain.admission.execution_mode import ExecutionMode
from tensorfusion.domain.admission.resources import GPUCount
from tensorfusion.domain.allocation_request import ResourceAmount
from tensorfusion.domain.vocabulary import QoSLevel

__all__ = ["ResolvedWorkload"]


@dataclass(frozen=True, slots=True)
class ResolvedWorkload:
    """The resolved profile of a TF pod (per-GPU resources, mode, count, owners)."""

    name: str
    namespace: str
    pool: str
    pool_template_hash: str
    requests: ResourceAmount
    limits: ResourceAmount
    qos: QoSLevel
    mode: ExecutionMode
    gpu: GPUCount
    inject_containers: tuple[str, ...]
    gpu_model: str | None = None
    vendor: str | None = None
    auto_scaling_config: Mapping[str, Any] | None = None
    gang_scheduling: Mapping[str, Any] | None = None
    passthrough: Mapping[str, Any] = field(default_factory=dict)
    controller: Mapping[str, Any] | None = None
    root: Mapping[str, Any] | None = None
    pod_counter_key: str | None = None
    auto_migrated: bool = False
    disable_features: str | None = None
