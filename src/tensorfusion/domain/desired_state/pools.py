"""GPUPools: the ones a TensorFusionCluster wants (api.md §2.1) and a pool's status (§2.2).

A cluster wants one GPUPool `<cluster>-<entry.name>` per `spec.gpuPools[]` entry: `spec` is the
entry's `specTemplate` as read by the model (the fields it sets), labels are the cluster's own plus
`tensor-fusion.ai/managed-by=<cluster>`, annotation `tensor-fusion.ai/is-default-pool` is the
entry's `isDefault`, and the cluster is its controller. Pools the cluster controls that no
entry names any more are deleted. A pool of that name controlled by another object is left alone
and reported.

A pool's status sums the figures of its GPUNodes (label `managed-by=<pool>`) as the allocator
holds them; its phase is `Running` when at least one GPUNode is `Running` and none is
`Provisioning`, `Destroying` while it is deleted, `Pending` otherwise (a pool without nodes
too).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from tensorfusion.domain.allocator.capacity_figures import CapacityTotals, NodeCapacity
from tensorfusion.domain.allocator.quota_status import merge_conditions
from tensorfusion.domain.annotations import KEYS
from tensorfusion.domain.desired_state.objects import owner_reference
from tensorfusion.domain.model.cluster import GPUPoolDefinition
from tensorfusion.domain.model.meta import API_VERSION, Condition
from tensorfusion.domain.model.node import GPUNodePhase
from tensorfusion.domain.model.pool import GPUPoolSpec, PoolPhase
from tensorfusion.domain.model.registry import to_wire
from tensorfusion.domain.object_views import (
    Obj,
    controller_of,
    is_deleting,
    labels_of,
    metadata_of,
    name_of,
    status_of,
    uid_of,
)

__all__ = [
    "PoolUpdate",
    "desired_pools",
    "pool_owner_cluster",
    "pool_phase",
    "pool_status",
    "pool_update",
    "pools_to_delete",
    "ready_condition",
    "replace_conditions",
]


def _entries(cluster: Obj) -> tuple[list[GPUPoolDefinition], bool]:
    """The `spec.gpuPools` entries that read as the model, and whether all of them did."""
    spec = cluster.get("spec")
    raw = spec.get("gpuPools") if isinstance(spec, Mapping) else None
    entries: list[GPUPoolDefinition] = []
    for item in raw if isinstance(raw, list) else ():
        try:
            entries.append(GPUPoolDefinition.model_validate(item))
        except ValidationError:
            continue
    return entries, len(entries) == len(raw or ())


def desired_pools(cluster: Obj) -> list[dict[str, Any]]:
    """The GPUPool bodies the cluster wants, in the order of `spec.gpuPools`."""
    cluster_name = name_of(cluster)
    labels = {**labels_of(cluster), KEYS.managed_by: cluster_name}
    bodies = []
    for entry in _entries(cluster)[0]:
        bodies.append({
            "apiVersion": API_VERSION,
            "kind": "GPUPool",
            "metadata": {
                "name": f"{cluster_name}-{entry.name}",
                "labels": dict(labels),
                "annotations": {KEYS.is_default_pool: "true" if entry.is_default else "false"},
                "ownerReferences": [owner_reference(cluster, "TensorFusionCluster")],
            },
            "spec": to_wire(entry.spec_template, exclude_unset=True),
        })  # fmt: skip
    return bodies


def _normal_spec(spec: object) -> object:
    """The spec with the model's defaults (the CRD's) filled in, for comparison."""
    if not isinstance(spec, Mapping):
        return spec
    try:
        return to_wire(GPUPoolSpec.model_validate(spec))
    except ValidationError:
        return dict(spec)


@dataclass(frozen=True, slots=True)
class PoolUpdate:
    """What to do with an existing pool: the full body to write (None: up to date), or why it
    is left alone."""

    body: dict[str, Any] | None = None
    conflict: str = ""


def pool_update(current: Obj, desired: Obj) -> PoolUpdate:
    """The existing pool brought to the desired spec, labels, annotation and owner (other
    labels, annotations and owners kept), with its resourceVersion for an update."""
    owner = controller_of(current)
    wanted_owner = controller_of(desired)
    assert wanted_owner is not None
    if owner is not None and owner.get("uid") != wanted_owner.get("uid"):
        return PoolUpdate(
            conflict=f"GPUPool {name_of(current)} is controlled by {owner.get('kind')} "
            f"{owner.get('name')}, not by TensorFusionCluster {wanted_owner.get('name')}"
        )
    metadata = metadata_of(current)
    wanted_metadata = metadata_of(desired)
    labels = {**labels_of(current), **wanted_metadata.get("labels", {})}
    annotations = {**(metadata.get("annotations") or {}), **wanted_metadata.get("annotations", {})}
    references = [dict(r) for r in metadata.get("ownerReferences") or () if isinstance(r, Mapping)]
    if owner is None:
        references.append(dict(wanted_owner))
    same = (
        labels == dict(labels_of(current))
        and annotations == dict(metadata.get("annotations") or {})
        and owner is not None
        and _normal_spec(current.get("spec")) == _normal_spec(desired.get("spec"))
    )
    if same:
        return PoolUpdate()
    body = {
        **{key: value for key, value in current.items() if key != "status"},
        "metadata": {
            **metadata,
            "labels": labels,
            "annotations": annotations,
            "ownerReferences": references,
        },
        "spec": desired.get("spec"),
    }
    return PoolUpdate(body)


def pools_to_delete(cluster: Obj, pools: Iterable[Obj]) -> list[str]:
    """Pools the cluster controls that none of its entries names, by name (none while an
    entry does not read: its pool is kept)."""
    if not _entries(cluster)[1]:
        return []
    wanted = {name_of(body) for body in desired_pools(cluster)}
    uid = uid_of(cluster)
    doomed = []
    for pool in pools:
        owner = controller_of(pool)
        if owner is None or owner.get("kind") != "TensorFusionCluster" or not uid:
            continue
        if owner.get("uid") == uid and name_of(pool) not in wanted and not is_deleting(pool):
            doomed.append(name_of(pool))
    return sorted(doomed)


def pool_owner_cluster(pool: Obj) -> str:
    """The name of the cluster that controls the pool ("" when none)."""
    owner = controller_of(pool)
    if owner is not None and owner.get("kind") == "TensorFusionCluster":
        return str(owner.get("name") or "")
    return ""


def _phase_of(obj: Obj, default: str) -> str:
    return str(status_of(obj).get("phase") or default)


def pool_phase(pool: Obj, gpu_nodes: Sequence[Obj]) -> PoolPhase:
    """Running with a GPUNode Running and none Provisioning; Destroying while deleted."""
    if is_deleting(pool):
        return PoolPhase.DESTROYING
    phases = [_phase_of(node, GPUNodePhase.PENDING.value) for node in gpu_nodes]
    if GPUNodePhase.RUNNING.value in phases and GPUNodePhase.PROVISIONING.value not in phases:
        return PoolPhase.RUNNING
    return PoolPhase.PENDING


def ready_condition(ready: bool, reason: str, message: str) -> Condition:
    """A `Ready` condition."""
    return Condition(
        type="Ready", status="True" if ready else "False", reason=reason, message=message
    )


def _conditions(obj: Obj) -> list[Condition]:
    found = []
    for raw in status_of(obj).get("conditions") or ():
        try:
            found.append(Condition.model_validate(raw))
        except ValidationError:
            continue
    return found


def replace_conditions(obj: Obj, owned: Sequence[Condition], now: str) -> list[dict[str, Any]]:
    """The object's conditions with `owned` put in (transition times kept while unchanged) and
    the conditions of other writers left as they are."""
    previous = _conditions(obj)
    merged = {c.type: c for c in merge_conditions(previous, owned, now)}
    result = [merged.pop(c.type, c) for c in previous]
    result.extend(merged.values())
    return [to_wire(condition) for condition in result]


def pool_status(
    pool: Obj,
    gpu_nodes: Sequence[Obj],
    capacities: Mapping[str, NodeCapacity],
    now: str,
) -> dict[str, Any]:
    """The GPUPool status fields the controller owns (for `merge_patch` with the current one).

    `gpu_nodes` are the pool's GPUNode objects; `capacities` their figures by node name
    (a node the allocator has no GPUs of counts zero).
    """
    phase = pool_phase(pool, gpu_nodes)
    totals = CapacityTotals()
    gpus = pods = 0
    ready_nodes = []
    not_ready = []
    for node in sorted(gpu_nodes, key=name_of):
        capacity = capacities.get(name_of(node))
        if capacity is not None:
            totals += capacity.totals
            gpus += len(capacity.gpus)
            pods += len(capacity.pods)
        node_phase = _phase_of(node, GPUNodePhase.PENDING.value)
        if node_phase == GPUNodePhase.RUNNING.value:
            ready_nodes.append(name_of(node))
        else:
            not_ready.append(f"{name_of(node)} ({node_phase})")
    if phase is PoolPhase.RUNNING:
        condition = ready_condition(
            True, "NodesRunning", f"{len(ready_nodes)} of {len(gpu_nodes)} GPU nodes Running"
        )
    elif phase is PoolPhase.DESTROYING:
        condition = ready_condition(False, "Destroying", "the pool is being deleted")
    elif not gpu_nodes:
        condition = ready_condition(False, "NoNodes", "no node matches the pool's node selector")
    else:
        shown = ", ".join(not_ready[:10]) + (", ..." if len(not_ready) > 10 else "")
        condition = ready_condition(
            False, "NodesNotReady", f"no GPU node is Running; not ready: {shown}"
        )
    return {
        "cluster": pool_owner_cluster(pool) or None,
        "phase": phase.value,
        "totalNodes": len(gpu_nodes),
        "readyNodes": len(ready_nodes),
        "notReadyNodes": len(gpu_nodes) - len(ready_nodes),
        "totalGPUs": gpus,
        "runningAppsCnt": pods,
        **to_wire(totals.to_status()),
        "conditions": replace_conditions(pool, [condition], now),
    }
