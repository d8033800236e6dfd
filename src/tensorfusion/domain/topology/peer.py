"""Peer (vendor) evaluator: tier-0 clusters from peer links, else a search over pair tiers (§10)."""

from __future__ import annotations

from collections.abc import Sequence
from math import comb

from tensorfusion.domain.topology.peer_graph import (
    PeerGraph,
    components,
    links_bandwidth,
    pair_matrices,
    set_metrics,
    tier0_links,
)
from tensorfusion.domain.topology.peer_search import peer_search
from tensorfusion.domain.topology.selection import (
    compact_intra,
    placement_rank,
    sorted_names,
    tightest,
)
from tensorfusion.domain.topology.vocabulary import (
    MAX_COMBINATIONS,
    TIER_SAME_INTERCONNECT,
    TIER_SAME_NUMA,
    TIER_UNKNOWN,
    TopologyGPU,
    TopologyPlan,
)

__all__ = ["peer_plan"]


def _name(gpu: TopologyGPU) -> str:
    return gpu.name


def peer_plan(candidates: Sequence[TopologyGPU], count: int, least_damage: bool) -> TopologyPlan:
    """Best plan of `count` GPUs by peer links: one all-tier-0 cluster if any holds count."""
    if count == 1:
        return _peer_single(candidates, least_damage)
    gpus = sorted(candidates, key=_name)  # index order = name order, for the search tie-break
    n = len(gpus)
    adjacency = tier0_links(gpus)
    clusters = components(adjacency)

    fitting: list[list[TopologyGPU]] = []
    for cluster in clusters:
        if len(cluster) < count:
            continue
        mask = sum(1 << i for i in cluster)
        if all((adjacency[i] | 1 << i) == mask for i in cluster):  # every pair is tier 0
            fitting.append([gpus[i] for i in cluster])
    if fitting:
        chosen, size = tightest(fitting, count)
        return TopologyPlan(
            tier=TIER_SAME_INTERCONNECT,
            gpus=sorted_names(chosen),
            intra=compact_intra(size, count),
            fragmentation=size - count,
            bandwidth=links_bandwidth(chosen),
            reason=f"same-interconnect: all {count} GPUs in tier-0 cluster (cluster size {size})",
            placement=sum(g.placement_score for g in chosen),
            evaluator="peer",
        )

    tiers, bands = pair_matrices(gpus)
    cluster_of = [0] * n
    for cid, cluster in enumerate(clusters):
        for i in cluster:
            cluster_of[i] = cid
    graph = PeerGraph(gpus, tiers, bands, clusters, cluster_of)
    total = comb(n, count)
    if total <= MAX_COMBINATIONS:
        return peer_search(graph, list(range(n)), count, f"{total} combinations")

    def cluster_order(cluster: list[int]) -> tuple[int, bool, int, int]:
        # Largest clusters first, clusters without peer data last; ties: placement, name.
        return (
            -len(cluster),
            not any(gpus[i].peers for i in cluster),
            -sum(gpus[i].placement_score for i in cluster),
            cluster[0],
        )

    ordered = sorted(clusters, key=cluster_order)
    kept: list[int] = []
    for cluster in ordered:
        kept.extend(cluster)
        if len(kept) >= count:
            break
    pruned = comb(len(kept), count)
    if len(kept) < n and pruned <= MAX_COMBINATIONS:
        note = f"pruned to {len(kept)} GPUs of the largest clusters, {pruned} combinations"
        return peer_search(graph, sorted(kept), count, note)
    return _peer_greedy(graph, ordered, count, total)


def _single_tier(gpu: TopologyGPU) -> int:
    if gpu.peers:
        return TIER_SAME_INTERCONNECT
    return TIER_SAME_NUMA if gpu.numa_node >= 0 else TIER_UNKNOWN


def _peer_single(gpus: Sequence[TopologyGPU], least_damage: bool) -> TopologyPlan:
    n = len(gpus)
    sizes = [1] * n
    for component in components(tier0_links(gpus)):
        for i in component:
            sizes[i] = len(component)
    if least_damage and n > 1:
        # Least damage: GPUs without peer data first, then the smallest tier-0 cluster.
        def damage(i: int) -> tuple[bool, int, int, str]:
            g = gpus[i]
            return (bool(g.peers), sizes[i], -g.placement_score, g.name)

        best = min(range(n), key=damage)
        how = "least-damage"
    else:
        best = min(range(n), key=lambda i: placement_rank(gpus[i]))
        how = "best placement"
    gpu, size = gpus[best], sizes[best]
    return TopologyPlan(
        tier=_single_tier(gpu),
        gpus=(gpu.name,),
        intra=100,
        fragmentation=size - 1,
        bandwidth=0,
        reason=f"{how}: single GPU (tier-0 cluster size {size})",
        placement=gpu.placement_score,
        evaluator="peer",
    )


def _peer_greedy(
    graph: PeerGraph, ordered: Sequence[list[int]], count: int, total: int
) -> TopologyPlan:
    """Fill from the largest tier-0 clusters, best placement then name in each."""
    gpus = graph.gpus
    chosen: list[int] = []
    fragmentation = used = 0
    for cluster in ordered:
        taken = min(len(cluster), count - len(chosen))
        chosen.extend(sorted(cluster, key=lambda i: (-gpus[i].placement_score, i))[:taken])
        fragmentation += len(cluster) - taken
        used += 1
        if len(chosen) == count:
            break
    chosen.sort()
    worst, bandwidth = set_metrics(chosen, graph.tiers, graph.bands)
    intra = 80 if len(ordered[0]) >= count else 50  # the largest cluster could hold count
    return TopologyPlan(
        tier=worst,
        gpus=tuple(gpus[i].name for i in chosen),
        intra=intra,
        fragmentation=fragmentation,
        bandwidth=bandwidth,
        reason=(
            f"heuristic: {count} GPUs over {used} tier-0 clusters "
            f"({total} combinations exceed the search limit {MAX_COMBINATIONS})"
        ),
        placement=sum(gpus[i].placement_score for i in chosen),
        evaluator="peer",
        degraded=True,
    )
