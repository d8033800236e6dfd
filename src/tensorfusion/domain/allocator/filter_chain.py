"""The GPU filter chain and node stages of one request on one node (scheduling.md §4-§7).

`evaluate_node` is the single implementation used by the fast scheduling path, by `filter`
and by the explanation of `simulate-schedule`; `explain=True` only adds the reason texts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

from tensorfusion.domain.allocation_request import AllocationRequest
from tensorfusion.domain.allocator.allocator import Allocator
from tensorfusion.domain.allocator.gpu_state import TENSOR_FUSION_USER, WHOLE_CARD_MODES, GPUState
from tensorfusion.domain.allocator.oversubscription import (
    Oversubscription,
    effective_limit,
    shared_effective_limit,
    virtual_capacity,
)
from tensorfusion.domain.allocator.placement import (
    PlacementWeights,
    gpu_level_uses_available,
    gpu_score,
    node_level_uses_available,
    node_term,
)
from tensorfusion.domain.allocator.quota import (
    charge_for,
    check_single,
    check_total,
)
from tensorfusion.domain.allocator.records import NodeState
from tensorfusion.domain.quantities import format_bytes, format_milli
from tensorfusion.domain.topology import (
    TopologyArgs,
    TopologyGPU,
    TopologyPlan,
    plan_topology,
    topology_rejection,
)
from tensorfusion.domain.vocabulary import (
    GPUPhase,
    IsolationMode,
    IsolationPolicy,
    PlacementMode,
    TopologyMode,
)

__all__ = [
    "GPU_STAGES",
    "NODE_STAGES",
    "GPUSchedulingArgs",
    "NodeEvaluation",
    "RequestContext",
    "choose_gpus",
    "evaluate_node",
    "not_in_pool_message",
]

GPU_STAGES: Final = (
    "QuotaCheck",
    "IsolationPolicy",
    "PhaseFilter",
    "GPUIndexFilter",
    "GPUIsolationModeFilter",
    "SharedWholeGPUFilter",
    "GPUResourceFilter",
    "QuotaPercentCheck",
    "GPUModelFilter",
    "GPUVendorFilter",
    "SameNodeFilter",
    "MaxWorkerPerNode",
)
NODE_STAGES: Final = (
    "NodeNotInPool",
    "InsufficientGPUs",
    "HypervisorHealth",
    "PodIndexBusy",
    "VirtualCapacity",
    "Topology",
)
(
    QUOTA_CHECK,
    ISOLATION_POLICY,
    PHASE_FILTER,
    GPU_INDEX,
    ISOLATION_MODE,
    SHARED_WHOLE,
    RESOURCE,
    QUOTA_PERCENT,
    MODEL,
    VENDOR,
    SAME_NODE,
    MAX_WORKER,
) = range(12)
PASSED: Final = len(GPU_STAGES)


@dataclass(frozen=True, slots=True)
class GPUSchedulingArgs:
    """Arguments of the GPU plugins (GPUResourcesFit and GPUNetworkTopologyAware)."""

    max_worker_per_node: int = 256
    weights: PlacementWeights = field(default_factory=PlacementWeights)
    topology: TopologyArgs = field(default_factory=TopologyArgs)


@dataclass(slots=True)
class RequestContext:
    """Everything about one request that does not depend on the node."""

    allocator: Allocator
    request: AllocationRequest
    args: GPUSchedulingArgs
    placement_mode: PlacementMode
    topology: TopologyArgs
    quota_rejection: str | None
    quota_checked: bool
    percent_quota: bool
    active: tuple[bool, ...]
    indices: frozenset[int]
    oversubscription: Oversubscription | None = None
    plain_static: bool = False
    isolation_memo: dict[tuple[object, ...], tuple[int, str] | None] = field(default_factory=dict)

    @classmethod
    def build(
        cls, allocator: Allocator, request: AllocationRequest, args: GPUSchedulingArgs
    ) -> RequestContext:
        """Resolve placement mode, topology overrides, active stages and the quota check."""
        quota = allocator.quotas.get(request.namespace)
        rejection: str | None = None
        percent_quota = False
        if quota is not None:
            rejection = check_single(quota.spec, request) or check_total(
                quota, charge_for(request, [0] * request.count)
            )
            uses_percent = bool(request.request.percent_milli or request.limit.percent_milli)
            percent_quota = uses_percent and quota.spec.has_tflops_cap()
        active = (
            quota is not None,
            True,
            True,
            bool(request.gpu_indices),
            True,
            request.isolation in WHOLE_CARD_MODES,
            True,
            percent_quota,
            request.gpu_model is not None,
            request.vendor is not None,
            request.count > 1,
            args.max_worker_per_node > 0,
        )
        return cls(
            allocator=allocator,
            request=request,
            args=args,
            placement_mode=allocator.pool(request.pool).placement_mode,
            oversubscription=allocator.pool(request.pool).oversubscription,
            plain_static=allocator.isolation_policy is IsolationPolicy.STATIC,
            topology=args.topology.with_overrides(request.topology),
            quota_rejection=rejection,
            quota_checked=quota is not None,
            percent_quota=percent_quota,
            active=active,
            indices=frozenset(request.gpu_indices),
        )

    def isolation_compatible(self, gpu: GPUState) -> str | None:
        """Stage 1 (§5.2): None when compatible, else the reason."""
        failure = self.isolation_failure(gpu)
        return failure[1] if failure is not None and failure[0] == ISOLATION_POLICY else None

    def isolation_failure(self, gpu: GPUState) -> tuple[int, str] | None:
        """Stages 1 and 4 for a GPU's isolation state, memoised per distinct state."""
        # GPUState.isolation_state() plus the capabilities, spelled out: this runs per GPU.
        key = (
            gpu.isolation_policy,
            gpu.isolation_mode,
            gpu.active_isolation_mode,
            gpu.dynamic_isolation_conflict,
            gpu.capabilities,
        )
        memo = self.isolation_memo
        if key in memo:
            return memo[key]
        reason = self._policy_failure(gpu)
        result: tuple[int, str] | None
        if reason is not None:
            result = (ISOLATION_POLICY, reason)
        else:
            mode_reason = self._mode_failure(gpu)
            result = None if mode_reason is None else (ISOLATION_MODE, mode_reason)
        memo[key] = result
        return result

    def _policy_failure(self, gpu: GPUState) -> str | None:
        mode = self.request.isolation
        policy = gpu.isolation_policy or self.allocator.isolation_policy
        if self.allocator.isolation_policy is IsolationPolicy.STATIC:
            if policy is not IsolationPolicy.STATIC:
                return f"isolationPolicy is {policy}, controller policy is Static"
            if mode is IsolationMode.SHARED or gpu.isolation_mode in ("", mode):
                return None
            return f"isolationMode is {gpu.isolation_mode}, request is {mode}"
        if policy is not IsolationPolicy.DYNAMIC:
            return f"isolationPolicy is {policy}, controller policy is Dynamic"
        if mode is IsolationMode.PARTITIONED:
            return "partitioned isolation is refused under the Dynamic policy"
        if gpu.dynamic_isolation_conflict:
            return "dynamicIsolationConflict is true"
        if gpu.active_isolation_mode not in ("", mode):
            return f"activeIsolationMode is {gpu.active_isolation_mode}, request is {mode}"
        return None

    def _mode_failure(self, gpu: GPUState) -> str | None:
        # Stage 4 also restates the Static and Dynamic rules of stage 1 (§4); a GPU that
        # breaks them never gets here, so only the capabilities remain to check.
        mode = self.request.isolation
        caps = gpu.capabilities
        if caps is not None and not caps.supports(mode):
            return f"capabilities do not support {mode} isolation"
        return None


