"""Read-only views of the allocator for the HTTP API, and an independent copy for simulations.

`allocation_view` is the body of `GET /api/allocation` (scheduling.md §16.2); `nodes_view` and
`pools_view` are those of `GET /api/nodes` and `GET /api/pools` (§16.3). Quantities are canonical
strings, resource objects use the keys `tflops` and `vram` with zero keys omitted, lists are
sorted by name (pods and allocations by UID), and facts the allocator keeps as "" when unknown
are null. The caller holds the allocator's lock while a view is built (§3).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from typing import Any

from tensorfusion.domain.allocation_request import ResourceAmount
from tensorfusion.domain.allocator.allocator import Allocator
from tensorfusion.domain.allocator.capacity_figures import (
    CapacityTotals,
    NodeCapacity,
    node_capacity,
    pool_capacities,
)
from tensorfusion.domain.allocator.gpu_state import GPUState, RunningWorkload
from tensorfusion.domain.allocator.progressive_migration import wants_progressive_taint
from tensorfusion.domain.allocator.quota import NamespaceQuota
from tensorfusion.domain.allocator.records import AllocationRecord, NodeState
from tensorfusion.domain.timestamps import format_rfc3339

__all__ = [
    "allocation_view",
    "allocator_copy",
    "nodes_view",
    "pools_view",
    "wants_progressive_taint",
]

# ---- GET /api/allocation ---------------------------------------------------------------------


def allocation_view(
    allocator: Allocator,
    *,
    ready: bool,
    generated_at: float,
    max_worker_per_node: int,
    node: str | None = None,
    pool: str | None = None,
    namespace: str | None = None,
    format_time: Callable[[float], str] = format_rfc3339,
    scaling: Mapping[tuple[str, str], Any] | None = None,
) -> dict[str, Any]:
    """The body of `GET /api/allocation`; the lists are empty while not `ready`.

    `node` and `pool` select GPUs, nodes and allocations (not quotas, which are per namespace).
    `namespace` selects allocations and quotas, the pods and workers listed, and the GPUs and
    nodes that hold one of them; GPU figures stay those of the whole GPU. Times (`generated_at`,
    the records' seconds) are written by `format_time`. `scaling` holds what the autoscaler
    says of each workload (namespace, name), shown as each of its allocations' `autoScaling`
    (absent when it has said nothing).
    """
    body: dict[str, Any] = {
        "ready": ready,
        "generatedAt": format_time(generated_at),
        "isolationPolicy": allocator.isolation_policy.value,
        "maxWorkerPerNode": max_worker_per_node,
        "gpus": [],
        "nodes": [],
        "allocations": [],
        "quotas": [],
    }
    if not ready:
        return body
    records = [
        allocator.records[uid]
        for uid in sorted(allocator.records)
        if namespace is None or allocator.records[uid].request.namespace == namespace
    ]
    on_gpu: dict[str, list[AllocationRecord]] = {}
    for record in records:
        for name in record.gpus:
            on_gpu.setdefault(name, []).append(record)
    body["gpus"] = [
        _gpu_entry(gpu, on_gpu.get(gpu.name, []))
        for gpu in (allocator.gpus[name] for name in sorted(allocator.gpus))
        if (node is None or gpu.node == node)
        and (pool is None or gpu.pool == pool)
        and (namespace is None or gpu.name in on_gpu)
    ]
    for state in _listed_nodes(allocator):
        if node is not None and state.name != node:
            continue
        if pool is not None and _node_pool(state) != pool:
            continue
        entry = _node_entry(allocator, state, namespace)
        held = entry["committedWorkers"] or entry["assumedWorkers"] or entry["pendingIndices"]
        if namespace is None or held:
            body["nodes"].append(entry)
    body["allocations"] = [
        _allocation_entry(record, format_time, scaling or {})
        for record in records
        if (node is None or record.node == node) and (pool is None or record.request.pool == pool)
    ]
    body["quotas"] = [
        _quota_entry(allocator.quotas[name])
        for name in sorted(allocator.quotas)
        if namespace is None or name == namespace
    ]
    return body


def _amount(tflops: int, vram: int) -> dict[str, str]:
    return ResourceAmount(tflops_milli=tflops, vram_bytes=vram).to_json()


def _gpu_entry(gpu: GPUState, records: Iterable[AllocationRecord]) -> dict[str, Any]:
    return {
        "name": gpu.name,
        "node": gpu.node,
        "pool": gpu.pool,
        "phase": gpu.phase.value,
        "usedBy": gpu.used_by or None,
        "gpuModel": gpu.model or None,
        "vendor": gpu.vendor or None,
        "index": gpu.index,
        "numaNode": gpu.numa_node,
        "isolationMode": gpu.isolation_mode or None,
        "activeIsolationMode": gpu.active_isolation_mode or None,
        "capacity": _amount(gpu.capacity_tflops, gpu.capacity_vram),
        "available": _amount(gpu.available_tflops, gpu.available_vram),
        "effectiveAvailable": _amount(gpu.effective_tflops, gpu.effective_vram),
        "pods": [
            {
                "uid": record.uid,
                "namespace": record.request.namespace,
                "name": record.request.pod_name,
                "state": record.state.value,
                "request": record.request.request.to_json(),
                "limit": record.request.limit.to_json(),
            }
            for record in records
        ],
    }


def _listed_nodes(allocator: Allocator) -> list[NodeState]:
    """Nodes with GPUs, workers or pending indices, by name."""
    return [
        state
        for name, state in sorted(allocator.nodes.items())
        if state.gpus or state.workers or state.pending_indices
    ]


def _node_pool(state: NodeState) -> str | None:
    """The pool of the node's first GPU, as the capacity figures group nodes."""
    return state.gpus[0].pool if state.gpus else None


def _node_entry(allocator: Allocator, state: NodeState, namespace: str | None) -> dict[str, Any]:
    def keys(uids: Iterable[str]) -> list[str]:
        return sorted(key for uid in uids if (key := _worker_key(allocator, uid, namespace)))

    pending = {}
    for index in sorted(state.pending_indices):
        key = _worker_key(allocator, state.pending_indices[index], namespace)
        if key:
            pending[str(index)] = key
    return {
        "name": state.name,
        "pool": _node_pool(state),
        "gpus": [gpu.name for gpu in state.gpus],
        "committedWorkers": keys(state.committed_workers),
        "assumedWorkers": keys(state.assumed_workers),
        "pendingIndices": pending,
    }


def _worker_key(allocator: Allocator, uid: str, namespace: str | None) -> str:
    """`namespace/name` of a worker ("" when the namespace filter excludes it)."""
    record = allocator.records.get(uid)
    if record is None:
        return uid if namespace is None else ""
    if namespace is not None and record.request.namespace != namespace:
        return ""
    return record.request.key


def _allocation_entry(
    record: AllocationRecord,
    format_time: Callable[[float], str],
    scaling: Mapping[tuple[str, str], Any],
) -> dict[str, Any]:
    request = record.request
    entry = {
        "uid": record.uid,
        "namespace": request.namespace,
        "name": request.pod_name,
        "workload": request.workload or None,
        "pool": request.pool,
        "node": record.node,
        "gpus": list(record.gpus),
        "count": request.count,
        "isolation": request.isolation.value,
        "qos": request.qos.value,
        "request": request.request.to_json(),
        "limit": request.limit.to_json(),
        "gpuModel": request.gpu_model,
        "vendor": request.vendor,
        "gpuIndices": list(request.gpu_indices),
        "partitionTemplateId": request.partition_template_id,
        "state": record.state.value,
        "since": format_time(record.since),
        "expiresAt": None if record.expires_at is None else format_time(record.expires_at),
    }
    scaled = scaling.get((request.namespace, request.workload)) if request.workload else None
    if scaled is not None:  # only then: the spec's example body stays as it is
        entry["autoScaling"] = scaled
    return entry


def _quota_entry(quota: NamespaceQuota) -> dict[str, Any]:
    return {
        "namespace": quota.spec.namespace,
        "quota": quota.spec.name,
        "used": quota.committed.to_json(),
        "assumed": quota.assumed.to_json(),
    }


# ---- GET /api/nodes, GET /api/pools ----------------------------------------------------------


def _figures(totals: CapacityTotals) -> dict[str, dict[str, str]]:
    """`capacity`, `available`, `virtual`, `virtualAvailable` (GPUNode/GPUPool status meaning)."""
    return {
        "capacity": _amount(totals.total_tflops, totals.total_vram),
        "available": _amount(totals.available_tflops, totals.available_vram),
        "virtual": _amount(totals.virtual_tflops, totals.virtual_vram),
        "virtualAvailable": _amount(totals.virtual_available_tflops, totals.virtual_available_vram),
    }


def nodes_view(allocator: Allocator, *, pool: str | None = None) -> dict[str, Any]:
    """The body of `GET /api/nodes[?pool=]`: per node its agent, taint, GPUs and figures."""
    nodes = []
    for state in _listed_nodes(allocator):
        if pool is not None and _node_pool(state) != pool:
            continue
        capacity = node_capacity(allocator, state)
        nodes.append({
            "name": state.name,
            "pool": _node_pool(state),
            "agentReady": state.hypervisor_index0 is None or state.hypervisor_index0 > 0,
            "tainted": wants_progressive_taint(state),
            "gpus": list(capacity.gpus),
            "workers": state.workers,
            **_figures(capacity.totals),
        })  # fmt: skip
    return {"nodes": nodes}


def pools_view(allocator: Allocator) -> dict[str, Any]:
    """The body of `GET /api/pools`: per pool (known pools without nodes too) its figures."""
    capacities: list[NodeCapacity] = [
        node_capacity(allocator, state) for state in allocator.nodes.values() if state.gpus
    ]
    figures = pool_capacities(allocator, capacities)
    workers: dict[str, int] = {}
    for capacity in capacities:
        workers[capacity.pool] = workers.get(capacity.pool, 0) + (
            allocator.nodes[capacity.name].workers
        )
    pools = []
    for name in sorted(set(figures) | set(allocator.pools)):
        known = figures.get(name)
        pools.append({
            "name": name,
            "placementMode": allocator.pool(name).placement_mode.value,
            "nodes": known.nodes if known else 0,
            "gpus": known.gpus if known else 0,
            "workers": workers.get(name, 0),
            **_figures(known.totals if known else CapacityTotals()),
        })  # fmt: skip
    return {"pools": pools}


# ---- copies for simulations ------------------------------------------------------------------


def _copy_gpu(gpu: GPUState) -> GPUState:
    return replace(
        gpu,
        partitions=dict(gpu.partitions),
        running_apps={
            key: RunningWorkload(app.name, app.namespace, dict(app.pods))
            for key, app in gpu.running_apps.items()
        },
        holders=dict(gpu.holders),
    )


def _copy_node(state: NodeState, gpus: dict[str, GPUState]) -> NodeState:
    return replace(
        state,
        gpus=[gpus[gpu.name] for gpu in state.gpus],
        missing_gpus=[gpus[gpu.name] for gpu in state.missing_gpus],
        committed_workers=set(state.committed_workers),
        assumed_workers=set(state.assumed_workers),
        pending_indices=dict(state.pending_indices),
    )


def allocator_copy(allocator: Allocator) -> Allocator:
    """An independent copy, assumptions included: changing it never changes the original.

    Immutable parts (requests, pool settings, quota specs, running pods) are shared; the copy
    starts with a change feed of its own.
    """
    gpus = {name: _copy_gpu(gpu) for name, gpu in allocator.gpus.items()}
    return Allocator(
        isolation_policy=allocator.isolation_policy,
        gpus=gpus,
        nodes={name: _copy_node(state, gpus) for name, state in allocator.nodes.items()},
        pools=dict(allocator.pools),
        quotas={
            namespace: NamespaceQuota(quota.spec, replace(quota.committed), replace(quota.assumed))
            for namespace, quota in allocator.quotas.items()
        },
        records={
            uid: replace(record, quota=replace(record.quota))
            for uid, record in allocator.records.items()
        },
        pool_members={pool: set(names) for pool, names in allocator.pool_members.items()},
    )
