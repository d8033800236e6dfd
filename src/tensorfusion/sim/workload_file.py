"""The simulator's workload trace: pod manifests with arrival, duration and replicas."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from tensorfusion.domain.autoscaling.settings import AutoScaleConfigError, parse_auto_set
from tensorfusion.domain.bounded_documents import annotations_size_problem
from tensorfusion.domain.model import unknown_fields
from tensorfusion.domain.model.autoscaling import AutoScalingConfig
from tensorfusion.domain.object_views import namespace_of
from tensorfusion.domain.scheduling.native.pod_shape import pod_shape_problem
from tensorfusion.sim.input_errors import load_model
from tensorfusion.sim.input_limits import MAX_TRACE_PODS, WORKLOAD_FILE_LIMITS, too_many
from tensorfusion.sim.native_pods import gpu_request_problem, is_native
from tensorfusion.sim.seconds import parse_seconds
from tensorfusion.sim.usage_profiles import UsageSpec

__all__ = [
    "TraceEntry",
    "WorkloadFile",
    "load_workload",
    "parse_seconds",
    "pod_shape_problem",
]


class TraceEntry(BaseModel):
    """`replicas` copies of a pod, `interval` apart from `arrival`, each running `duration`;
    `usage` (what they use of their request) and `autoScalingConfig` (as the workload's spec
    holds it) feed the right-sizing what-if."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    name: str = Field(min_length=1)
    arrival: float = 0.0
    interval: float = 0.0
    duration: float = 3600.0
    replicas: int = Field(1, ge=1, le=100000)
    pod: dict[str, Any]
    usage: UsageSpec | None = None
    auto_scaling_config: AutoScalingConfig | None = Field(None, alias="autoScalingConfig")

    @field_validator("arrival", "interval", "duration", mode="before")
    @classmethod
    def _seconds(cls, value: Any) -> float:
        return parse_seconds(value)

    @field_validator("pod")
    @classmethod
    def _pod_shape(cls, pod: dict[str, Any]) -> dict[str, Any]:
        problem = pod_shape_problem(pod) or annotations_size_problem(pod)
        if problem is not None:
            raise ValueError(problem)
        return pod

    @field_validator("auto_scaling_config")
    @classmethod
    def _settings(cls, config: AutoScalingConfig | None) -> AutoScalingConfig | None:
        if config is None:
            return None
        unknown = unknown_fields(config)
        if unknown:
            raise ValueError("; ".join(f"{path}: unknown field" for path in unknown))
        try:
            parse_auto_set(config.auto_set_resources)
        except AutoScaleConfigError as exc:
            raise ValueError(f"autoSetResources.{exc}") from None
        return config

    @model_validator(mode="after")
    def _native_cards(self) -> TraceEntry:
        problem = gpu_request_problem(self.pod)
        if problem is not None:
            raise ValueError(f"entry {self.name!r}: pod.{problem}")
        return self

    @model_validator(mode="after")
    def _right_sized_kind(self) -> TraceEntry:
        given = "usage" if self.usage is not None else "autoScalingConfig"
        if (self.usage is not None or self.auto_scaling_config is not None) and is_native(self.pod):
            raise ValueError(f"entry {self.name!r}: {given}: only TensorFusion pods are "
                             "right-sized, and this pod is an ordinary one (no label "
                             "tensor-fusion.ai/enabled: \"true\")")  # fmt: skip
        return self

    def pod_names(self) -> list[str]:
        """The names of the entry's pods: the entry name, or `<name>-<i>` per replica."""
        if self.replicas == 1:
            return [self.name]
        return [f"{self.name}-{i}" for i in range(self.replicas)]

    @property
    def namespace(self) -> str:
        """The pods' namespace (`default` when the manifest has none)."""
        return namespace_of(self.pod) or "default"


class WorkloadFile(BaseModel):
    """The whole trace."""

    model_config = ConfigDict(extra="forbid")

    workloads: list[TraceEntry] = Field(min_length=1)

    @model_validator(mode="after")
    def _bounded_unique_pods(self) -> WorkloadFile:
        total = sum(e.replicas for e in self.workloads)
        if total > MAX_TRACE_PODS:  # before any pod name is built
            raise ValueError(f"workloads: {too_many(total, 'pods', MAX_TRACE_PODS)}")
        seen: dict[tuple[str, str], int] = {}
        for i, entry in enumerate(self.workloads):
            for name in entry.pod_names():
                key = (entry.namespace, name)
                if key in seen:
                    raise ValueError(
                        f"workloads[{i}] ({entry.name}): pod {key[0]}/{name} is also a pod of "
                        f"workloads[{seen[key]}]; pod names must be unique per namespace"
                    )
                seen[key] = i
        return self


def load_workload(path: Path) -> WorkloadFile:
    """Read and validate a workload trace; InputError names the file, entry, field and value."""
    return load_model(path, "workload file", WorkloadFile, "a mapping with a `workloads` list",
                      WORKLOAD_FILE_LIMITS)  # fmt: skip