@dataclass(slots=True)
class NodeEvaluation:
    """One node's outcome: per-GPU failures, valid GPUs, node rejection and scores."""

    node: str
    pool_gpus: list[GPUState]
    failures: dict[str, tuple[int, str]] = field(default_factory=dict)
    valid: list[GPUState] = field(default_factory=list)
    rejected_at: str | None = None
    message: str | None = None
    node_terms: dict[str, int] = field(default_factory=dict)
    gpu_scores: dict[str, int] = field(default_factory=dict)
    node_score: int = 0
    topology: TopologyPlan | None = None
    topology_evaluated: bool = False

    @property
    def feasible(self) -> bool:
        """Whether the node can take the pod."""
        return self.rejected_at is None


def _gpu_failure(ctx: RequestContext, gpu: GPUState, explain: bool) -> tuple[int, str]:
    """First GPU stage (1..9) that removes the GPU, or PASSED."""
    request = ctx.request
    mode = request.isolation
    if ctx.plain_static:
        # The usual case, decided inline: Static policy, GPU without its own policy or lock.
        suspect = (
            (
                gpu.isolation_policy is not None
                and gpu.isolation_policy is not IsolationPolicy.STATIC
            )
            or (mode is not IsolationMode.SHARED and gpu.isolation_mode not in ("", mode))
            or (gpu.capabilities is not None and not gpu.capabilities.supports(mode))
        )
        isolation = ctx.isolation_failure(gpu) if suspect else None
    else:
        isolation = ctx.isolation_failure(gpu)
    if isolation is not None and isolation[0] == ISOLATION_POLICY:
        return isolation
    if gpu.used_by not in ("", TENSOR_FUSION_USER):
        return PHASE_FILTER, f"usedBy is {gpu.used_by}"
    if gpu.phase is not GPUPhase.RUNNING:
        return PHASE_FILTER, f"phase is {gpu.phase}"
    if gpu.capacity_tflops <= 0 or gpu.capacity_vram <= 0:
        return PHASE_FILTER, "capacity is zero"
    if ctx.indices and (gpu.index is None or gpu.index not in ctx.indices):
        return GPU_INDEX, (
            f"index {gpu.index} not in gpu-indices {sorted(ctx.indices)}" if explain else ""
        )
    if isolation is not None:
        return isolation
    if mode in WHOLE_CARD_MODES:
        if not gpu.is_idle():
            return SHARED_WHOLE, "GPU is not idle"
    elif gpu.whole_holders:
        return RESOURCE, "GPU is held whole by a shared pod"
    need = request.request
    need_tflops = (
        need.tflops_milli if not need.percent_milli else need.tflops_on(gpu.capacity_tflops)
    )
    eff_tflops = gpu.available_tflops - gpu.assumed_tflops
    if need_tflops and eff_tflops < need_tflops:
        return RESOURCE, (
            f"available tflops {format_milli(eff_tflops)} < request {format_milli(need_tflops)}"
            if explain
            else ""
        )
    eff_vram = gpu.available_vram - gpu.assumed_vram
    if need.vram_bytes and eff_vram < need.vram_bytes:
        return RESOURCE, (
            f"available vram {format_bytes(eff_vram)} < request {format_bytes(need.vram_bytes)}"
            if explain
            else ""
        )
    if ctx.percent_quota:
        reason_text = _percent_quota_failure(ctx, gpu)
        if reason_text is not None:
            return QUOTA_PERCENT, reason_text
    if request.gpu_model is not None and gpu.model != request.gpu_model:
        return MODEL, f"gpuModel is {gpu.model}, request is {request.gpu_model}"
    if request.vendor is not None and gpu.vendor != request.vendor:
        return VENDOR, f"vendor is {gpu.vendor}, request is {request.vendor}"
    return PASSED, ""


