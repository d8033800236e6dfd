"""What the extender answers to `filter` and `prioritize` (scheduling.md §1, §11, §15).

Pure: the shell hands over the decoded request, the live allocator, the pod's native view and
the clock, holds the allocator lock around the call, and writes the answer and any Event.

- A TF worker (label `component=worker`) whose GPUs are committed (its bind got that far) passes
  on that node only. Otherwise any earlier assumption of the pod is released, every
  candidate is evaluated (`decide_indexed`, the same choice as `decide`), ONE node passes and its
  GPUs are assumed; every other node fails unresolvably with `not selected: lower score`.
  Nothing feasible: every node fails with its stage message (a full evaluation), nothing is
  assumed, and the `0/<n> nodes are available: ...` summary is returned for the Warning Event.
- A native-GPU pod with progressive migration on: nodes hosting TF workers fail.
- Any other pod: every node passes.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from tensorfusion.domain.allocator.allocator import Allocator
from tensorfusion.domain.allocator.progressive_migration import native_gpu_pod_rejection
from tensorfusion.domain.allocator.records import AllocationRecord, RecordState
from tensorfusion.domain.annotation_errors import AnnotationError
from tensorfusion.domain.annotations import KEYS
from tensorfusion.domain.native_resources import DEFAULT_NATIVE_RESOURCES, has_native_gpus
from tensorfusion.domain.object_views import labels_of
from tensorfusion.domain.pod_request import request_from_pod
from tensorfusion.domain.scheduling.decision import NativeView, decide, decide_indexed
from tensorfusion.domain.scheduling.extender_protocol import (
    MAX_EXTENDER_PRIORITY,
    MIN_EXTENDER_PRIORITY,
    ExtenderFilterResult,
    HostPriorityList,
    host_priorities,
)
from tensorfusion.domain.scheduling.node_index import NodeScoreIndex
from tensorfusion.domain.scheduling.scheduler_config import SchedulingProfile

__all__ = [
    "ALLOCATOR_NOT_READY",
    "FilterAnswer",
    "PodKind",
    "filter_native_gpu_pod",
    "filter_worker",
    "pod_kind",
    "prioritize",
]

ALLOCATOR_NOT_READY: Final = "allocator not ready"


class PodKind(enum.Enum):
    """How the extender treats a pod (§1)."""

    WORKER = "worker"
    NATIVE_GPU = "native-gpu"
    OTHER = "other"


def pod_kind(
    pod: Mapping[str, Any],
    *,
    progressive_migration: bool,
    native_resources: Mapping[str, str] = DEFAULT_NATIVE_RESOURCES,
) -> PodKind:
    """A TF worker by its label; a native-GPU pod only with progressive migration on."""
    if labels_of(pod).get(KEYS.component) == "worker":
        return PodKind.WORKER
    if progressive_migration and has_native_gpus(pod, native_resources):
        return PodKind.NATIVE_GPU
    return PodKind.OTHER


@dataclass(frozen=True, slots=True)
class FilterAnswer:
    """The `filter` answer, the assumption made, and the summary of an unplaceable pod."""

    result: ExtenderFilterResult
    assumed: AllocationRecord | None = None
    unschedulable: str | None = None
    """`0/<n> nodes are available: ...` when no node fits (for one Warning Event)."""


def filter_worker(
    index: NodeScoreIndex,
    pod: Mapping[str, Any],
    *,
    node_names: Sequence[str],
    native: NativeView,
    profile: SchedulingProfile,
    now: float,
) -> FilterAnswer:
    """Choose one node and GPUs for a TF worker among `node_names` and assume them."""
    allocator = index.allocator
    try:
        request = request_from_pod(pod, KEYS)
    except AnnotationError as error:
        message = f"pod annotations: {error.message}"
        return FilterAnswer(
            ExtenderFilterResult.none_pass(dict.fromkeys(node_names, message)),
            unschedulable=f"0/{len(node_names)} nodes are available: {message}",
        )
    committed = allocator.records.get(request.pod_uid)
    if committed is not None and committed.state is RecordState.COMMITTED:
        # A bind reached its commit (kube-scheduler gave up waiting for it, or the pod is
        # bound): the pod stays where its GPUs are; placing it again would free them.
        held = f"pod holds GPUs on node {committed.node}"
        if committed.node in node_names:
            return FilterAnswer(ExtenderFilterResult.only(committed.node))
        others = dict.fromkeys(node_names, held)
        summary = f"0/{len(node_names)} nodes are available: {held}"
        return FilterAnswer(ExtenderFilterResult.none_pass(others), unschedulable=summary)
    _release_assumption(allocator, request.pod_uid)
    # The quick walk records no reasons: with a node chosen, kube-scheduler shows no per-node
    # reason anyway; only an unplaceable pod needs them, and gets the full evaluation.
    decision = decide_indexed(index, request, native, profile=profile, allowed=node_names,
                              reasons=False)  # fmt: skip
    if decision.node is None:
        decision = decide(allocator, request, native, node_names, profile=profile)
    if decision.node is None:
        reasons = {name: decision.rejection_message(name) for name in node_names}
        return FilterAnswer(
            ExtenderFilterResult.none_pass(reasons),
            unschedulable=decision.message or f"0/{len(node_names)} nodes are available",
        )
    record = allocator.assume(request, decision.node, decision.gpus, now)
    return FilterAnswer(ExtenderFilterResult.only(decision.node), assumed=record)


def _release_assumption(allocator: Allocator, uid: str) -> None:
    """A new `filter` of the same pod replaces its assumption."""
    record = allocator.records.get(uid)
    if record is not None and record.state is RecordState.ASSUMED:
        allocator.release(uid)


def filter_native_gpu_pod(allocator: Allocator, node_names: Sequence[str]) -> FilterAnswer:
    """Progressive migration: nodes hosting TF workers fail, every other node passes."""
    failed: dict[str, str] = {}
    passing: list[str] = []
    for name in node_names:
        rejection = native_gpu_pod_rejection(allocator, name)
        if rejection is None:
            passing.append(name)
        else:
            failed[name] = rejection
    result = ExtenderFilterResult(tuple(passing), {}, failed)
    if passing:
        return FilterAnswer(result)
    summary = f"0/{len(node_names)} nodes are available: {len(failed)} node hosts TF workers"
    return FilterAnswer(result, unschedulable=summary)


def prioritize(allocator: Allocator, pod_uid: str, node_names: Sequence[str]) -> HostPriorityList:
    """10 for the node the pod is assumed (or committed) on, 0 for every other node."""
    record = allocator.records.get(pod_uid)
    chosen = record.node if record is not None else None
    return host_priorities(
        {
            name: MAX_EXTENDER_PRIORITY if name == chosen else MIN_EXTENDER_PRIORITY
            for name in node_names
        }
    )
