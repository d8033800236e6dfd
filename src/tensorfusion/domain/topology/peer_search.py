"""Combination search of the peer evaluator: the best set of GPUs by pair tiers (§10)."""

from __future__ import annotations

from collections.abc import Sequence
from itertools import combinations
from typing import Final

from tensorfusion.domain.topology.peer_graph import PeerGraph
from tensorfusion.domain.topology.selection import MAX_AFFINITY, count_vectors
from tensorfusion.domain.topology.vocabulary import (
    TIER_CROSS_NUMA,
    TIER_SAME_INTERCONNECT,
    TIER_SAME_NUMA,
    TIER_UNKNOWN,
    TopologyPlan,
)

__all__ = ["peer_search"]

_PEER_AFFINITY: Final = (10, 6, 2, 0)  # pair affinity by pair tier 0..3


def _twin_classes(pool: Sequence[int], packed: list[list[int]]) -> list[list[int]]:
    """Partition the pool into GPUs that relate identically to every other GPU of the pool.

    Members of a class are interchangeable for every pair metric (same tier and bandwidth to
    everyone else, and between themselves), so a search may count GPUs per class.
    """
    rows = [[packed[i][k] for k in pool] for i in pool]
    by_profile: dict[tuple[int, ...], list[int]] = {}
    for p, row in enumerate(rows):
        profile = tuple(sorted(row))  # equal for twins: a cheap first cut
        members = by_profile.get(profile)
        if members is None:
            by_profile[profile] = [p]
        else:
            members.append(p)
    classes: list[list[int]] = []
    for members in by_profile.values():
        found: list[list[int]] = []
        for p in members:
            for cls in found:
                q = cls[0]
                mine, theirs = rows[p].copy(), rows[q].copy()
                mine[p] = mine[q] = theirs[p] = theirs[q] = 0
                if mine == theirs:
                    cls.append(p)
                    break
            else:
                found.append([p])
        classes.extend(found)
    return [[pool[p] for p in cls] for cls in classes]


def peer_search(graph: PeerGraph, pool: list[int], count: int, note: str) -> TopologyPlan:
    """Best combination by (worst pair tier, intra, fragmentation, bandwidth, placement, names).

    Each pair is packed into one integer (a counter per tier, the bandwidth above them) so that
    one sum scores a set. GPUs with identical relations are searched as counts per class (as
    for NUMA domains); otherwise every combination is scored.
    """
    gpus, tiers, bands = graph.gpus, graph.tiers, graph.bands
    pairs = count * (count - 1) // 2
    lane = pairs.bit_length() + 1  # a tier counter never overflows into the next one
    band_shift = 4 * lane
    unit = [1 << (lane * tier) for tier in range(4)]
    packed = [
        [(band << band_shift) | unit[tier] for tier, band in zip(row_t, row_b, strict=True)]
        for row_t, row_b in zip(tiers, bands, strict=True)
    ]
    classes = _twin_classes(pool, packed)
    if len(classes) < len(pool):
        return _peer_class_search(graph, classes, packed, count, note)

    decode = _PackedDecoder(lane, pairs)
    cluster_of, sizes = graph.cluster_of, [len(c) for c in graph.clusters]
    placements = [g.placement_score for g in gpus]
    positions = [(x, y) for x in range(1, count) for y in range(x)]
    best_head: tuple[int, int] | None = None
    best_tail: tuple[int, int, int] = (0, 0, 0)
    best: tuple[int, ...] = ()
    for chosen in combinations(pool, count):
        total = sum([packed[chosen[x]][chosen[y]] for x, y in positions])
        head = decode.head(total)
        if best_head is not None and head < best_head:
            continue
        used = {cluster_of[i] for i in chosen}
        tail = (
            count - sum([sizes[c] for c in used]),
            total >> band_shift,
            sum([placements[i] for i in chosen]),
        )
        # Combinations come in name order: on a full tie the earlier one has the smaller names.
        if best_head is None or head > best_head or tail > best_tail:
            best_head, best_tail, best = head, tail, chosen
    assert best_head is not None  # the pool holds at least count GPUs
    return _search_plan(graph, best, best_head, best_tail, note)


