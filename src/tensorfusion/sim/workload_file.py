"""The simulator's workload trace: pod manifests with arrival, duration and replicas."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any, Final

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from tensorfusion.domain.bounded_documents import annotations_size_problem
from tensorfusion.domain.durations import DurationError, parse_go_duration
from tensorfusion.domain.object_views import namespace_of
from tensorfusion.domain.scheduling.native.pod_shape import pod_shape_problem
from tensorfusion.sim.input_errors import load_model
from tensorfusion.sim.input_limits import MAX_TRACE_PODS, WORKLOAD_FILE_LIMITS, too_many
from tensorfusion.sim.native_pods import gpu_request_problem

__all__ = [
    "TraceEntry",
    "WorkloadFile",
    "load_workload",
    "parse_seconds",
    "pod_shape_problem",
]


_PLAIN_SECONDS: Final = re.compile(r"[0-9]{1,12}(\.[0-9]{1,9})?")


def parse_seconds(value: Any) -> float:
    """Seconds from a number or a Go duration text such as `90s`, `5m`, `1h30m`."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError(f"not a duration (examples: 90, 30s, 5m, 1h30m): {value!r}")
    if isinstance(value, str):
        text = value.strip()
        if _PLAIN_SECONDS.fullmatch(text):
            return float(text)
        try:
            return parse_go_duration(text) / 1e9
        except DurationError:
            raise ValueError(f"not a duration (examples: 90, 30s, 5m, 1h30m): {value!r}") from None
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"must be a finite number of seconds >= 0: {value!r}")
    return float(value)


class TraceEntry(BaseModel):
    """`replicas` copies of a pod, `interval` apart from `arrival`, each running `duration`."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    name: str = Field(min_length=1)
    arrival: float = 0.0
    interval: float = 0.0
    duration: float = 3600.0
    replicas: int = Field(1, ge=1, le=100000)
    pod: dict[str, Any]

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

    @model_validator(mode="after")
    def _native_cards(self) -> TraceEntry:
        problem = gpu_request_problem(self.pod)
        if problem is not None:
            raise ValueError(f"entry {self.name!r}: pod.{problem}")
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