def _percent_quota_failure(ctx: RequestContext, gpu: GPUState) -> str | None:
    """Stage 7: the quota's TFLOPs caps with percent values converted with this GPU."""
    request = ctx.request
    quota = ctx.allocator.quotas.get(request.namespace)
    if quota is None:
        return None
    capacity = gpu.capacity_tflops
    return check_single(quota.spec, request, capacity) or check_total(
        quota, charge_for(request, [capacity] * request.count)
    )


def evaluate_node(
    ctx: RequestContext,
    node: NodeState,
    explain: bool = False,
    with_topology: bool = False,
    node_score: int | None = None,
) -> NodeEvaluation:
    """Run the GPU stages and node stages of §4 for one node, and score it (§7.3).

    `node_score`, when the caller already knows it exactly, spares recomputing it; GPU-level
    scores are computed on demand (`gpu_scores`), except with `explain`.
    """
    request = ctx.request
    count = request.count
    pool_gpus = [g for g in node.gpus if g.pool == request.pool]
    ev = NodeEvaluation(node.name, pool_gpus)
    failures = ev.failures
    if ctx.quota_rejection is not None:
        for gpu in pool_gpus:
            failures[gpu.name] = (QUOTA_CHECK, ctx.quota_rejection)
    else:
        for gpu in pool_gpus:
            stage, reason = _gpu_failure(ctx, gpu, explain)
            if stage != PASSED:
                failures[gpu.name] = (stage, reason)
    survivors = [g for g in pool_gpus if g.name not in failures]
    if count > 1 and 0 < len(survivors) < count:
        text = f"node keeps {len(survivors)} of {count} required GPUs"
        for gpu in survivors:
            failures[gpu.name] = (SAME_NODE, text)
        survivors = []
    limit = ctx.args.max_worker_per_node
    if survivors and limit > 0 and node.workers >= limit:
        text = f"node has {node.workers} workers, maxWorkerPerNode is {limit}"
        for gpu in survivors:
            failures[gpu.name] = (MAX_WORKER, text)
        survivors = []
    ev.valid = survivors
    if not pool_gpus:
        ev.rejected_at, ev.message = "NodeNotInPool", not_in_pool_message(request.pool)
    elif len(pool_gpus) < count:
        ev.rejected_at = "InsufficientGPUs"
        ev.message = f"node has {len(pool_gpus)} GPUs of pool {request.pool}, request is {count}"
    elif len(survivors) < count:
        _reject_at_gpu_stage(ev, count)
    else:
        _node_stages(ctx, node, ev)
    if ev.rejected_at is None:
        if node_score is None or explain:
            _score(ctx, node, ev)
        else:
            ev.node_score = node_score
        if explain:
            gpu_scores(ctx, ev)
    if ev.rejected_at is None and (with_topology or ctx.topology.mode is TopologyMode.HARD):
        _topology(ctx, ev)
        rejection = topology_rejection(ev.topology, ctx.topology)
        if ctx.topology.mode is TopologyMode.HARD and rejection is not None:
            ev.rejected_at, ev.message = "Topology", rejection
    return ev


