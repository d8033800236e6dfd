"""Restart and takeover recovery: the allocator rebuilt from the cluster (scheduling.md §12).

Pools, templates, quotas, GPUs, GPUNodes and Nodes are loaded first; then every live worker
pod's `tensor-fusion.ai/gpu-ids` is restored as a committed record (the stored GPU
`status.available` is never read). The result lists what could not be restored and why, for
the caller to log and record as Events; nothing here raises for bad cluster data: an object
that cannot be read (a quantity beyond the bounds, say) is that object's problem, and a pod
whose GPUs have no room left for it (a second allocation of a GPU) is refused, the earliest
bound pod keeping the GPU. With a seal key, a pod whose allocation the scheduler did not write
(`allocation_seal`) is refused too.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, TypeVar

from tensorfusion.domain.allocator.allocation_seal import seal_problem
from tensorfusion.domain.allocator.allocator import Allocator, OverCommitError
from tensorfusion.domain.allocator.mapping import (
    gpu_state,
    host_facts,
    hypervisor_index0,
    pool_settings,
    quota_spec,
)
from tensorfusion.domain.allocator.quota_status import choose_effective, read_quota
from tensorfusion.domain.allocator.records import RestoreOutcome
from tensorfusion.domain.annotation_errors import AnnotationError
from tensorfusion.domain.annotations import KEYS
from tensorfusion.domain.model import ModelError, load_as
from tensorfusion.domain.model.gpu import GPU
from tensorfusion.domain.model.node import GPUNode
from tensorfusion.domain.model.pool import GPUPool
from tensorfusion.domain.model.quota import GPUResourceQuota
from tensorfusion.domain.model.scheduling import SchedulingConfigTemplate
from tensorfusion.domain.object_views import (
    annotations_of,
    creation_timestamp_of,
    is_deleting,
    labels_of,
    metadata_of,
    name_of,
    namespace_of,
)
from tensorfusion.domain.pod_request import request_from_pod
from tensorfusion.domain.timestamps import parse_rfc3339
from tensorfusion.domain.vocabulary import IsolationPolicy

__all__ = [
    "OVER_COMMIT_REASON",
    "ClusterInventory",
    "RecoveryReport",
    "bound_since",
    "is_live_worker",
    "load_all",
    "load_inventory",
    "object_key",
    "read_inventory",
    "recover",
    "worker_gpu_ids",
]

_FINISHED: Final = frozenset({"Succeeded", "Failed"})
OVER_COMMIT_REASON: Final = "GPUAllocationRefused"
"""Event reason (and pod condition type) for a pod whose GPUs had no room for it at restore."""


@dataclass(frozen=True, slots=True)
class ClusterInventory:
    """What the allocator is built from, as loaded models (quotas: the effective one per
    namespace) and raw Node objects."""

    pools: Sequence[GPUPool] = ()
    templates: Mapping[str, SchedulingConfigTemplate] = field(default_factory=dict)
    quotas: Sequence[GPUResourceQuota] = ()
    gpus: Sequence[GPU] = ()
    gpu_nodes: Sequence[GPUNode] = ()
    nodes: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)


@dataclass(slots=True)
class RecoveryReport:
    """What recovery did: records restored, GPU objects it could not read, pods it skipped."""

    restored: list[RestoreOutcome] = field(default_factory=list)
    gpu_problems: dict[str, tuple[str, ...]] = field(default_factory=dict)
    skipped_pods: dict[str, str] = field(default_factory=dict)
    """`namespace/name` → why the pod holds no record (bad annotations)."""
    refused_pods: dict[str, str] = field(default_factory=dict)
    """`namespace/name` → why the pod's allocation was refused (it would over-commit a GPU)."""
    unsealed_pods: dict[str, str] = field(default_factory=dict)
    """`namespace/name` → why the pod's `gpu-ids` are not the scheduler's (`seal_problem`)."""
    unreadable: dict[str, str] = field(default_factory=dict)
    """`Kind name` or `Kind namespace/name` (`object_key`) → why the object was left out."""

    @property
    def inconsistent(self) -> list[RestoreOutcome]:
        """Records whose `gpu-ids` named unknown GPUs or GPUs of another node."""
        return [outcome for outcome in self.restored if not outcome.consistent]


def worker_gpu_ids(pod: Mapping[str, Any]) -> tuple[str, ...]:
    """The GPU names of a pod's `gpu-ids` annotation (empty when absent)."""
    text = annotations_of(pod).get(KEYS.gpu_ids) or ""
    return tuple(name.strip() for name in str(text).split(",") if name.strip())


def bound_since(pod: Mapping[str, Any], default: float) -> float:
    """When the pod was bound (its PodScheduled condition, else its creation), in epoch
    seconds: a record restored by any leader carries the same `since`."""
    status = pod.get("status") or {}
    stamps = [
        condition.get("lastTransitionTime")
        for condition in status.get("conditions") or ()
        if isinstance(condition, Mapping) and condition.get("type") == "PodScheduled"
    ]
    stamps.append(creation_timestamp_of(pod))
    for stamp in stamps:
        seconds = parse_rfc3339(stamp)
        if seconds is not None:
            return seconds
    return default


def is_live_worker(pod: Mapping[str, Any]) -> bool:
    """A worker bound to a node, holding `gpu-ids`, not finished, and not a deleting pod whose
    finalizer is already gone (§12 recovery step 2)."""
    metadata = metadata_of(pod)
    if labels_of(pod).get(KEYS.component) != "worker":
        return False
    if not (pod.get("spec") or {}).get("nodeName") or not worker_gpu_ids(pod):
        return False
    if (pod.get("status") or {}).get("phase") in _FINISHED:
        return False
    return not is_deleting(pod) or KEYS.finalizer in (metadata.get("finalizers") or ())


