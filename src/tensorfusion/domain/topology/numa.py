"""NUMA evaluator: GPUs grouped by NUMA node, tier 1 inside one domain, 2 across (§10)."""

from __future__ import annotations

from collections.abc import Sequence
from math import comb
from typing import Final

from tensorfusion.domain.topology.selection import (
    MAX_AFFINITY,
    compact_intra,
    count_vectors,
    placement_rank,
    sorted_names,
    tightest,
)
from tensorfusion.domain.topology.vocabulary import (
    MAX_COMBINATIONS,
    TIER_CROSS_NUMA,
    TIER_SAME_NUMA,
    TIER_UNKNOWN,
    TopologyGPU,
    TopologyPlan,
)

__all__ = ["numa_plan"]

_NUMA_SAME: Final = 10
_NUMA_CROSS: Final = 2


def _intra(affinity: int, count: int) -> int:
    """Pair affinity normalised to 0..100, rounded half up: (sum × 100 + max div 2) div max."""
    most = count * (count - 1) // 2 * MAX_AFFINITY
    return (affinity * 100 + most // 2) // most


def numa_plan(gpus: Sequence[TopologyGPU], count: int, least_damage: bool) -> TopologyPlan:
    """Best plan of `count` GPUs by NUMA domain: one domain (tier 1) if any holds count."""
    domains: dict[int, list[TopologyGPU]] = {}
    for g in gpus:
        domain = g.numa_node if g.numa_node >= 0 else -1
        members = domains.get(domain)
        if members is None:
            domains[domain] = [g]
        else:
            members.append(g)
    if count == 1:
        return _numa_single(gpus, domains, least_damage)
    fitting = [m for d, m in domains.items() if d >= 0 and len(m) >= count]
    if fitting:
        chosen, size = tightest(fitting, count)
        domain = chosen[0].numa_node
        return TopologyPlan(
            tier=TIER_SAME_NUMA,
            gpus=sorted_names(chosen),
            intra=compact_intra(size, count),
            fragmentation=size - count,
            bandwidth=0,
            reason=f"same-NUMA: all {count} GPUs on NUMA {domain} (domain size {size})",
            placement=sum(g.placement_score for g in chosen),
            evaluator="numa",
        )
    return _numa_cross(gpus, domains, count)


def _numa_single(
    gpus: Sequence[TopologyGPU], domains: dict[int, list[TopologyGPU]], least_damage: bool
) -> TopologyPlan:
    if least_damage and len(gpus) > 1:
        # Least damage: unknown NUMA first, then the smallest domain (size among candidates).
        def damage(g: TopologyGPU) -> tuple[bool, int, int, str]:
            known = g.numa_node >= 0
            return (known, len(domains[g.numa_node if known else -1]), -g.placement_score, g.name)

        best = min(gpus, key=damage)
        how = "least-damage"
    else:
        best = min(gpus, key=placement_rank)
        how = "best placement"
    if best.numa_node >= 0:
        size = len(domains[best.numa_node])
        tier, fragmentation = TIER_SAME_NUMA, size - 1
        reason = f"{how}: single GPU on NUMA {best.numa_node} (domain size {size})"
    else:
        tier, fragmentation = TIER_UNKNOWN, 0
        reason = f"{how}: single GPU with unknown NUMA"
    return TopologyPlan(
        tier=tier,
        gpus=(best.name,),
        intra=100,
        fragmentation=fragmentation,
        bandwidth=0,
        reason=reason,
        placement=best.placement_score,
        evaluator="numa",
    )


def _domain_order(domain: int, members: list[TopologyGPU]) -> tuple[bool, int, int, str]:
    """Largest domains first, unknown NUMA last; ties: higher placement sum, smallest name."""
    return (
        domain < 0,
        -len(members),
        -sum(g.placement_score for g in members),
        min(g.name for g in members),
    )


def _numa_cross(
    gpus: Sequence[TopologyGPU], domains: dict[int, list[TopologyGPU]], count: int
) -> TopologyPlan:
    """No known domain holds count: search C(n, count), else prune to the largest domains,
    else fill greedily from the largest domains."""
    total = comb(len(gpus), count)
    if total <= MAX_COMBINATIONS:
        return _numa_search(list(domains.items()), count, f"searched {total} combinations")
    ordered = sorted(domains.items(), key=lambda item: _domain_order(*item))
    kept = cut = 0
    for _, members in ordered:
        kept += len(members)
        cut += 1
        if kept >= count:
            break
    pruned = comb(kept, count)
    if kept < len(gpus) and pruned <= MAX_COMBINATIONS:
        note = f"pruned to {kept} GPUs of the largest domains, searched {pruned} combinations"
        return _numa_search(ordered[:cut], count, note)
    return _numa_greedy(ordered, count, total)


def _numa_search(
    domains: Sequence[tuple[int, list[TopologyGPU]]], count: int, note: str
) -> TopologyPlan:
    """Best combination of `count` GPUs by (tier, intra, fragmentation, placement, names).

    Equivalent to scoring all C(n, count) combinations: within one NUMA domain every GPU has
    the same pair affinities, so a combination is worth its count per domain plus the top GPUs
    of each domain by placement then name (which also give the smallest sorted names among
    equals). So only the count vectors are scored.
    """
    ranked = [sorted(members, key=placement_rank) for _, members in domains]
    known = [domain >= 0 for domain, _ in domains]
    sizes = [len(members) for members in ranked]
    prefix: list[list[int]] = []
    for members in ranked:
        sums = [0]
        for g in members:
            sums.append(sums[-1] + g.placement_score)
        prefix.append(sums)
    pairs = count * (count - 1) // 2

    def names_of(vector: Sequence[int]) -> tuple[str, ...]:
        return tuple(sorted(g.name for i, taken in enumerate(vector) for g in ranked[i][:taken]))

    best_key: tuple[int, int, int, int] | None = None
    best_vector: list[int] = []
    best_names: tuple[str, ...] | None = None
    for vector in count_vectors(sizes, count):
        same = unknown = fragmentation = used = placement = 0
        for i, taken in enumerate(vector):
            if not taken:
                continue
            placement += prefix[i][taken]
            used += 1
            if known[i]:
                same += taken * (taken - 1) // 2
                fragmentation += sizes[i] - taken
            else:
                unknown = taken
        if unknown == count:
            tier = TIER_UNKNOWN
        elif used == 1:
            tier = TIER_SAME_NUMA
        else:
            tier = TIER_CROSS_NUMA  # several domains, known and unknown included
        cross = pairs - same - (unknown * (count - unknown) + unknown * (unknown - 1) // 2)
        intra = _intra(_NUMA_SAME * same + _NUMA_CROSS * cross, count)
        key = (-tier, intra, -fragmentation, placement)
        if best_key is None or key > best_key:
            best_key, best_vector, best_names = key, list(vector), None
        elif key == best_key:
            if best_names is None:
                best_names = names_of(best_vector)
            names = names_of(vector)
            if names < best_names:
                best_vector, best_names = list(vector), names
    assert best_key is not None  # callers guarantee at least count GPUs
    neg_tier, intra, neg_fragmentation, placement = best_key
    used = sum(1 for taken in best_vector if taken)
    return TopologyPlan(
        tier=-neg_tier,
        gpus=best_names if best_names is not None else names_of(best_vector),
        intra=intra,
        fragmentation=-neg_fragmentation,
        bandwidth=0,
        reason=f"cross-NUMA: {count} GPUs over {used} NUMA domains ({note})",
        placement=placement,
        evaluator="numa",
    )


def _numa_greedy(
    ordered: Sequence[tuple[int, list[TopologyGPU]]], count: int, total: int
) -> TopologyPlan:
    """Fill from the largest domains (unknown NUMA last), best placement then name in each."""
    chosen: list[TopologyGPU] = []
    used = fragmentation = 0
    only_unknown = True
    for domain, members in ordered:
        taken = min(len(members), count - len(chosen))
        chosen.extend(sorted(members, key=placement_rank)[:taken])
        used += 1
        if domain >= 0:
            only_unknown = False
            fragmentation += len(members) - taken
        if len(chosen) == count:
            break
    if only_unknown:
        tier = TIER_UNKNOWN
    elif used == 1:
        tier = TIER_SAME_NUMA
    else:
        tier = TIER_CROSS_NUMA
    # "One domain could hold count": the unknown-NUMA group counts as a domain here, as it does
    # for the combination tier.
    intra = 80 if any(len(members) >= count for _, members in ordered) else 50
    return TopologyPlan(
        tier=tier,
        gpus=sorted_names(chosen),
        intra=intra,
        fragmentation=fragmentation,
        bandwidth=0,
        reason=(
            f"heuristic: {count} GPUs over {used} NUMA domains "
            f"({total} combinations exceed the search limit {MAX_COMBINATIONS})"
        ),
        placement=sum(g.placement_score for g in chosen),
        evaluator="numa",
        degraded=True,
    )
