"""GPUNetworkTopologyAware: which GPUs of one node a pod should get, and at what tier (§10).

Tiers: 0 same interconnect (NVLink/HCCS/XGMI), 1 same NUMA node, 2 cross NUMA, 3 unknown.
`plan_topology` evaluates the valid GPUs of one node for a request of `count` GPUs;
`topology_rejection` is the hard-mode node filter. Everything here is pure and deterministic:
the result never depends on the order of the candidates or of their peer links. GPU names and
UUIDs are assumed unique among the candidates of one node.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import combinations
from math import comb
from typing import Final

from tensorfusion.domain.allocation_request import TopologyOverrides
from tensorfusion.domain.vocabulary import TopologyMode, TopologySource, UnknownTopologyPolicy

__all__ = [
    "MAX_COMBINATIONS",
    "TIER_CROSS_NUMA",
    "TIER_SAME_INTERCONNECT",
    "TIER_SAME_NUMA",
    "TIER_UNKNOWN",
    "PeerLink",
    "TopologyArgs",
    "TopologyGPU",
    "TopologyPlan",
    "is_satisfied",
    "plan_topology",
    "tier_banded_score",
    "topology_rejection",
]

TIER_SAME_INTERCONNECT: Final = 0
TIER_SAME_NUMA: Final = 1
TIER_CROSS_NUMA: Final = 2
TIER_UNKNOWN: Final = 3
MAX_COMBINATIONS: Final = 256
"""Combination search limit: beyond it the search is pruned, then greedy."""

_NUMA_SAME: Final = 10
_NUMA_CROSS: Final = 2
_PEER_AFFINITY: Final = (10, 6, 2, 0)  # pair affinity by pair tier 0..3
_MAX_AFFINITY: Final = 10


def tier_banded_score(tier: int, intra: int) -> int:
    """`TierBandedScore`: 25 × (3 − tier) + intra × 24 div 100; a lower tier always wins."""
    return 25 * (3 - tier) + (intra * 24) // 100


@dataclass(frozen=True, slots=True)
class PeerLink:
    """One `GPU.status.topology.peers` entry: the link from this GPU to the GPU `peer_uuid`.

    `tier` is read as reported; the evaluator treats values outside 0..3 as unknown (3).
    """

    peer_uuid: str
    tier: int
    bandwidth: int = 0


@dataclass(frozen=True, slots=True)
class TopologyGPU:
    """What topology evaluation needs of one valid GPU of the node."""

    name: str
    uuid: str = ""
    numa_node: int = -1
    """NUMA node of the GPU; any negative value means unknown."""
    peers: tuple[PeerLink, ...] = ()
    placement_score: int = 0
    """S(g, gpu) of §7.2: the tie-break score (a set scores the sum)."""


@dataclass(frozen=True, slots=True)
class TopologyArgs:
    """Effective GPUNetworkTopologyAware arguments for one request (plugin config + overrides).

    `max_allowed_tier` is taken as given: an explicit 0 is 0 (the reference read it as 1).
    """

    mode: TopologyMode = TopologyMode.SOFT
    source: TopologySource = TopologySource.AUTO
    max_allowed_tier: int = 1
    unknown_policy: UnknownTopologyPolicy = UnknownTopologyPolicy.TREAT_AS_WORST
    prefer_least_damage: bool = True

    def __post_init__(self) -> None:
        if not 0 <= self.max_allowed_tier <= TIER_UNKNOWN:
            raise ValueError(f"maxAllowedTier must be 0..3, got {self.max_allowed_tier}")

    def with_overrides(self, overrides: TopologyOverrides) -> TopologyArgs:
        """These arguments with the pod's overrides applied (None = not overridden; 0 is 0)."""
        mode, max_tier, source = overrides.mode, overrides.max_tier, overrides.source
        if mode is None and max_tier is None and source is None:
            return self
        if max_tier is not None:
            # Admission allows 0..3 only; clamp rather than fail a scheduling decision.
            max_tier = min(max(max_tier, 0), TIER_UNKNOWN)
        return TopologyArgs(
            mode=self.mode if mode is None else mode,
            source=self.source if source is None else source,
            max_allowed_tier=self.max_allowed_tier if max_tier is None else max_tier,
            unknown_policy=self.unknown_policy,
            prefer_least_damage=self.prefer_least_damage,
        )


