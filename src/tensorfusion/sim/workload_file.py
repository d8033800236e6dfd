"""The simulator's workload trace: pod manifests with arrival, duration and replicas."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from tensorfusion.domain.scheduling.native import NativeInputError, PodRequirements
from tensorfusion.sim.input_errors import load_model

__all__ = ["TraceEntry", "WorkloadFile", "load_workload", "parse_seconds"]

_DURATION = re.compile(r"^(?:(?P<h>\d+)h)?(?:(?P<m>\d+)m)?(?:(?P<s>\d+(?:\.\d+)?)s)?$")


def parse_seconds(value: Any) -> float:
    """Seconds from a number or a duration text such as `90`, `30s`, `5m`, `1h30m`."""
    if isinstance(value, bool):
        raise ValueError(f"not a duration (examples: 90, 30s, 5m, 1h30m): {value!r}")
    if isinstance(value, int | float):
        if value < 0:
            raise ValueError(f"must not be negative: {value!r}")
        return float(value)
    text = str(value).strip()
    match = _DURATION.match(text)
    if not text or match is None or not any(match.groups()):
        raise ValueError(f"not a duration (examples: 90, 30s, 5m, 1h30m): {value!r}")
    return int(match["h"] or 0) * 3600 + int(match["m"] or 0) * 60 + float(match["s"] or 0)


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
        if pod.get("kind", "Pod") != "Pod":
            raise ValueError(f"kind must be Pod, got {pod.get('kind')!r}")
        spec = pod.get("spec")
        if not isinstance(spec, dict) or not isinstance(spec.get("containers"), list):
            raise ValueError("spec.containers: a pod needs at least one container")
        if not spec["containers"]:
            raise ValueError("spec.containers: a pod needs at least one container")
        try:
            PodRequirements.from_pod(pod)
        except NativeInputError as exc:
            raise ValueError(str(exc)) from None
        return pod


class WorkloadFile(BaseModel):
    """The whole trace."""

    model_config = ConfigDict(extra="forbid")

    workloads: list[TraceEntry] = Field(min_length=1)


def load_workload(path: Path) -> WorkloadFile:
    """Read and validate a workload trace; InputError names the file, entry, field and value."""
    return load_model(path, "workload file", WorkloadFile, "a mapping with a `workloads` list")
