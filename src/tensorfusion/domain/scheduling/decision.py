"""One scheduling decision: native filters, GPU stages, combined score, node and GPU choice.

`decide` is what the extender's `filter` and the simulator run; `explain` evaluates every
candidate node and returns the `/api/simulate-schedule` body (scheduling.md §7.6, §16.1).
Both share `evaluate_node`, so an explanation always agrees with the decision.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from tensorfusion.domain.allocation_request import AllocationRequest
from tensorfusion.domain.allocator.allocator import Allocator
from tensorfusion.domain.allocator.filter_chain import (
    GPU_STAGES,
    PASSED,
    GPUSchedulingArgs,
    NodeEvaluation,
    RequestContext,
    choose_gpus,
    evaluate_node,
)

__all__ = ["Decision", "NativeView", "ScoreWeights", "decide", "explain"]


class NativeView(Protocol):
    """The native-plugin view of one pod: rejection per node and the NodeResourcesFit score."""

    def rejection(self, node: str) -> tuple[str, str] | None:
        """(plugin, kube-scheduler reason) of the first native filter that fails, or None."""

    def fit(self, node: str) -> int:
        """NodeResourcesFit score 0..100 of the pod on the node."""


@dataclass(frozen=True, slots=True)
class ScoreWeights:
    """Score weights of NodeResourcesFit and GPUResourcesFit in the profile (§7.6)."""

    fit: int = 1
    gpu: int = 1


@dataclass(slots=True)
class Decision:
    """The chosen node and GPUs, or why nothing fits."""

    node: str | None
    gpus: tuple[str, ...]
    selection: str | None
    message: str | None
    evaluation: NodeEvaluation | None = None
    combined: int = 0
    fit: int = 0
    evaluated_nodes: int = 0

    @property
    def schedulable(self) -> bool:
        """Whether a node was chosen."""
        return self.node is not None


def _better(a: tuple[int, int, str], b: tuple[int, int, str] | None) -> bool:
    """Higher combined wins, then higher node score, then node name ascending."""
    if b is None:
        return True
    if a[0] != b[0]:
        return a[0] > b[0]
    if a[1] != b[1]:
        return a[1] > b[1]
    return a[2] < b[2]


def decide(
    allocator: Allocator,
    request: AllocationRequest,
    native: NativeView,
    candidates: Iterable[str],
    args: GPUSchedulingArgs,
    weights: ScoreWeights,
) -> Decision:
    """Pick the node with the best combined score and its GPUs; nothing is changed."""
    ctx = RequestContext.build(allocator, request, args)
    best: tuple[int, int, str] | None = None
    best_ev: NodeEvaluation | None = None
    best_fit = 0
    rejected: Counter[str] = Counter()
    evaluated = 0
    nodes = allocator.nodes
    count = request.count
    for name in candidates:
        evaluated += 1
        node = nodes.get(name)
        native_rejection = native.rejection(name)
        if native_rejection is not None:
            rejected[native_rejection[0]] += 1
            continue
        if node is None:
            rejected["NodeNotInPool"] += 1
            continue
        if ctx.quota_rejection is None and not _may_fit(ctx, node, count):
            rejected[_cheap_reason(ctx, node)] += 1
            continue
        ev = evaluate_node(ctx, node)
        if ev.rejected_at is not None:
            rejected[ev.rejected_at] += 1
            continue
        fit = native.fit(name)
        key = (weights.fit * fit + weights.gpu * ev.node_score, ev.node_score, name)
        if _better(key, best):
            best, best_ev, best_fit = key, ev, fit
    if best is None or best_ev is None:
        return Decision(None, (), None, unschedulable_message(evaluated, rejected), None, 0, 0,
                        evaluated)  # fmt: skip
    gpus, selection = choose_gpus(ctx, best_ev)
    return Decision(best[2], gpus, selection, None, best_ev, best[0], best_fit, evaluated)


def _may_fit(ctx: RequestContext, node: Any, count: int) -> bool:
    """Cheap necessary condition: `count` GPUs of the pool with enough effective VRAM."""
    need = ctx.request.request.vram_bytes
    pool = ctx.request.pool
    enough = 0
    for gpu in node.gpus:
        if gpu.pool == pool and gpu.available_vram - gpu.assumed_vram >= need:
            enough += 1
            if enough >= count:
                return True
    return False


def _cheap_reason(ctx: RequestContext, node: Any) -> str:
    """The rejection `evaluate_node` would report for a node `_may_fit` excluded."""
    return evaluate_node(ctx, node).rejected_at or "GPUResourceFilter"


def unschedulable_message(total: int, rejected: Counter[str]) -> str:
    """`0/<n> nodes are available: ` + count per rejection stage, sorted by name."""
    parts = ", ".join(f"{n} {stage}" for stage, n in sorted(rejected.items()))
    return f"0/{total} nodes are available: {parts}."


def explain(
    allocator: Allocator,
    request: AllocationRequest,
    native: NativeView,
    candidates: Sequence[str],
    args: GPUSchedulingArgs,
    weights: ScoreWeights,
) -> dict[str, Any]:
    """The `request`, `quota`, `result`, `stages`, `skippedStages` and `nodes` of §16.1."""
    ctx = RequestContext.build(allocator, request, args)
    names = sorted(set(candidates))
    evaluations: dict[str, NodeEvaluation] = {}
    native_rejections: dict[str, tuple[str, str]] = {}
    for name in names:
        rejection = native.rejection(name)
        if rejection is not None:
            native_rejections[name] = rejection
            continue
        node = allocator.nodes.get(name)
        if node is not None:
            evaluations[name] = evaluate_node(ctx, node, explain=True, with_topology=True)
    decision = decide(allocator, request, native, names, args, weights)
    stages, skipped = _stage_report(ctx, evaluations)
    nodes_json = [
        _node_json(ctx, name, evaluations.get(name), native_rejections.get(name), native,
                   weights, decision)
        for name in names
    ]  # fmt: skip
    return {
        "request": _request_json(ctx),
        "quota": _quota_json(ctx),
        "result": {
            "schedulable": decision.schedulable,
            "node": decision.node,
            "gpus": list(decision.gpus),
            "gpuSelection": decision.selection,
            "message": decision.message,
        },
        "stages": stages,
        "skippedStages": skipped,
        "nodes": nodes_json,
    }


def _request_json(ctx: RequestContext) -> dict[str, Any]:
    r = ctx.request
    return {
        "pool": r.pool,
        "count": r.count,
        "isolation": r.isolation.value,
        "qos": r.qos.value,
        "requests": r.request.to_json(),
        "limits": r.limit.to_json(),
        "gpuModel": r.gpu_model,
        "vendor": r.vendor,
        "gpuIndices": list(r.gpu_indices),
        "placementMode": ctx.placement_mode.value,
        "topology": {
            "mode": ctx.topology.mode.value,
            "maxAllowedTier": ctx.topology.max_allowed_tier,
            "source": ctx.topology.source.value,
        },
    }


def _quota_json(ctx: RequestContext) -> dict[str, Any]:
    quota = ctx.allocator.quotas.get(ctx.request.namespace)
    return {
        "namespace": ctx.request.namespace,
        "quota": None if quota is None else quota.spec.name,
        "checked": ctx.quota_checked,
        "allowed": ctx.quota_rejection is None,
        "message": ctx.quota_rejection,
    }


def _stage_report(
    ctx: RequestContext, evaluations: dict[str, NodeEvaluation]
) -> tuple[list[dict[str, Any]], list[str]]:
    removed: list[list[dict[str, str]]] = [[] for _ in GPU_STAGES]
    total = 0
    for name in sorted(evaluations):
        ev = evaluations[name]
        total += len(ev.pool_gpus)
        for gpu in ev.pool_gpus:
            failure = ev.failures.get(gpu.name)
            if failure is not None and failure[0] != PASSED:
                removed[failure[0]].append({"gpu": gpu.name, "node": name, "reason": failure[1]})
    stages: list[dict[str, Any]] = []
    skipped: list[str] = []
    remaining = total
    ended = False
    for index, stage in enumerate(GPU_STAGES):
        if ended or not ctx.active[index]:
            skipped.append(stage)
            continue
        out = remaining - len(removed[index])
        stages.append({"stage": stage, "in": remaining, "out": out, "removed": removed[index]})
        remaining = out
        if out == 0:
            ended = True
    return stages, skipped


def _node_json(
    ctx: RequestContext,
    name: str,
    ev: NodeEvaluation | None,
    native_rejection: tuple[str, str] | None,
    native: NativeView,
    weights: ScoreWeights,
    decision: Decision,
) -> dict[str, Any]:
    selected = decision.node == name
    if native_rejection is not None or ev is None:
        plugin, reason = native_rejection or ("NodeNotInPool", "node has no GPUs")
        return {
            "node": name, "selected": False, "rejectedAt": plugin, "message": reason,
            "score": None, "topology": None, "gpus": [],
        }  # fmt: skip
    score = None
    message = ev.message
    if ev.rejected_at is None:
        fit = native.fit(name)
        score = {
            "nodeResourcesFit": fit,
            "gpuPlacement": ev.node_score,
            "combined": weights.fit * fit + weights.gpu * ev.node_score,
        }
        if not selected:
            message = "not selected: lower score"
    topology = None
    if ev.rejected_at is None or ev.rejected_at == "Topology":
        plan = ev.topology
        topology = {
            "tier": plan.tier if plan is not None else 3,
            "satisfied": plan is not None and plan.tier <= ctx.topology.max_allowed_tier,
            "bestGPUs": list(plan.gpus) if plan is not None else [],
        }
    feasible = ev.rejected_at is None
    gpus = []
    for gpu in ev.pool_gpus:
        failure = ev.failures.get(gpu.name)
        gpus.append({
            "gpu": gpu.name,
            "phase": gpu.phase.value,
            "rejectedAt": None if failure is None else GPU_STAGES[failure[0]],
            "reason": None if failure is None else failure[1],
            "nodeLevelScore": ev.node_terms.get(gpu.name) if feasible else None,
            "gpuLevelScore": ev.gpu_scores.get(gpu.name) if feasible and failure is None else None,
        })  # fmt: skip
    return {
        "node": name, "selected": selected, "rejectedAt": ev.rejected_at, "message": message,
        "score": score, "topology": topology, "gpus": gpus,
    }  # fmt: skip