def not_in_pool_message(pool: str) -> str:
    """The `NodeNotInPool` message of a node without GPUs of the request's pool."""
    return f"no GPU of pool {pool} on node"


def _reject_at_gpu_stage(ev: NodeEvaluation, count: int) -> None:
    total = len(ev.pool_gpus)
    removed_by_stage = [0] * len(GPU_STAGES)
    for stage, _ in ev.failures.values():
        removed_by_stage[stage] += 1
    remaining = total
    for stage, removed in enumerate(removed_by_stage):
        remaining -= removed
        if remaining < count:
            ev.rejected_at = GPU_STAGES[stage]
            if stage == QUOTA_CHECK:
                ev.message = next(iter(ev.failures.values()))[1]
            else:
                ev.message = f"{remaining} of {count} required GPUs left after {GPU_STAGES[stage]}"
            return


def _node_stages(ctx: RequestContext, node: NodeState, ev: NodeEvaluation) -> None:
    request = ctx.request
    if node.hypervisor_index0 is not None and node.hypervisor_index0 <= 0:
        ev.rejected_at = "HypervisorHealth"
        ev.message = f"node agent is down: allocatable index_0 is {node.hypervisor_index0}"
        return
    index = request.pod_index
    if index is not None:
        holder = node.pending_indices.get(index)
        if holder is not None and holder != request.pod_uid:
            record = ctx.allocator.records.get(holder)
            who = record.request.key if record is not None else holder
            ev.rejected_at = "PodIndexBusy"
            ev.message = f"index {index} is held by pending worker {who} on the node"
            return
    settings = ctx.oversubscription
    if settings is not None:
        total_tflops, total_vram = node.total_capacity()
        virtual = virtual_capacity(
            total_tflops, total_vram, node.ram_bytes, node.disk_bytes, settings
        )
        message = _virtual_capacity_failure(ctx, node, ev, virtual)
        if message is not None:
            ev.rejected_at, ev.message = "VirtualCapacity", message


