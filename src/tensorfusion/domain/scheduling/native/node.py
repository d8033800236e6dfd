"""What the native filters read of a Node: name, labels, taints, cordon and allocatable."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import ROUND_CEILING
from types import MappingProxyType
from typing import Any, Final

from tensorfusion.domain.scheduling.native.resources import (
    PODS,
    NativeInputError,
    ResourceAmounts,
    parse_resource_list,
    resource_amounts,
)

__all__ = ["NO_EXECUTE", "NO_SCHEDULE", "PREFER_NO_SCHEDULE", "NodeFacts", "Taint"]

NO_SCHEDULE: Final = "NoSchedule"
PREFER_NO_SCHEDULE: Final = "PreferNoSchedule"
NO_EXECUTE: Final = "NoExecute"

_NO_LABELS: Final[Mapping[str, str]] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class Taint:
    """A node taint."""

    key: str
    value: str = ""
    effect: str = NO_SCHEDULE

    @property
    def blocks_scheduling(self) -> bool:
        """True for the effects the TaintToleration filter enforces (NoSchedule, NoExecute)."""
        return self.effect in (NO_SCHEDULE, NO_EXECUTE)


@dataclass(frozen=True, slots=True)
class NodeFacts:
    """A node as the native filters and NodeResourcesFit see it (integer allocatable)."""

    name: str
    labels: Mapping[str, str] = field(default_factory=lambda: _NO_LABELS)
    taints: tuple[Taint, ...] = ()
    unschedulable: bool = False
    allocatable: ResourceAmounts = field(default_factory=ResourceAmounts)
    allowed_pods: int = 0
    blocking_taints: tuple[Taint, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        blocking = tuple(t for t in self.taints if t.blocks_scheduling)
        object.__setattr__(self, "blocking_taints", blocking)

    @classmethod
    def from_node(cls, node: Mapping[str, Any]) -> NodeFacts:
        """Read a v1 Node given as a dict (`metadata`, `spec`, `status.allocatable`)."""
        metadata = _mapping(node.get("metadata"), "metadata")
        spec = _mapping(node.get("spec"), "spec")
        status = _mapping(node.get("status"), "status")
        name = metadata.get("name")
        if not isinstance(name, str) or not name:
            raise NativeInputError(f"metadata.name: expected a node name, got {name!r}")
        labels = _mapping(metadata.get("labels"), "metadata.labels")
        taints = []
        for i, raw in enumerate(spec.get("taints") or ()):
            taint = _mapping(raw, f"spec.taints[{i}]")
            taints.append(
                Taint(
                    key=str(taint.get("key") or ""),
                    value=str(taint.get("value") or ""),
                    effect=str(taint.get("effect") or ""),
                )
            )
        allocatable = parse_resource_list(status.get("allocatable"), "status.allocatable")
        pods = allocatable.get(PODS)
        return cls(
            name=name,
            labels=MappingProxyType({str(k): str(v) for k, v in labels.items()}),
            taints=tuple(taints),
            unschedulable=bool(spec.get("unschedulable", False)),
            allocatable=resource_amounts(allocatable),
            allowed_pods=0 if pods is None else int(pods.to_integral_value(ROUND_CEILING)),
        )


def _mapping(value: object, where: str) -> Mapping[str, Any]:
    if value is None:
        return _NO_LABELS
    if not isinstance(value, Mapping):
        raise NativeInputError(f"{where}: expected an object, got {value!r}")
    return value
