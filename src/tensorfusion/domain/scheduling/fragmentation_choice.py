"""The `FragmentationAware` placement mode (ours; scheduling.md "FragmentationAware").

After Fragmentation Gradient Descent (Weng et al., USENIX ATC 2023): among the feasible
nodes, place the pod where it increases the node's expected fragmentation
(`scheduling/fragmentation.py`) against the pool's learned request mix the least; ties go to
the higher combined score (§7.6, node score as CompactFirst), then the node name. On the node,
a single GPU is the one with the least increase (then the fuller GPU, then the name); several
GPUs are the topology plan's when it names `count` GPUs, otherwise the `count` GPUs with the
least single-GPU increase. `decide`, `decide_indexed` and `explain` all choose through
`choose`, and `decide`/`decide_indexed` record each arrival with `observe`, so the simulator
and the extender learn and choose the same way. Every feasible node is evaluated: the score
is not bounded by the index's buckets, which only skip nodes without `count` GPUs with the
VRAM and compute asked; a node's evaluation and pick are kept per request class in the
index's node memo until the node changes. With the native view's CPU (`CPURoom`), the pod's
CPU and the classes' CPU count too, and `cpu_only_cost` ranks nodes for pods without GPUs.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, replace
from typing import Final, cast

from tensorfusion.domain.allocation_request import AllocationRequest
from tensorfusion.domain.allocator.allocator import Allocator
from tensorfusion.domain.allocator.gpu_state import WHOLE_CARD_MODES
from tensorfusion.domain.allocator.workload_mix import MixSnapshot
from tensorfusion.domain.scheduling.filter_chain import NodeEvaluation, choose_gpus, evaluate_node
from tensorfusion.domain.scheduling.fragmentation import (
    CPUChange,
    GPUKey,
    gpu_key,
    node_fragments,
    placement_delta,
)
from tensorfusion.domain.scheduling.node_index import NodeScoreIndex
from tensorfusion.domain.scheduling.placement import PlacementWeights
from tensorfusion.domain.scheduling.placement_modes import (
    Choice,
    CPURoom,
    NativeAdmits,
    PlacementModePlugin,
)
from tensorfusion.domain.scheduling.request_context import RequestContext
from tensorfusion.domain.scheduling.scheduler_config import ScoreWeights
from tensorfusion.domain.vocabulary import PlacementMode

__all__ = [
    "FRAGMENTATION_AWARE",
    "CPUOnlyCost",
    "FragmentationAwareAlgorithm",
    "cpu_only_cost",
    "feasible_indexed",
    "gpus_for",
    "least_fragmenting",
    "request_class_key",
]

_FEW = 16


def gpus_for(
    ctx: RequestContext, ev: NodeEvaluation, mix: MixSnapshot, cpu: CPUChange | None = None
) -> tuple[tuple[str, ...], str, int]:
    """(GPUs, selection, increase of expected fragmentation) for the pod on a feasible node
    (`cpu`: the node's free CPU and the pod's request, None: CPU not considered)."""
    request = ctx.request
    count, need = request.count, request.request
    whole = request.isolation in WHOLE_CARD_MODES
    weights = ctx.profile.gpu_fit.weights
    keys: list[GPUKey] = [gpu_key(g) for g in ev.pool_gpus]
    position = {g.name: i for i, g in enumerate(ev.pool_gpus)}
    if count > 1 or count == len(ev.valid):
        names, selection = choose_gpus(ctx, ev)
        if count == len(ev.valid) or selection == "topology":
            chosen = [position[n] for n in names]
            return names, selection, placement_delta(keys, chosen, need, whole, mix, weights,
                                                      cpu)  # fmt: skip
    ranked: list[tuple[int, int, int, str]] = []
    by_state: dict[GPUKey, int] = {}  # GPUs in the same state give the same increase
    for gpu in ev.valid:
        i = position[gpu.name]
        single = by_state.get(keys[i])
        if single is None:
            single = by_state[keys[i]] = placement_delta(keys, [i], need, whole, mix, weights,
                                                         cpu)  # fmt: skip
        ranked.append((single, keys[i][0], keys[i][1], gpu.name))
    ranked.sort()  # least increase, then the fuller GPU, then the name
    names = tuple(entry[3] for entry in ranked[:count])
    if count == 1:
        return names, "fragmentation", ranked[0][0]
    chosen = [position[n] for n in names]
    return names, "fragmentation", placement_delta(keys, chosen, need, whole, mix, weights, cpu)


def least_fragmenting(
    ctx: RequestContext,
    feasible: Sequence[tuple[NodeEvaluation, int]],
    weights: ScoreWeights,
    room: CPURoom | None = None,
    index: NodeScoreIndex | None = None,
) -> Choice | None:
    """The least-fragmenting placement among feasible (evaluation, fit) pairs, or None;
    with `room`, the pod's CPU and the nodes' free CPU count too. With `index`, each node's
    pick is kept in its memo for later pods of the same class."""
    if not feasible:
        return None
    mix = ctx.allocator.workload_mix(ctx.request.pool).snapshot()
    request = room.cpu_request() if room is not None else 0
    best: tuple[int, int, int, str] | None = None
    best_pick: tuple[tuple[str, ...], str] = ((), "")
    class_key = request_class_key(ctx) if index is not None else None
    for ev, fit in feasible:
        free = room.cpu_free(ev.node) if room is not None else None
        cpu = CPUChange(free, request) if free is not None else None
        if index is not None and class_key is not None:
            memo = index.node_memo(ev.node)
            memo_key = ("pick", class_key, mix.serial, cpu)
            pick = memo.get(memo_key)
            if pick is None:
                pick = memo[memo_key] = gpus_for(ctx, ev, mix, cpu)
            gpus, selection, delta = cast(tuple[tuple[str, ...], str, int], pick)
        else:
            gpus, selection, delta = gpus_for(ctx, ev, mix, cpu)
        combined = weights.node_resources_fit * fit + weights.gpu_resources_fit * ev.node_score
        key = (delta, -combined, -ev.node_score, ev.node)
        if best is None or key < best:
            best, best_pick = key, (gpus, selection)
    assert best is not None
    return Choice(best[3], best_pick[0], best_pick[1], -best[1], best[0])


def request_class_key(ctx: RequestContext) -> AllocationRequest | None:
    """The request without the pod's identity: pods with equal keys get the same evaluation
    on a node whose state did not change, unless the node holds the pod's index for a pending
    worker (None when a quota makes the evaluation depend on more than the node)."""
    request = ctx.request
    if ctx.quota_checked:
        return None
    # The index only matters on a node that holds it for a pending worker: such nodes are
    # evaluated without the memo.
    return replace(request, namespace="", pod_name="", pod_uid="", workload="", pod_index=None)


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
    class_key = request_class_key(ctx)
    pod_index = request.pod_index
    for _, names in buckets:
        for name in names:
            if (allowed is not None and name not in allowed) or not admits.admits(name):
                continue
            node = nodes[name]
            if class_key is None or (pod_index is not None and pod_index in node.pending_indices):
                ev = evaluate_node(ctx, node)
            else:
                memo = index.node_memo(name)
                found = memo.get(("evaluation", class_key))
                if found is None:
                    found = memo["evaluation", class_key] = evaluate_node(ctx, node)
                ev = cast(NodeEvaluation, found)
            if ev.rejected_at is None:
                feasible.append((ev, admits.fit(name)))
    return feasible


@dataclass(frozen=True, slots=True)
class CPUOnlyCost:
    """What a pod without GPUs costs a node's FragmentationAware pools: the increase of their
    expected fragmentation, then the node's free GPU units per free core left (less is
    better: the CPU is taken where the fewest GPUs need it)."""

    delta: int
    units_per_core: int


def cpu_only_cost(
    allocator: Allocator, node: str, cpu: CPUChange, weights: PlacementWeights
) -> CPUOnlyCost | None:
    """The cost of a pod without GPUs that takes `cpu.request` of the node's free CPU (None:
    the node has no FragmentationAware pool)."""
    state = allocator.nodes.get(node)
    if state is None:
        return None
    delta = units = 0
    found = False
    for pool in sorted({g.pool for g in state.gpus}):
        if allocator.pool(pool).placement_mode is not PlacementMode.FRAGMENTATION_AWARE:
            continue
        found = True
        mix = allocator.workload_mix(pool).snapshot()
        keys = [gpu_key(g) for g in state.gpus if g.pool == pool]
        fragments = node_fragments(keys, mix, weights)
        delta += fragments.at(cpu.free - cpu.request) - fragments.at(cpu.free)
        units += fragments.free
    if not found:
        return None
    cores_left = max(cpu.free - cpu.request, 0) // 1000 + 1
    return CPUOnlyCost(delta, units // cores_left)


class FragmentationAwareAlgorithm:
    """Learns the pool's request mix and picks the least-fragmenting node."""

    def observe(self, ctx: RequestContext, room: CPURoom | None) -> None:
        """Record the request's arrival in its pool's mix."""
        cpu = room.cpu_request() if room is not None else 0
        ctx.allocator.workload_mix(ctx.request.pool).observe(ctx.request, cpu)

    def choose(
        self,
        ctx: RequestContext,
        feasible: Sequence[tuple[NodeEvaluation, int]],
        weights: ScoreWeights,
        room: CPURoom | None,
    ) -> Choice | None:
        """The least-fragmenting of the feasible nodes."""
        return least_fragmenting(ctx, feasible, weights, room)

    def decide_fast(
        self,
        index: NodeScoreIndex,
        ctx: RequestContext,
        native: NativeAdmits,
        allowed: Collection[str] | None,
        weights: ScoreWeights,
    ) -> Choice | None:
        """`decide_indexed(reasons=False)` in this mode: the least-fragmenting feasible node."""
        feasible = feasible_indexed(index, ctx, native, allowed)
        return least_fragmenting(ctx, feasible, weights, native, index)


FRAGMENTATION_AWARE: Final = PlacementModePlugin(
    PlacementMode.FRAGMENTATION_AWARE,
    node_by_available=False,
    gpu_by_available=False,
    algorithm=FragmentationAwareAlgorithm(),
)
"""The registered mode (the package's `__init__`)."""