class _PackedDecoder:
    """Reads (−worst tier, intra) from a sum of packed pair values."""

    __slots__ = ("half", "lane", "mask", "most")

    def __init__(self, lane: int, pairs: int) -> None:
        self.lane = lane
        self.mask = (1 << lane) - 1
        self.most = pairs * MAX_AFFINITY
        self.half = self.most // 2

    def head(self, total: int) -> tuple[int, int]:
        lane, mask = self.lane, self.mask
        tier0 = total & mask
        tier1 = total >> lane & mask
        tier2 = total >> 2 * lane & mask
        if total >> 3 * lane & mask:
            worst = TIER_UNKNOWN
        elif tier2:
            worst = TIER_CROSS_NUMA
        elif tier1:
            worst = TIER_SAME_NUMA
        else:
            worst = TIER_SAME_INTERCONNECT
        affinity = _PEER_AFFINITY[0] * tier0 + _PEER_AFFINITY[1] * tier1 + _PEER_AFFINITY[2] * tier2
        return (-worst, (affinity * 100 + self.half) // self.most)


def _peer_class_search(
    graph: PeerGraph, classes: list[list[int]], packed: list[list[int]], count: int, note: str
) -> TopologyPlan:
    """The search of `peer_search` over counts per class of interchangeable GPUs.

    Within a class the best members are the top ones by placement then name, which also give
    the smallest sorted names among equals, so each count vector stands for its best sets.
    """
    gpus = graph.gpus
    pairs = count * (count - 1) // 2
    lane = pairs.bit_length() + 1
    band_shift = 4 * lane
    decode = _PackedDecoder(lane, pairs)
    ranked = [sorted(cls, key=lambda i: (-gpus[i].placement_score, i)) for cls in classes]
    sizes = [len(cls) for cls in ranked]
    within = [packed[cls[0]][cls[1]] if len(cls) > 1 else 0 for cls in ranked]
    between = [[packed[a[0]][b[0]] for b in ranked] for a in ranked]
    # A class lies in one tier-0 cluster, or is made of GPUs outside any (cluster id -1).
    cluster_sizes = [len(c) for c in graph.clusters]
    cluster_ids = [
        graph.cluster_of[cls[0]] if cluster_sizes[graph.cluster_of[cls[0]]] > 1 else -1
        for cls in ranked
    ]
    prefix: list[list[int]] = []
    for cls in ranked:
        sums = [0]
        for i in cls:
            sums.append(sums[-1] + gpus[i].placement_score)
        prefix.append(sums)

    def members(vector: Sequence[int]) -> tuple[int, ...]:
        return tuple(sorted(i for c, taken in enumerate(vector) for i in ranked[c][:taken]))

    best_head: tuple[int, int] | None = None
    best_tail: tuple[int, int, int] = (0, 0, 0)
    best_vector: list[int] = []
    best_members: tuple[int, ...] | None = None
    for vector in count_vectors(sizes, count):
        active = [c for c, taken in enumerate(vector) if taken]
        total = 0
        for position, c in enumerate(active):
            taken = vector[c]
            if taken > 1:
                total += taken * (taken - 1) // 2 * within[c]
            row = between[c]
            for d in active[:position]:
                total += taken * vector[d] * row[d]
        head = decode.head(total)
        if best_head is not None and head < best_head:
            continue
        covered = 0
        used: set[int] = set()
        for c in active:
            cid = cluster_ids[c]
            if cid < 0:
                covered += vector[c]
            elif cid not in used:
                used.add(cid)
                covered += cluster_sizes[cid]
        tail = (
            count - covered,
            total >> band_shift,
            sum(prefix[c][vector[c]] for c in active),
        )
        if best_head is None or head > best_head or tail > best_tail:
            best_head, best_tail, best_vector, best_members = head, tail, list(vector), None
        elif tail == best_tail:
            if best_members is None:
                best_members = members(best_vector)
            candidate = members(vector)
            if candidate < best_members:
                best_vector, best_members = list(vector), candidate
    assert best_head is not None
    chosen = best_members if best_members is not None else members(best_vector)
    return _search_plan(graph, chosen, best_head, best_tail, note)


def _search_plan(
    graph: PeerGraph,
    chosen: Sequence[int],
    head: tuple[int, int],
    tail: tuple[int, int, int],
    note: str,
) -> TopologyPlan:
    used = len({graph.cluster_of[i] for i in chosen})
    return TopologyPlan(
        tier=-head[0],
        gpus=tuple(graph.gpus[i].name for i in chosen),
        intra=head[1],
        fragmentation=-tail[0],
        bandwidth=tail[1],
        reason=f"cross-cluster: {len(chosen)} GPUs over {used} tier-0 clusters (searched {note})",
        placement=tail[2],
        evaluator="peer",
    )
