"""The `FragmentationAware` placement mode (ours; scheduling.md "FragmentationAware").

After Fragmentation Gradient Descent (Weng et al., USENIX ATC 2023): among the feasible
nodes, place the pod where it increases the node's expected fragmentation
(`allocator/fragmentation.py`) against the pool's learned request mix the least; ties go to
the higher combined score (§7.6, node score as CompactFirst), then the node name. On the node,
a single GPU is the one with the least increase (then the fuller GPU, then the name); several
GPUs are the topology plan's when it names `count` GPUs, otherwise the `count` GPUs with the
least single-GPU increase. `decide`, `decide_indexed` and `explain` all choose through
`choose`, and `decide`/`decide_indexed` record each arrival with `observe`, so the simulator
and the extender learn and choose the same way. Every feasible node is evaluated: the score
is not bounded by the index's buckets, which only skip nodes without `count` GPUs with the
VRAM asked.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Protocol

from tensorfusion.domain.allocator.filter_chain import NodeEvaluation, choose_gpus, evaluate_node
from tensorfusion.domain.allocator.fragmentation import (
    GPUKey,
    gpu_key,
    placement_delta,
)
from tensorfusion.domain.allocator.gpu_state import WHOLE_CARD_MODES
from tensorfusion.domain.allocator.request_context import RequestContext
from tensorfusion.domain.allocator.workload_mix import MixSnapshot
from tensorfusion.domain.scheduling.node_index import NodeScoreIndex
from tensorfusion.domain.scheduling.scheduler_config import ScoreWeights
from tensorfusion.domain.vocabulary import PlacementMode

__all__ = ["Choice", "choose", "decide_fast", "feasible_indexed", "gpus_for", "observe"]

_FEW = 16


@dataclass(frozen=True, slots=True)
class Choice:
    """The chosen node, its GPUs, how they were chosen, the combined score and the increase
    of expected fragmentation."""

    node: str
    gpus: tuple[str, ...]
    selection: str
    combined: int
    delta: int


def observe(ctx: RequestContext) -> None:
    """Record the request's arrival in its pool's mix, in FragmentationAware pools."""
    if ctx.placement_mode is PlacementMode.FRAGMENTATION_AWARE:
        ctx.allocator.workload_mix(ctx.request.pool).observe(ctx.request)


def gpus_for(
    ctx: RequestContext, ev: NodeEvaluation, mix: MixSnapshot
) -> tuple[tuple[str, ...], str, int]:
    """(GPUs, selection, increase of expected fragmentation) for the pod on a feasible node."""
    request = ctx.request
    count, need = request.count, request.request
    whole = request.isolation in WHOLE_CARD_MODES
    weights = ctx.args.weights
    keys: list[GPUKey] = [gpu_key(g) for g in ev.pool_gpus]
    position = {g.name: i for i, g in enumerate(ev.pool_gpus)}
    if count > 1 or count == len(ev.valid):
        names, selection = choose_gpus(ctx, ev)
        if count == len(ev.valid) or selection == "topology":
            chosen = [position[n] for n in names]
            return names, selection, placement_delta(keys, chosen, need, whole, mix, weights)
    ranked: list[tuple[int, int, int, str]] = []
    for gpu in ev.valid:
        i = position[gpu.name]
        single = placement_delta(keys, [i], need, whole, mix, weights)
        ranked.append((single, keys[i][0], keys[i][1], gpu.name))
    ranked.sort()  # least increase, then the fuller GPU, then the name
    names = tuple(entry[3] for entry in ranked[:count])
    if count == 1:
        return names, "fragmentation", ranked[0][0]
    chosen = [position[n] for n in names]
    return names, "fragmentation", placement_delta(keys, chosen, need, whole, mix, weights)


def choose(
    ctx: RequestContext, feasible: Sequence[tuple[NodeEvaluation, int]], wfit: int, wgpu: int
) -> Choice | None:
    """The least-fragmenting placement among feasible (evaluation, fit) pairs, or None."""
    if not feasible:
        return None
    mix = ctx.allocator.workload_mix(ctx.request.pool).snapshot()
    best: tuple[int, int, int, str] | None = None
    best_pick: tuple[tuple[str, ...], str] = ((), "")
    for ev, fit in feasible:
        gpus, selection, delta = gpus_for(ctx, ev, mix)
        combined = wfit * fit + wgpu * ev.node_score
        key = (delta, -combined, -ev.node_score, ev.node)
        if best is None or key < best:
            best, best_pick = key, (gpus, selection)
    assert best is not None
    return Choice(best[3], best_pick[0], best_pick[1], -best[1], best[0])


def decide_fast(
    index: NodeScoreIndex,
    ctx: RequestContext,
    native: NativeAdmits,
    allowed: Collection[str] | None,
    weights: ScoreWeights,
) -> Choice | None:
    """`decide_indexed(reasons=False)` in this mode: the least-fragmenting feasible node."""
    feasible = feasible_indexed(index, ctx, native, allowed)
    return choose(ctx, feasible, weights.node_resources_fit, weights.gpu_resources_fit)


def feasible_indexed(
    index: NodeScoreIndex,
    ctx: RequestContext,
    admits: NativeAdmits,
    allowed: Collection[str] | None,
) -> list[tuple[NodeEvaluation, int]]:
    """Every feasible node of the pool (or of `allowed`) with its fit; nodes without `count`
    GPUs holding the VRAM and compute asked are skipped through the index without being opened."""
    request = ctx.request
    pool, count, vram = request.pool, request.count, request.request.vram_bytes
    if allowed is not None and len(allowed) <= _FEW:
        buckets = index.ordered_among(pool, allowed, count, vram, request.request)
    else:
        buckets = index.ordered(pool, count, vram, compute=request.request)
    if allowed is not None and not isinstance(allowed, set | frozenset | dict):
        allowed = frozenset(allowed)  # membership is tested per node
    nodes = index.allocator.nodes
    feasible: list[tuple[NodeEvaluation, int]] = []
    for _, names in buckets:
        for name in names:
            if (allowed is not None and name not in allowed) or not admits.admits(name):
                continue
            ev = evaluate_node(ctx, nodes[name])
            if ev.rejected_at is None:
                feasible.append((ev, admits.fit(name)))
    return feasible


class NativeAdmits(Protocol):
    """The part of the native view the collection needs."""

    def admits(self, node: str) -> bool:
        """Whether every native filter passes on the node."""

    def fit(self, node: str) -> int:
        """NodeResourcesFit score 0..100 of the pod on the node."""
