"""The GPU filter chain and node stages of one request on one node (scheduling.md §4-§7).

`evaluate_node` is the single implementation used by the fast scheduling path, by `filter`
and by the explanation of `simulate-schedule`; `explain=True` only adds the reason texts.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tensorfusion.domain.allocator.gpu_state import WHOLE_CARD_MODES, GPUState
from tensorfusion.domain.allocator.oversubscription import (
    effective_limit,
    limits_over_virtual,
    shared_effective_limit,
    virtual_capacity,
)
from tensorfusion.domain.allocator.records import NodeState
from tensorfusion.domain.scheduling.gpu_filters import (
    GPU_STAGES,
    QUOTA_POSITION,
    isolation_compatible,
)
from tensorfusion.domain.scheduling.placement import (
    gpu_score,
    node_term,
)
from tensorfusion.domain.scheduling.request_context import RequestContext
from tensorfusion.domain.topology import (
    TopologyGPU,
    TopologyPlan,
    plan_topology,
    topology_rejection,
)
from tensorfusion.domain.vocabulary import (
    TopologyMode,
)

__all__ = [
    "NodeEvaluation",
    "choose_gpus",
    "evaluate_node",
    "gpu_scores",
    "node_health_failure",
    "not_in_pool_message",
]


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
    survivors: list[GPUState] = []
    if ctx.quota_rejection is not None:
        for gpu in pool_gpus:
            failures[gpu.name] = (QUOTA_POSITION, ctx.quota_rejection)
    else:
        checks = ctx.gpu_checks
        for gpu in pool_gpus:
            for position, check in checks:
                reason = check(ctx, gpu, explain)
                if reason is not None:
                    failures[gpu.name] = (position, reason)
                    break
            else:
                survivors.append(gpu)
    for position, survivor_check in ctx.survivor_checks:
        text = survivor_check(ctx, node, survivors)
        if text is not None:
            for gpu in survivors:
                failures[gpu.name] = (position, text)
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
            if stage == QUOTA_POSITION:
                ev.message = next(iter(ev.failures.values()))[1]
            else:
                ev.message = f"{remaining} of {count} required GPUs left after {GPU_STAGES[stage]}"
            return


def node_health_failure(ctx: RequestContext, node: NodeState) -> tuple[str, str] | None:
    """The `HypervisorHealth` and `PodIndexBusy` node stages: (stage, message) or None."""
    if node.hypervisor_index0 is not None and node.hypervisor_index0 <= 0:
        message = f"node agent is down: allocatable index_0 is {node.hypervisor_index0}"
        return "HypervisorHealth", message
    request = ctx.request
    index = request.pod_index
    if index is not None:
        holder = node.pending_indices.get(index)
        if holder is not None and holder != request.pod_uid:
            record = ctx.allocator.records.get(holder)
            who = record.request.key if record is not None else holder
            return "PodIndexBusy", f"index {index} is held by pending worker {who} on the node"
    return None


def _node_stages(ctx: RequestContext, node: NodeState, ev: NodeEvaluation) -> None:
    health = node_health_failure(ctx, node)
    if health is not None:
        ev.rejected_at, ev.message = health
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
    return limits_over_virtual(node.limit_tflops + tflops, node.limit_vram + vram, virtual)


def _score(ctx: RequestContext, node: NodeState, ev: NodeEvaluation) -> None:
    weights = ctx.profile.gpu_fit.weights
    node_avail = ctx.placement.node_by_available
    terms = ev.node_terms
    for gpu in node.gpus:
        if isolation_compatible(ctx, gpu):
            terms[gpu.name] = node_term(gpu, node_avail, weights)
    ev.node_score = sum(terms.values()) // len(terms) if terms else 0


def gpu_scores(ctx: RequestContext, ev: NodeEvaluation) -> dict[str, int]:
    """S(g, gpu) of the node's valid GPUs (computed once per evaluation)."""
    if ev.gpu_scores or not ev.valid:
        return ev.gpu_scores
    weights = ctx.profile.gpu_fit.weights
    use_available = ctx.placement.gpu_by_available
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
