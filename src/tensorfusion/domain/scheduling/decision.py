"""One scheduling decision: native filters, GPU stages, combined score, node and GPU choice.

`decide` is what the extender's `filter` and the simulator run; `explain` evaluates every
candidate node and returns the `/api/simulate-schedule` body (scheduling.md §7.6, §16.1).
Both share `evaluate_node`, so an explanation always agrees with the decision.
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

from tensorfusion.domain.allocation_request import AllocationRequest
from tensorfusion.domain.allocator.allocator import Allocator
from tensorfusion.domain.quantities import format_bytes
from tensorfusion.domain.scheduling.explanation_json import (
    node_json,
    quota_json,
    request_json,
    stage_report,
)
from tensorfusion.domain.scheduling.filter_chain import (
    NodeEvaluation,
    choose_gpus,
    evaluate_node,
    not_in_pool_message,
)
from tensorfusion.domain.scheduling.node_index import NodeScoreIndex
from tensorfusion.domain.scheduling.placement_modes import Choice
from tensorfusion.domain.scheduling.request_context import RequestContext
from tensorfusion.domain.scheduling.scheduler_config import SchedulingProfile, ScoreWeights

__all__ = [
    "NOT_SELECTED",
    "Decision",
    "NativeView",
    "ScoreWeights",
    "decide",
    "decide_indexed",
    "explain",
]

_FEW = 16
"""Up to this many allowed nodes are looked up one by one instead of walking the buckets."""

NOT_SELECTED: Final = "not selected: lower score"
"""Why a feasible node, or a node the fast path never had to open, was not chosen (§15)."""


class NativeView(Protocol):
    """The native-plugin view of one pod: rejection per node and the NodeResourcesFit score."""

    def rejection(self, node: str) -> tuple[str, str] | None:
        """(plugin, kube-scheduler reason) of the first native filter that fails, or None."""

    def fit(self, node: str) -> int:
        """NodeResourcesFit score 0..100 of the pod on the node."""

    def fit_bound(self) -> int:
        """An upper bound of `fit` over every node (100 when nothing better is known)."""

    def admits(self, node: str) -> bool:
        """Whether every native filter passes on the node (`rejection` is None), without
        building the reason text."""

    def admitted_fit(self, node: str) -> int:
        """`fit` when the node `admits` the pod, else -1 (one lookup for both)."""

    def fits_somewhere(self) -> bool:
        """False when the native filters surely reject the pod on every node (True when
        nothing better is known)."""

    def cpu_request(self) -> int:
        """The pod's CPU request in millicores."""

    def cpu_free(self, node: str) -> int | None:
        """The node's allocatable CPU less the requests bound to it (None: unknown)."""


@dataclass(slots=True)
class Decision:
    """The chosen node and GPUs, or why nothing fits, and why each other node lost.

    `rejections` holds the stage message of every node that was examined and rejected; any
    other candidate lost on score (`rejection_message`).
    """

    node: str | None
    gpus: tuple[str, ...]
    selection: str | None
    message: str | None
    combined: int = 0
    rejections: dict[str, str] = field(default_factory=dict)

    @property
    def schedulable(self) -> bool:
        """Whether a node was chosen."""
        return self.node is not None

    def rejection_message(self, node: str) -> str:
        """Why `node` was not chosen: its stage message, else `not selected: lower score`."""
        return self.rejections.get(node, NOT_SELECTED)


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
    *,
    profile: SchedulingProfile,
) -> Decision:
    """Pick the node with the best combined score and its GPUs; nothing is changed."""
    ctx = RequestContext.build(allocator, request, profile)
    _observe(ctx, native)
    return _evaluate_all(ctx, native, candidates, explain=False).decision


@dataclass(slots=True)
class _Evaluated:
    decision: Decision
    native_rejections: dict[str, tuple[str, str]]
    evaluations: dict[str, NodeEvaluation]


