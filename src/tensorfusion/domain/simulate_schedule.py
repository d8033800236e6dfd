"""The body of `POST /api/simulate-schedule` (scheduling.md §16.1), shared by the controller's
HTTP API and `tensor-fusion simulate-schedule`.

Nothing is kept: the admission dry run previews the pod index, the pod is compiled into the
native view only for the explanation and forgotten afterwards, and the allocator is only read.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tensorfusion.domain.admission.dry_run import PodPreparer, PreparationError
from tensorfusion.domain.allocator.allocator import Allocator
from tensorfusion.domain.object_views import name_of, namespace_of, uid_of
from tensorfusion.domain.scheduling.decision import explain
from tensorfusion.domain.scheduling.native import NativeInputError
from tensorfusion.domain.scheduling.native.cluster_view import NativeCluster
from tensorfusion.domain.scheduling.scheduler_config import SchedulingProfile

__all__ = ["UnknownNodesError", "simulate_schedule"]


class UnknownNodesError(ValueError):
    """`nodes=` names nodes the cluster does not have."""

    def __init__(self, names: Sequence[str]) -> None:
        self.names = tuple(names)
        super().__init__(f"unknown node(s) {', '.join(self.names)}")


@dataclass(frozen=True, slots=True)
class _Identity:
    name: str
    namespace: str
    uid: str


def _identity(pod: Mapping[str, Any]) -> _Identity:
    name = name_of(pod) or "pod"
    namespace = namespace_of(pod) or "default"
    uid = uid_of(pod) or f"simulate-{namespace}-{name}"
    return _Identity(name, namespace, uid)


def simulate_schedule(
    pod: Mapping[str, Any],
    preparer: PodPreparer,
    native: NativeCluster,
    allocator: Allocator,
    *,
    profile: SchedulingProfile,
    nodes: Sequence[str] | None = None,
    mutate: bool = True,
) -> dict[str, Any]:
    """Explain where `pod` would go; raises PreparationError (admission would deny it, or it
    is not a GPU worker) and UnknownNodesError."""
    who = _identity(pod)
    if nodes is not None:
        unknown = [n for n in nodes if n not in native.facts]
        if unknown:
            raise UnknownNodesError(unknown)
    prepared = preparer.prepare(pod, who.name, who.namespace, who.uid, mutate, advance_index=False)
    uid = f"{who.uid}/simulation"
    try:
        native.add_pod(uid, prepared.pod)
    except NativeInputError as exc:
        raise PreparationError(str(exc)) from None
    try:
        candidates = native.node_names() if nodes is None else list(nodes)
        body = explain(allocator, prepared.request, native.view(uid), candidates, profile=profile)
    finally:
        native.forget_pod(uid)
    return {
        "pod": {"namespace": who.namespace, "name": who.name},
        "mutated": prepared.mutated,
        "warnings": prepared.warnings,
        **body,
    }