@dataclass(frozen=True, slots=True)
class TopologyPlan:
    """The best GPUs of one node for the request and what they are worth.

    `gpus` are sorted by name. `intra` (0..100) ranks plans of the same tier, `fragmentation`
    counts the GPUs left in the NUMA domains / tier-0 clusters the plan breaks into,
    `bandwidth` sums the pairwise peer bandwidths, `placement` sums the placement scores.
    `degraded` marks the greedy fallback (combination search over the limit).
    """

    tier: int
    gpus: tuple[str, ...]
    intra: int
    fragmentation: int
    bandwidth: int
    reason: str
    placement: int = 0
    evaluator: str = "none"
    degraded: bool = False

    @property
    def score(self) -> int:
        """TierBandedScore of the plan."""
        return tier_banded_score(self.tier, self.intra)


def is_satisfied(plan: TopologyPlan | None, args: TopologyArgs) -> bool:
    """Whether the plan meets the constraint: tier ≤ maxAllowedTier, and tier 3 not rejected."""
    if plan is None:
        return False
    if plan.tier == TIER_UNKNOWN and args.unknown_policy == UnknownTopologyPolicy.REJECT:
        return False
    return plan.tier <= args.max_allowed_tier


def topology_rejection(plan: TopologyPlan | None, args: TopologyArgs) -> str | None:
    """Hard-mode node filter: the rejection message, or None when the node passes.

    Soft mode never rejects. No plan counts as tier 3 (or is rejected under policy `reject`).
    """
    if args.mode != TopologyMode.HARD:
        return None
    max_tier = args.max_allowed_tier
    reject_unknown = args.unknown_policy == UnknownTopologyPolicy.REJECT
    if plan is None:
        if reject_unknown:
            return (
                "GPU topology unknown and unknownTopologyPolicy=reject: no topology plan for node"
            )
        if max_tier < TIER_UNKNOWN:
            return (
                "GPU topology constraint not satisfied: no topology plan for node "
                f"(tier={TIER_UNKNOWN}, maxAllowed={max_tier})"
            )
        return None
    if plan.tier == TIER_UNKNOWN and reject_unknown:
        return f"GPU topology unknown and unknownTopologyPolicy=reject: {plan.reason}"
    if plan.tier > max_tier:
        # The effective (per-pod) maximum is reported; the reference printed the plugin's.
        return (
            f"GPU topology constraint not satisfied: {plan.reason} "
            f"(tier={plan.tier}, maxAllowed={max_tier})"
        )
    return None


def plan_topology(
    candidates: Sequence[TopologyGPU], count: int, args: TopologyArgs
) -> TopologyPlan | None:
    """Evaluate one node's valid GPUs for `count` GPUs.

    None when count < 1 (the plugin is skipped: do not filter on it) or when there are fewer
    candidates than count.
    """
    if count < 1 or len(candidates) < count:
        return None
    source = args.source
    least_damage = args.prefer_least_damage
    if source == TopologySource.NUMA:
        if _any_numa(candidates):
            return _numa_plan(candidates, count, least_damage)
    elif source == TopologySource.VENDOR:
        # Peer evaluator even without peer data (pairs then fall back to NUMA tiers).
        if _any_peers(candidates) or _any_numa(candidates):
            return _peer_plan(candidates, count, least_damage)
    elif _any_peers(candidates):
        return _peer_plan(candidates, count, least_damage)
    elif _any_numa(candidates):
        return _numa_plan(candidates, count, least_damage)
    # Nothing known (also for a forced source without its data: both evaluators would pick
    # exactly these GPUs at tier 3 then, only slower).
    return _no_data_plan(candidates, count)


# --- shared helpers -----------------------------------------------------------------------