def _evaluate_all(
    ctx: RequestContext,
    native: NativeView,
    candidates: Iterable[str],
    explain: bool,
) -> _Evaluated:
    """Evaluate every candidate node and choose (§7.6); with `explain`, keep every outcome."""
    best: tuple[int, int, str] | None = None
    best_ev: NodeEvaluation | None = None
    rejected: Counter[str] = Counter()
    evaluated = 0
    nodes = ctx.allocator.nodes
    weights = ctx.profile.weights
    wfit, wgpu = weights.node_resources_fit, weights.gpu_resources_fit
    native_rejections: dict[str, tuple[str, str]] = {}
    evaluations: dict[str, NodeEvaluation] = {}
    messages: dict[str, str] = {}
    algorithm = ctx.placement.algorithm
    feasible: list[tuple[NodeEvaluation, int]] = []
    for name in candidates:
        evaluated += 1
        native_rejection = native.rejection(name)
        if native_rejection is not None:
            rejected[native_rejection[0]] += 1
            messages[name] = native_rejection[1]
            if explain:
                native_rejections[name] = native_rejection
            continue
        node = nodes.get(name)
        if node is None:
            rejected["NodeNotInPool"] += 1
            messages[name] = not_in_pool_message(ctx.request.pool)
            continue
        ev = evaluate_node(ctx, node, explain=explain, with_topology=explain)
        if explain:
            evaluations[name] = ev
        if ev.rejected_at is not None:
            rejected[ev.rejected_at] += 1
            messages[name] = ev.message or ev.rejected_at
            continue
        fit = native.fit(name)
        if algorithm is not None:
            feasible.append((ev, fit))
            continue
        key = (wfit * fit + wgpu * ev.node_score, ev.node_score, name)
        if _better(key, best):
            best, best_ev = key, ev
    choice = algorithm.choose(ctx, feasible, weights, native) if algorithm is not None else None
    if choice is not None:
        decision = _chosen(choice, messages)
    elif best is None or best_ev is None:
        message = unschedulable_message(evaluated, rejected)
        decision = Decision(None, (), None, message, rejections=messages)
    else:
        gpus, selection = choose_gpus(ctx, best_ev)
        decision = Decision(best[2], gpus, selection, None, best[0], messages)
    return _Evaluated(decision, native_rejections, evaluations)


def _observe(ctx: RequestContext, native: NativeView) -> None:
    """Hand the arrival to the mode's own algorithm, if it has one."""
    algorithm = ctx.placement.algorithm
    if algorithm is not None:
        algorithm.observe(ctx, native)


def _chosen(choice: Choice, messages: dict[str, str]) -> Decision:
    """The decision of a placement mode's own choice."""
    return Decision(choice.node, choice.gpus, choice.selection, None, choice.combined, messages)


def decide_indexed(
    index: NodeScoreIndex,
    request: AllocationRequest,
    native: NativeView,
    *,
    profile: SchedulingProfile,
    allowed: Collection[str] | None = None,
    reasons: bool = True,
) -> Decision:
    """`decide` over the pool's nodes (or those in `allowed`), walking them by score bound.

    Chooses exactly what `decide` chooses: a node is skipped only when its bound, with the
    best possible fit, cannot reach the best combined score found so far. With `reasons`,
    every node examined and rejected gets its stage message in `rejections` (nodes never
    examined lost on score); without, an unschedulable pod gets no message at all (saving
    a full scan), no reason text is built, and a pod that the pool's free GPU amounts or the
    nodes' free CPU, memory and pod slots rule out is turned down without opening a node.
    """
    fit_weights = profile.gpu_fit.weights
    if index.weights != fit_weights:
        raise ValueError(
            f"node index weights {index.weights} differ from the plugin weights {fit_weights}"
        )
    index.sync()
    allocator = index.allocator
    ctx = RequestContext.build(allocator, request, profile)
    _observe(ctx, native)
    if ctx.quota_rejection is not None:
        if not reasons:
            return Decision(None, (), None, ctx.quota_rejection)
        return _full_scan(allocator, request, native, allowed, profile)
    count = request.count
    pool = request.pool
    need_vram = request.request.vram_bytes
    top: int | None = None
    if not reasons:
        top = index.top_holding(pool, count, request.request)
        if top is None or not native.fits_somewhere():
            return Decision(None, (), None, None)
    algorithm = ctx.placement.algorithm
    if algorithm is not None:
        if reasons:  # the scan gives every node its reason; it evaluates all nodes anyway
            return _full_scan(allocator, request, native, allowed, profile)
        choice = algorithm.decide_fast(index, ctx, native, allowed, profile.weights)
        return Decision(None, (), None, None) if choice is None else _chosen(choice, {})
    fit_bound = native.fit_bound()
    nodes = allocator.nodes
    wfit, wgpu = profile.weights.node_resources_fit, profile.weights.gpu_resources_fit
    rejections: dict[str, str] = {}
    rejection, admitted_fit, fit_of = native.rejection, native.admitted_fit, native.fit
    if allowed is not None and not isinstance(allowed, set | frozenset | dict):
        allowed = frozenset(allowed)  # membership is tested per node
    if reasons and allowed is not None:
        members = index.members(pool)
        for name in allowed:
            if name not in members:
                native_rejection = rejection(name)
                rejections[name] = (
                    native_rejection[1] if native_rejection else not_in_pool_message(pool)
                )
    # Best-first search over candidates keyed (−combined, −node score, name). Native filters
    # and fit are applied as a bucket is opened; the node score is the index's bound, exact
    # for most nodes, else made exact once the candidate reaches the top. A candidate is
    # chosen once its key is exact and no unopened bucket can beat it.
    heap: list[tuple[int, int, str, bool, int]] = []
    # Without reasons over the whole pool, the next bucket is only computed (its nodes checked
    # for compute) once the best candidate cannot beat the next bucket holding the VRAM.
    lazy = not reasons and (allowed is None or len(allowed) > _FEW)
    if not reasons and not lazy and allowed is not None:
        buckets = index.ordered_among(pool, allowed, count, need_vram, request.request)
    else:
        # With reasons, nodes short of compute are opened so that they get their stage message.
        compute = None if reasons else request.request
        buckets = index.ordered(pool, count, need_vram, every_bucket=reasons, compute=compute)
    # Lazily, the first bucket to beat is the top one holding the VRAM (`top_holding`).
    upcoming: tuple[int, list[str]] | None = (
        (top, []) if lazy and top is not None else next(buckets, None)
    )
    exact = index.exact_nodes(pool)
    while True:
        if heap and (
            upcoming is None or _beats_bucket(heap[0], upcoming[0], wgpu, wfit, fit_bound)
        ):
            negative, negative_score, name, known, fit = heapq.heappop(heap)
            ev = evaluate_node(ctx, nodes[name], node_score=-negative_score if known else None)
            if ev.rejected_at is not None:
                if reasons:
                    rejections[name] = ev.message or ev.rejected_at
                continue
            if not known:
                combined = wfit * fit + wgpu * ev.node_score
                heapq.heappush(heap, (-combined, -ev.node_score, name, True, fit))
                continue
            gpus, selection = choose_gpus(ctx, ev)
            return Decision(name, gpus, selection, None, -negative, rejections)
        if upcoming is None:
            break
        if lazy:
            opened = next(buckets, None)
            if opened is None:
                upcoming = None
                continue
            bound, names = opened
            after = index.next_bound(pool, bound, count, need_vram)
            upcoming = None if after is None else (after, [])
        else:
            bound, names = upcoming
            upcoming = next(buckets, None)
        if reasons:
            _reject_short_of_vram(index, pool, bound, names, allowed, count, need_vram,
                                  rejections)  # fmt: skip
        if lazy and allowed is None:
            # The common case spelled out: no reasons, the whole pool.
            base = wgpu * bound
            for name in names:
                fit = admitted_fit(name)
                if fit >= 0:
                    heapq.heappush(heap, (-(wfit * fit + base), -bound, name, name in exact, fit))
            continue
        for name in names:
            if allowed is not None and name not in allowed:
                continue
            if reasons:
                native_rejection = rejection(name)
                if native_rejection is not None:
                    rejections[name] = native_rejection[1]
                    continue
                fit = fit_of(name)
            else:
                fit = admitted_fit(name)
                if fit < 0:
                    continue
            heapq.heappush(heap, (-(wfit * fit + wgpu * bound), -bound, name, name in exact, fit))
    if not reasons:
        return Decision(None, (), None, None)
    return _full_scan(allocator, request, native, allowed, profile)


