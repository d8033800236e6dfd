"""A pod's native scheduling requirements, compiled once and matched against many nodes."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tensorfusion.domain.scheduling.native.node_affinity import RequiredNodeAffinity
from tensorfusion.domain.scheduling.native.node_unschedulable import tolerates_unschedulable
from tensorfusion.domain.scheduling.native.resources import (
    NativeInputError,
    PodResources,
    pod_resources,
)
from tensorfusion.domain.scheduling.native.taint_toleration import Toleration, parse_tolerations

__all__ = ["PodRequirements"]


@dataclass(frozen=True, slots=True)
class PodRequirements:
    """Tolerations, node name, node selector and affinity, and resource requests of a pod.

    `class_key` holds everything but the pod's name: pods with equal keys pass the same
    filters and get the same score on every node.
    """

    namespace: str = ""
    name: str = ""
    node_name: str = ""
    tolerations: tuple[Toleration, ...] = ()
    affinity: RequiredNodeAffinity = field(default_factory=RequiredNodeAffinity)
    resources: PodResources = field(default_factory=PodResources)
    tolerates_unschedulable: bool = field(init=False, repr=False, compare=False)
    class_key: tuple[object, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        value = tolerates_unschedulable(self.tolerations)
        object.__setattr__(self, "tolerates_unschedulable", value)
        requests = self.resources.requests
        key = (
            self.node_name,
            self.tolerations,
            self.affinity,
            requests.cpu_milli,
            requests.memory,
            requests.ephemeral_storage,
            tuple(sorted(requests.scalar.items())),
            self.resources.non_zero_cpu_milli,
            self.resources.non_zero_memory,
        )
        object.__setattr__(self, "class_key", key)

    @classmethod
    def from_pod(cls, pod: Mapping[str, Any]) -> PodRequirements:
        """Compile a v1 Pod given as a dict; NativeInputError names the pod and the field."""
        metadata = pod.get("metadata") or {}
        namespace = str(metadata.get("namespace") or "") if isinstance(metadata, Mapping) else ""
        name = str(metadata.get("name") or "") if isinstance(metadata, Mapping) else ""
        try:
            spec = pod.get("spec") or {}
            if not isinstance(spec, Mapping):
                raise NativeInputError(f"spec: expected an object, got {spec!r}")
            node_name = spec.get("nodeName") or ""
            return cls(
                namespace=namespace,
                name=name,
                node_name=str(node_name),
                tolerations=parse_tolerations(spec.get("tolerations")),
                affinity=RequiredNodeAffinity.from_pod_spec(spec),
                resources=pod_resources(pod),
            )
        except NativeInputError as error:
            raise NativeInputError(f"pod {namespace}/{name}: {error}") from error
