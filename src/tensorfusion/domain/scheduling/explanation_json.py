"""The JSON pieces of the `/api/simulate-schedule` body (scheduling.md §16.1)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tensorfusion.domain.scheduling.filter_chain import NodeEvaluation
from tensorfusion.domain.scheduling.gpu_filters import GPU_STAGES
from tensorfusion.domain.scheduling.request_context import RequestContext

if TYPE_CHECKING:
    from tensorfusion.domain.scheduling.decision import Decision, NativeView

__all__ = ["node_json", "quota_json", "request_json", "stage_report"]


def request_json(ctx: RequestContext) -> dict[str, Any]:
    """The `request` object: the pool, count, amounts, filters, mode and topology."""
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


def quota_json(ctx: RequestContext) -> dict[str, Any]:
    """The `quota` object: the namespace quota and its verdict."""
    quota = ctx.allocator.quotas.get(ctx.request.namespace)
    return {
        "namespace": ctx.request.namespace,
        "quota": None if quota is None else quota.spec.name,
        "checked": ctx.quota_checked,
        "allowed": ctx.quota_rejection is None,
        "message": ctx.quota_rejection,
    }


def stage_report(
    ctx: RequestContext, evaluations: dict[str, NodeEvaluation]
) -> tuple[list[dict[str, Any]], list[str]]:
    """The `stages` (GPUs in and out per GPU stage) and the `skippedStages`."""
    removed: list[list[dict[str, str]]] = [[] for _ in GPU_STAGES]
    total = 0
    for name in sorted(evaluations):
        ev = evaluations[name]
        total += len(ev.pool_gpus)
        # `failures` holds the removed GPUs in GPU order, stage by stage.
        for gpu_name, (failed_at, reason) in ev.failures.items():
            removed[failed_at].append({"gpu": gpu_name, "node": name, "reason": reason})
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


def node_json(
    ctx: RequestContext,
    name: str,
    ev: NodeEvaluation | None,
    native_rejection: tuple[str, str] | None,
    native: NativeView,
    decision: Decision,
) -> dict[str, Any]:
    """One entry of `nodes`: verdict, scores, topology and per-GPU outcome."""
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
        weights = ctx.profile.weights
        fit = native.fit(name)
        score = {
            "nodeResourcesFit": fit,
            "gpuPlacement": ev.node_score,
            "combined": weights.node_resources_fit * fit
            + weights.gpu_resources_fit * ev.node_score,
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
            "phase": gpu.phase,
            "rejectedAt": None if failure is None else GPU_STAGES[failure[0]],
            "reason": None if failure is None else failure[1],
            "nodeLevelScore": ev.node_terms.get(gpu.name) if feasible else None,
            "gpuLevelScore": ev.gpu_scores.get(gpu.name) if feasible and failure is None else None,
        })  # fmt: skip
    return {
        "node": name, "selected": selected, "rejectedAt": ev.rejected_at, "message": message,
        "score": score, "topology": topology, "gpus": gpus,
    }  # fmt: skip
