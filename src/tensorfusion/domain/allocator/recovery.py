"""Restart and takeover recovery: the allocator rebuilt from the cluster (scheduling.md §12).

Pools, templates, quotas, GPUs, GPUNodes and Nodes are loaded first; then every live worker
pod's `tensor-fusion.ai/gpu-ids` is restored as a committed record (the stored GPU
`status.available` is never read). The result lists what could not be restored and why, for
the caller to log and record as Events; nothing here raises for bad cluster data.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final

from tensorfusion.domain.allocator.allocator import Allocator
from tensorfusion.domain.allocator.mapping import (
    gpu_state,
    host_facts,
    hypervisor_index0,
    pool_settings,
    quota_spec,
)
from tensorfusion.domain.allocator.records import RestoreOutcome
from tensorfusion.domain.annotation_errors import AnnotationError
from tensorfusion.domain.annotations import KEYS, Keys
from tensorfusion.domain.model.gpu import GPU
from tensorfusion.domain.model.node import GPUNode
from tensorfusion.domain.model.pool import GPUPool
from tensorfusion.domain.model.quota import GPUResourceQuota
from tensorfusion.domain.model.scheduling import SchedulingConfigTemplate
from tensorfusion.domain.pod_request import request_from_pod
from tensorfusion.domain.vocabulary import IsolationPolicy

__all__ = [
    "ClusterInventory",
    "RecoveryReport",
    "bound_since",
    "is_live_worker",
    "load_inventory",
    "recover",
    "worker_gpu_ids",
]

_FINISHED: Final = frozenset({"Succeeded", "Failed"})


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

    @property
    def inconsistent(self) -> list[RestoreOutcome]:
        """Records whose `gpu-ids` named unknown GPUs or GPUs of another node."""
        return [outcome for outcome in self.restored if not outcome.consistent]


def worker_gpu_ids(pod: Mapping[str, Any], keys: Keys = KEYS) -> tuple[str, ...]:
    """The GPU names of a pod's `gpu-ids` annotation (empty when absent)."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    text = annotations.get(keys.gpu_ids) or ""
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
    stamps.append((pod.get("metadata") or {}).get("creationTimestamp"))
    for stamp in stamps:
        if isinstance(stamp, str):
            try:
                return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
            except ValueError:
                continue
    return default


def is_live_worker(pod: Mapping[str, Any], keys: Keys = KEYS) -> bool:
    """A worker bound to a node, holding `gpu-ids`, not finished, and not a deleting pod whose
    finalizer is already gone (§12 recovery step 2)."""
    metadata = pod.get("metadata") or {}
    if (metadata.get("labels") or {}).get(keys.component) != "worker":
        return False
    if not (pod.get("spec") or {}).get("nodeName") or not worker_gpu_ids(pod, keys):
        return False
    if (pod.get("status") or {}).get("phase") in _FINISHED:
        return False
    deleting = metadata.get("deletionTimestamp") is not None
    return not deleting or keys.finalizer in (metadata.get("finalizers") or ())


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
    keys: Keys = KEYS,
) -> tuple[Allocator, RecoveryReport]:
    """A new allocator holding the cluster's inventory and every live worker's record."""
    allocator = Allocator(isolation_policy=isolation_policy)
    report = RecoveryReport(gpu_problems=load_inventory(allocator, inventory))
    for pod in pods:
        if not is_live_worker(pod, keys):
            continue
        metadata = pod.get("metadata") or {}
        key = f"{metadata.get('namespace', '')}/{metadata.get('name', '')}"
        try:
            request = request_from_pod(pod, keys)
        except AnnotationError as error:
            report.skipped_pods[key] = error.message
            continue
        pending = (pod.get("status") or {}).get("phase") in (None, "Pending")
        outcome = allocator.restore(
            request, str((pod.get("spec") or {}).get("nodeName")), worker_gpu_ids(pod, keys),
            bound_since(pod, now), pending=pending,
        )  # fmt: skip
        report.restored.append(outcome)
    return allocator, report