def _virtual_capacity_failure(
    ctx: RequestContext, node: NodeState, ev: NodeEvaluation, virtual: tuple[int, int]
) -> str | None:
    request = ctx.request
    if request.isolation in WHOLE_CARD_MODES:
        best = sorted(ev.valid, key=lambda g: (-g.capacity_tflops, g.name))[: request.count]
        tflops, vram = shared_effective_limit([(g.capacity_tflops, g.capacity_vram) for g in best])
    else:
        # A percent value is converted with the largest capacity among the valid GPUs.
        largest = max(g.capacity_tflops for g in ev.valid)
        tflops, vram = effective_limit(request, [largest])
    if node.limit_tflops + tflops > virtual[0]:
        return (
            f"limits tflops {format_milli(node.limit_tflops + tflops)} would exceed virtual "
            f"capacity {format_milli(virtual[0])}"
        )
    if node.limit_vram + vram > virtual[1]:
        return (
            f"limits vram {format_bytes(node.limit_vram + vram)} would exceed virtual "
            f"capacity {format_bytes(virtual[1])}"
        )
    return None


def _score(ctx: RequestContext, node: NodeState, ev: NodeEvaluation) -> None:
    weights = ctx.args.weights
    node_avail = node_level_uses_available(ctx.placement_mode)
    terms = ev.node_terms
    for gpu in node.gpus:
        if ctx.isolation_compatible(gpu) is None:
            terms[gpu.name] = node_term(gpu, node_avail, weights)
    ev.node_score = sum(terms.values()) // len(terms) if terms else 0


def gpu_scores(ctx: RequestContext, ev: NodeEvaluation) -> dict[str, int]:
    """S(g, gpu) of the node's valid GPUs (computed once per evaluation)."""
    if ev.gpu_scores or not ev.valid:
        return ev.gpu_scores
    weights = ctx.args.weights
    use_available = gpu_level_uses_available(ctx.placement_mode)
    for gpu in ev.valid:
        ev.gpu_scores[gpu.name] = gpu_score(gpu, use_available, weights)
    return ev.gpu_scores


def _topology(ctx: RequestContext, ev: NodeEvaluation) -> None:
    if ev.topology_evaluated:
        return
    ev.topology_evaluated = True
    if not ev.valid:
        return
    scores = gpu_scores(ctx, ev)
    candidates = [
        TopologyGPU(
            name=g.name,
            uuid=g.uuid,
            numa_node=g.numa_node,
            peers=g.peers,
            placement_score=scores[g.name],
        )
        for g in ev.valid
    ]
    ev.topology = plan_topology(candidates, ctx.request.count, ctx.topology)


def choose_gpus(ctx: RequestContext, ev: NodeEvaluation) -> tuple[tuple[str, ...], str]:
    """GPUs for the pod on a feasible node and how they were chosen (§7.4)."""
    count = ctx.request.count
    _topology(ctx, ev)
    plan = ev.topology
    if plan is not None and len(plan.gpus) == count:
        return plan.gpus, "topology"
    if count == len(ev.valid):
        return tuple(g.name for g in ev.valid), "all-valid"
    scores = gpu_scores(ctx, ev)
    ranked = sorted(ev.valid, key=lambda g: (-scores[g.name], g.name))
    return tuple(g.name for g in ranked[:count]), "score"