def object_key(kind: str, obj: Mapping[str, Any]) -> str:
    """`Kind name`, or `Kind namespace/name` for a namespaced object (the problems' key)."""
    namespace, name = namespace_of(obj), name_of(obj)
    return f"{kind} {namespace}/{name}" if namespace else f"{kind} {name}"


Loaded = TypeVar("Loaded", GPU, GPUNode, GPUPool, SchedulingConfigTemplate)


def load_all(
    model: type[Loaded], objects: Iterable[Mapping[str, Any]], problems: dict[str, str]
) -> list[Loaded]:
    """The objects that load as `model`; each one that does not goes to `problems`."""
    loaded = []
    for obj in objects:
        try:
            loaded.append(load_as(model, obj))
        except ModelError as error:
            problems[object_key(model.__name__, obj)] = str(error)
    return loaded


def read_inventory(
    *,
    pools: Iterable[Mapping[str, Any]] = (),
    templates: Iterable[Mapping[str, Any]] = (),
    quotas: Iterable[Mapping[str, Any]] = (),
    gpus: Iterable[Mapping[str, Any]] = (),
    gpu_nodes: Iterable[Mapping[str, Any]] = (),
    nodes: Iterable[Mapping[str, Any]] = (),
) -> tuple[ClusterInventory, dict[str, str]]:
    """The inventory of the cluster's raw objects, and the objects left out and why."""
    problems: dict[str, str] = {}
    loaded_templates = load_all(SchedulingConfigTemplate, templates, problems)
    effective, superseded = choose_effective(read_quota(q) for q in quotas)
    for reading in [*effective.values(), *superseded]:
        if reading.problems:
            key = f"GPUResourceQuota {reading.namespace}/{reading.name}"
            problems[key] = "; ".join(reading.problems)
    inventory = ClusterInventory(
        pools=load_all(GPUPool, pools, problems),
        templates={t.metadata.name or "": t for t in loaded_templates},
        quotas=[r.quota for r in effective.values() if r.enforceable and r.quota is not None],
        gpus=load_all(GPU, gpus, problems),
        gpu_nodes=load_all(GPUNode, gpu_nodes, problems),
        nodes={name_of(n): n for n in nodes},
    )
    return inventory, problems


def load_inventory(allocator: Allocator, inventory: ClusterInventory) -> dict[str, tuple[str, ...]]:
    """Install pools, quotas, GPUs and node facts; returns the problems of GPU objects."""
    for pool in inventory.pools:
        allocator.set_pool(pool_settings(pool, inventory.templates))
    for quota in inventory.quotas:
        allocator.set_quota(quota_spec(quota))
    problems: dict[str, tuple[str, ...]] = {}
    for gpu in inventory.gpus:
        mapped = gpu_state(gpu)
        if mapped.problems:
            problems[mapped.state.name] = mapped.problems
        if mapped.state.node:
            allocator.upsert_gpu(mapped.state)
    gpu_nodes = {n.metadata.name or "": n for n in inventory.gpu_nodes}
    for name in sorted(set(gpu_nodes) | set(inventory.nodes)):
        if name not in allocator.nodes:
            continue
        ram, disk = host_facts(gpu_nodes.get(name))
        allocator.set_node_facts(
            name, ram_bytes=ram, disk_bytes=disk,
            hypervisor_index0=hypervisor_index0(inventory.nodes.get(name)),
        )  # fmt: skip
    return problems


def recover(
    inventory: ClusterInventory,
    pods: Iterable[Mapping[str, Any]],
    isolation_policy: IsolationPolicy,
    now: float,
    *,
    seal_key: bytes = b"",
    committed: Callable[[str], frozenset[str]] = lambda _gpu: frozenset(),
) -> tuple[Allocator, RecoveryReport]:
    """A new allocator holding the cluster's inventory and every live worker's record whose
    allocation is the scheduler's (`seal_problem` with `seal_key` and `committed`)."""
    allocator = Allocator(isolation_policy=isolation_policy, seal_key=seal_key)
    report = RecoveryReport(gpu_problems=load_inventory(allocator, inventory))
    live = [pod for pod in pods if is_live_worker(pod)]
    # The earliest bound pod keeps a GPU that two pods were bound to.
    live.sort(key=lambda pod: (bound_since(pod, now), _pod_key(pod)))
    for pod in live:
        key = _pod_key(pod)
        try:
            request = request_from_pod(pod, KEYS)
        except AnnotationError as error:
            report.skipped_pods[key] = error.message
            continue
        pending = (pod.get("status") or {}).get("phase") in (None, "Pending")
        gpus = worker_gpu_ids(pod)
        unsealed = seal_problem(pod, gpus, seal_key, committed)
        if unsealed is not None:
            report.unsealed_pods[key] = unsealed
            continue
        try:
            outcome = allocator.restore(
                request, str((pod.get("spec") or {}).get("nodeName")), gpus,
                bound_since(pod, now), pending=pending,
            )  # fmt: skip
        except OverCommitError as error:
            report.refused_pods[key] = str(error)
            continue
        report.restored.append(outcome)
    return allocator, report


def _pod_key(pod: Mapping[str, Any]) -> str:
    return f"{namespace_of(pod)}/{name_of(pod)}"