def _rank(gpu: TopologyGPU) -> tuple[int, str]:
    """Best placement score first, then name."""
    return (-gpu.placement_score, gpu.name)


def _name(gpu: TopologyGPU) -> str:
    return gpu.name


def _any_peers(gpus: Sequence[TopologyGPU]) -> bool:
    return any(g.peers for g in gpus)


def _any_numa(gpus: Sequence[TopologyGPU]) -> bool:
    return any(g.numa_node >= 0 for g in gpus)


def _intra(affinity: int, count: int) -> int:
    """Pair affinity normalised to 0..100, rounded half up: (sum × 100 + max div 2) div max."""
    most = count * (count - 1) // 2 * _MAX_AFFINITY
    return (affinity * 100 + most // 2) // most


def _compact_intra(size: int, count: int) -> int:
    """Intra of a plan inside one domain or cluster: 5 points per spare GPU, floor 50."""
    return max(50, 100 - 5 * (size - count))


def _tightest(groups: Sequence[Sequence[TopologyGPU]], count: int) -> tuple[list[TopologyGPU], int]:
    """Top `count` GPUs of the smallest group that holds count, and that group's size.

    Ties between groups of that size: higher placement sum of the top GPUs, then their names.
    """
    smallest = min(len(g) for g in groups)
    best: list[TopologyGPU] = []
    best_key: tuple[int, tuple[str, ...]] | None = None
    for group in groups:
        if len(group) != smallest:
            continue
        chosen = sorted(group, key=_rank)[:count]
        key = (-sum(g.placement_score for g in chosen), _sorted_names(chosen))
        if best_key is None or key < best_key:
            best, best_key = chosen, key
    return best, smallest


def _sorted_names(gpus: Sequence[TopologyGPU]) -> tuple[str, ...]:
    return tuple(sorted(g.name for g in gpus))


def _no_data_plan(candidates: Sequence[TopologyGPU], count: int) -> TopologyPlan:
    """Tier 3: the top `count` GPUs by placement score, then name."""
    chosen = [min(candidates, key=_rank)] if count == 1 else sorted(candidates, key=_rank)[:count]
    return TopologyPlan(
        tier=TIER_UNKNOWN,
        gpus=_sorted_names(chosen),
        intra=0,
        fragmentation=0,
        bandwidth=0,
        reason="no topology data available, using unknown tier",
        placement=sum(g.placement_score for g in chosen),
    )


# --- NUMA evaluator -----------------------------------------------------------------------


def _numa_plan(gpus: Sequence[TopologyGPU], count: int, least_damage: bool) -> TopologyPlan:
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
        chosen, size = _tightest(fitting, count)
        domain = chosen[0].numa_node
        return TopologyPlan(
            tier=TIER_SAME_NUMA,
            gpus=_sorted_names(chosen),
            intra=_compact_intra(size, count),
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
        best = min(gpus, key=_rank)
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


def _count_vectors(sizes: Sequence[int], total: int) -> Iterator[list[int]]:
    """Every way to take `total` GPUs from groups of the given sizes (one reused list)."""
    last = len(sizes) - 1
    room = [0] * (last + 2)
    for i in range(last, -1, -1):
        room[i] = room[i + 1] + sizes[i]
    vector = [0] * (last + 1)

    def fill(i: int, left: int) -> Iterator[list[int]]:
        if i == last:
            vector[i] = left
            yield vector
            return
        for taken in range(max(0, left - room[i + 1]), min(sizes[i], left) + 1):
            vector[i] = taken
            yield from fill(i + 1, left - taken)

    if room[0] >= total:
        yield from fill(0, total)


def _numa_search(
    domains: Sequence[tuple[int, list[TopologyGPU]]], count: int, note: str
) -> TopologyPlan:
    """Best combination of `count` GPUs by (tier, intra, fragmentation, placement, names).

    Equivalent to scoring all C(n, count) combinations: within one NUMA domain every GPU has
    the same pair affinities, so a combination is worth its count per domain plus the top GPUs
    of each domain by placement then name (which also give the smallest sorted names among
    equals). So only the count vectors are scored.
    """
    ranked = [sorted(members, key=_rank) for _, members in domains]
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
    for vector in _count_vectors(sizes, count):
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
        chosen.extend(sorted(members, key=_rank)[:taken])
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
        gpus=_sorted_names(chosen),
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


# --- peer (vendor) evaluator --------------------------------------------------------------


def _components(adjacency: Sequence[int]) -> list[list[int]]:
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


def _tier0_links(gpus: Sequence[TopologyGPU]) -> list[int]:
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


def _single_tier(gpu: TopologyGPU) -> int:
    if gpu.peers:
        return TIER_SAME_INTERCONNECT
    return TIER_SAME_NUMA if gpu.numa_node >= 0 else TIER_UNKNOWN


def _peer_single(gpus: Sequence[TopologyGPU], least_damage: bool) -> TopologyPlan:
    n = len(gpus)
    sizes = [1] * n
    for component in _components(_tier0_links(gpus)):
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
        best = min(range(n), key=lambda i: _rank(gpus[i]))
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


def _pair_matrices(gpus: Sequence[TopologyGPU]) -> tuple[list[list[int]], list[list[int]]]:
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


def _set_metrics(
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


def _links_bandwidth(chosen: Sequence[TopologyGPU]) -> int:
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
class _PeerGraph:
    """Candidates of the peer evaluator, sorted by name, with their pairwise relations."""

    gpus: Sequence[TopologyGPU]
    tiers: list[list[int]]
    bands: list[list[int]]
    clusters: list[list[int]]  # tier-0 clusters, ascending indices
    cluster_of: list[int]


def _peer_plan(candidates: Sequence[TopologyGPU], count: int, least_damage: bool) -> TopologyPlan:
    if count == 1:
        return _peer_single(candidates, least_damage)
    gpus = sorted(candidates, key=_name)  # index order = name order, for the search tie-break
    n = len(gpus)
    adjacency = _tier0_links(gpus)
    clusters = _components(adjacency)

    fitting: list[list[TopologyGPU]] = []
    for cluster in clusters:
        if len(cluster) < count:
            continue
        mask = sum(1 << i for i in cluster)
        if all((adjacency[i] | 1 << i) == mask for i in cluster):  # every pair is tier 0
            fitting.append([gpus[i] for i in cluster])
    if fitting:
        chosen, size = _tightest(fitting, count)
        return TopologyPlan(
            tier=TIER_SAME_INTERCONNECT,
            gpus=_sorted_names(chosen),
            intra=_compact_intra(size, count),
            fragmentation=size - count,
            bandwidth=_links_bandwidth(chosen),
            reason=f"same-interconnect: all {count} GPUs in tier-0 cluster (cluster size {size})",
            placement=sum(g.placement_score for g in chosen),
            evaluator="peer",
        )

    tiers, bands = _pair_matrices(gpus)
    cluster_of = [0] * n
    for cid, cluster in enumerate(clusters):
        for i in cluster:
            cluster_of[i] = cid
    graph = _PeerGraph(gpus, tiers, bands, clusters, cluster_of)
    total = comb(n, count)
    if total <= MAX_COMBINATIONS:
        return _peer_search(graph, list(range(n)), count, f"{total} combinations")

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
        return _peer_search(graph, sorted(kept), count, note)
    return _peer_greedy(graph, ordered, count, total)


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


def _peer_search(graph: _PeerGraph, pool: list[int], count: int, note: str) -> TopologyPlan:
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
        self.most = pairs * _MAX_AFFINITY
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
    graph: _PeerGraph, classes: list[list[int]], packed: list[list[int]], count: int, note: str
) -> TopologyPlan:
    """The search of `_peer_search` over counts per class of interchangeable GPUs.

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
    for vector in _count_vectors(sizes, count):
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
    graph: _PeerGraph,
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


def _peer_greedy(
    graph: _PeerGraph, ordered: Sequence[list[int]], count: int, total: int
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
    worst, bandwidth = _set_metrics(chosen, graph.tiers, graph.bands)
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