def _reject_short_of_vram(
    index: NodeScoreIndex,
    pool: str,
    bound: int,
    holding: list[str],
    allowed: Collection[str] | None,
    count: int,
    vram: int,
    rejections: dict[str, str],
) -> None:
    """Message the nodes of an opened bucket that lack `count` GPUs with `vram` free."""
    kept = set(holding)
    for name in index.bucket_members(pool, bound):
        if name not in kept and (allowed is None or name in allowed):
            rejections[name] = (
                f"fewer than {count} GPUs of pool {pool} with {format_bytes(vram)} VRAM free"
            )


def _beats_bucket(
    top: tuple[int, int, str, bool, int], bound: int, wgpu: int, wfit: int, fit_bound: int
) -> bool:
    """Whether the best candidate surely outranks every node of buckets at or below `bound`."""
    upper = wgpu * bound + wfit * fit_bound
    combined, score = -top[0], -top[1]
    return combined > upper or (combined == upper and score > bound)


def _full_scan(
    allocator: Allocator,
    request: AllocationRequest,
    native: NativeView,
    allowed: Collection[str] | None,
    profile: SchedulingProfile,
) -> Decision:
    names = sorted(allocator.nodes) if allowed is None else sorted(allowed)
    return decide(allocator, request, native, names, profile=profile)


def unschedulable_message(total: int, rejected: Counter[str]) -> str:
    """`0/<n> nodes are available: ` + count per rejection stage, sorted by name."""
    parts = ", ".join(f"{n} {stage}" for stage, n in sorted(rejected.items()))
    return f"0/{total} nodes are available: {parts}."


def explain(
    allocator: Allocator,
    request: AllocationRequest,
    native: NativeView,
    candidates: Sequence[str],
    *,
    profile: SchedulingProfile,
) -> dict[str, Any]:
    """The `request`, `quota`, `result`, `stages`, `skippedStages` and `nodes` of §16.1."""
    ctx = RequestContext.build(allocator, request, profile)
    names = sorted(set(candidates))
    outcome = _evaluate_all(ctx, native, names, explain=True)
    decision, evaluations = outcome.decision, outcome.evaluations
    native_rejections = outcome.native_rejections
    stages, skipped = stage_report(ctx, evaluations)
    nodes_json = [
        node_json(ctx, name, evaluations.get(name), native_rejections.get(name), native,
                   decision)
        for name in names
    ]  # fmt: skip
    return {
        "request": request_json(ctx),
        "quota": quota_json(ctx),
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
