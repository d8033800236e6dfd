"""Pairwise relations of the peer evaluator: tier-0 clusters, pair tiers and bandwidths (§10)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tensorfusion.domain.topology.vocabulary import (
    TIER_CROSS_NUMA,
    TIER_SAME_INTERCONNECT,
    TIER_SAME_NUMA,
    TIER_UNKNOWN,
    TopologyGPU,
)

__all__ = [
    "PeerGraph",
    "components",
    "links_bandwidth",
    "pair_matrices",
    "set_metrics",
    "tier0_links",
]


def components(adjacency: Sequence[int]) -> list[list[int]]:
    """Connected components of a graph given as neighbour bitmasks, each in ascending order."""
    seen = 0
    components: list[list[int]] = []
    for i in range(len(adjacency)):
        if seen >> i & 1:
            continue
        component = frontier = 1 << i
        while frontier:
            reached = 0
            while frontier:
                low = frontier & -frontier
                reached |= adjacency[low.bit_length() - 1]
                frontier ^= low
            frontier = reached & ~component
            component |= reached
        seen |= component
        components.append([k for k in range(i, len(adjacency)) if component >> k & 1])
    return components


def tier0_links(gpus: Sequence[TopologyGPU]) -> list[int]:
    """Tier-0 neighbours of each GPU as bitmasks (a pair is tier 0 if either side says so)."""
    index = {g.uuid: i for i, g in enumerate(gpus) if g.uuid}
    adjacency = [0] * len(gpus)
    for i, g in enumerate(gpus):
        for link in g.peers:
            if link.tier == TIER_SAME_INTERCONNECT:
                j = index.get(link.peer_uuid)
                if j is not None and j != i:
                    adjacency[i] |= 1 << j
                    adjacency[j] |= 1 << i
    return adjacency


def pair_matrices(gpus: Sequence[TopologyGPU]) -> tuple[list[list[int]], list[list[int]]]:
    """Pairwise tiers and bandwidths.

    A pair takes the better (lower) tier its two GPUs report and the higher bandwidth; a tier
    outside 0..3 is unknown (invalid data must not claim NVLink). Pairs still unknown fall back
    to NUMA: 1 same node, 2 different nodes, 3 when either is unknown.
    """
    n = len(gpus)
    index = {g.uuid: i for i, g in enumerate(gpus) if g.uuid}
    tiers = [[TIER_UNKNOWN] * n for _ in range(n)]
    bands = [[0] * n for _ in range(n)]
    for i, g in enumerate(gpus):
        row_t, row_b = tiers[i], bands[i]
        for link in g.peers:
            j = index.get(link.peer_uuid)
            if j is None or j == i:
                continue
            tier = link.tier
            if 0 <= tier < row_t[j]:
                row_t[j] = tiers[j][i] = tier
            band = link.bandwidth
            if band > row_b[j]:
                row_b[j] = bands[j][i] = band
    for i in range(n):
        numa_i = gpus[i].numa_node
        if numa_i < 0:
            continue
        row_t = tiers[i]
        for j in range(i + 1, n):
            if row_t[j] == TIER_UNKNOWN:
                numa_j = gpus[j].numa_node
                if numa_j >= 0:
                    row_t[j] = tiers[j][i] = TIER_SAME_NUMA if numa_i == numa_j else TIER_CROSS_NUMA
    return tiers, bands


def set_metrics(
    chosen: Sequence[int], tiers: list[list[int]], bands: list[list[int]]
) -> tuple[int, int]:
    """Worst pair tier and bandwidth sum of a set of indices."""
    worst = bandwidth = 0
    for x in range(1, len(chosen)):
        i = chosen[x]
        row_t, row_b = tiers[i], bands[i]
        for y in range(x):
            j = chosen[y]
            worst = max(worst, row_t[j])
            bandwidth += row_b[j]
    return worst, bandwidth


def links_bandwidth(chosen: Sequence[TopologyGPU]) -> int:
    """Sum over the pairs of the chosen GPUs of the higher bandwidth either side reports."""
    position = {g.uuid: i for i, g in enumerate(chosen) if g.uuid}
    best: dict[tuple[int, int], int] = {}
    for i, g in enumerate(chosen):
        for link in g.peers:
            j = position.get(link.peer_uuid)
            if j is None or j == i:
                continue
            pair = (i, j) if i < j else (j, i)
            if link.bandwidth > best.get(pair, 0):
                best[pair] = link.bandwidth
    return sum(best.values())


@dataclass(slots=True)
class PeerGraph:
    """Candidates of the peer evaluator, sorted by name, with their pairwise relations."""

    gpus: Sequence[TopologyGPU]
    tiers: list[list[int]]
    bands: list[list[int]]
    clusters: list[list[int]]  # tier-0 clusters, ascending indices
    cluster_of: list[int]
