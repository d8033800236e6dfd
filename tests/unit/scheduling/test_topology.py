"""GPUNetworkTopologyAware evaluation and hard-mode filter (scheduling.md §10)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from itertools import combinations
from math import comb

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from tensorfusion.domain.allocation_request import TopologyOverrides
from tensorfusion.domain.topology import (
    PeerLink,
    TopologyArgs,
    TopologyGPU,
    TopologyPlan,
    is_satisfied,
    plan_topology,
    tier_banded_score,
    topology_rejection,
)
from tensorfusion.domain.vocabulary import TopologyMode, TopologySource, UnknownTopologyPolicy

DEFAULT = TopologyArgs()
NUMA = TopologyArgs(source=TopologySource.NUMA)
VENDOR = TopologyArgs(source=TopologySource.VENDOR)
NO_DAMAGE = TopologyArgs(prefer_least_damage=False)
HARD = TopologyArgs(mode=TopologyMode.HARD)


def gpu(name: str, numa: int = -1, score: int = 0, peers: Iterable[PeerLink] = ()) -> TopologyGPU:
    return TopologyGPU(
        name=name, uuid=f"uuid-{name}", numa_node=numa, peers=tuple(peers), placement_score=score
    )


def link(peer: str, tier: int, bandwidth: int = 0) -> PeerLink:
    return PeerLink(peer_uuid=f"uuid-{peer}", tier=tier, bandwidth=bandwidth)


def plan(
    candidates: Sequence[TopologyGPU], count: int, args: TopologyArgs = DEFAULT
) -> TopologyPlan:
    result = plan_topology(candidates, count, args)
    assert result is not None
    return result


def a_plan(tier: int, reason: str = "r") -> TopologyPlan:
    return TopologyPlan(
        tier=tier, gpus=("g",), intra=100, fragmentation=0, bandwidth=0, reason=reason
    )


def links_among(
    names: Sequence[str], tier_of: dict[frozenset[str], int], bandwidth: int = 0
) -> dict[str, list[PeerLink]]:
    """Symmetric peer lists: every pair reports `tier_of[pair]` (default tier 2)."""
    return {
        a: [link(b, tier_of.get(frozenset((a, b)), 2), bandwidth) for b in names if b != a]
        for a in names
    }


# --- TierBandedScore ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tier", "intra", "score"),
    [(0, 100, 99), (0, 0, 75), (1, 95, 72), (2, 50, 37), (3, 100, 24), (3, 0, 0)],
)
def test_tier_banded_score(tier: int, intra: int, score: int) -> None:
    assert tier_banded_score(tier, intra) == score


@given(st.integers(0, 2), st.integers(0, 100), st.integers(0, 100))
def test_a_lower_tier_always_scores_higher(tier: int, intra: int, other: int) -> None:
    assert tier_banded_score(tier, intra) > tier_banded_score(tier + 1, other)


# --- no topology data ---------------------------------------------------------------------


def test_no_data_picks_best_placement_then_name() -> None:
    # scheduling.md §7.5: S(A, gpu) = 73, S(B, gpu) = 100, no NUMA or peer data.
    result = plan([gpu("gpu-a1", score=73), gpu("gpu-a2", score=100)], 1)
    assert result.gpus == ("gpu-a2",)
    assert (result.tier, result.intra, result.evaluator) == (3, 0, "none")
    assert result.reason == "no topology data available, using unknown tier"
    assert not is_satisfied(result, DEFAULT)

    several = [gpu("c", score=80), gpu("a", score=50), gpu("b", score=80), gpu("d", score=80)]
    assert plan(several, 2).gpus == ("b", "c")
    assert plan(several, 3).placement == 240


def test_no_plan_without_enough_candidates_or_for_count_zero() -> None:
    assert plan_topology([gpu("a")], 0, DEFAULT) is None
    assert plan_topology([gpu("a")], 2, DEFAULT) is None
    assert plan_topology([], 1, DEFAULT) is None


# --- NUMA evaluator -----------------------------------------------------------------------


def test_numa_single_gpu_least_damage_takes_the_smallest_domain() -> None:
    node = [gpu("a", 0, 90), gpu("b", 0, 80), gpu("c", 0, 70), gpu("d", 1, 10)]
    result = plan(node, 1)
    assert result.gpus == ("d",)
    assert (result.tier, result.fragmentation, result.evaluator) == (1, 0, "numa")
    assert result.reason == "least-damage: single GPU on NUMA 1 (domain size 1)"
    # Domains of equal size: the better placement score wins.
    assert plan([*node, gpu("e", 2, 20)], 1).gpus == ("e",)


def test_numa_single_gpu_least_damage_takes_unknown_numa_first() -> None:
    node = [gpu("a", 0, 90), gpu("d", 1, 10), gpu("u", -1, 5)]
    result = plan(node, 1)
    assert (result.gpus, result.tier) == (("u",), 3)


def test_numa_single_gpu_without_least_damage_takes_best_placement() -> None:
    node = [gpu("b", 0, 90), gpu("a", 0, 90), gpu("d", 1, 10), gpu("u", -1, 5)]
    result = plan(node, 1, NO_DAMAGE)
    assert (result.gpus, result.tier, result.fragmentation) == (("a",), 1, 1)
    assert plan([gpu("u", -1, 5), gpu("v", -1, 6), gpu("k", 0, 1)], 1, NO_DAMAGE).tier == 3


def test_numa_single_candidate() -> None:
    assert plan([gpu("a", 3)], 1).tier == 1
    assert plan([gpu("a", 0), gpu("b")], 1, NUMA).gpus == ("b",)


def test_numa_several_gpus_in_the_smallest_domain_that_fits() -> None:
    node = [
        gpu("a", 0, 10),
        gpu("b", 0, 20),
        gpu("c", 0, 30),
        gpu("d", 0, 40),
        gpu("e", 1, 5),
        gpu("f", 1, 5),
        gpu("u", -1, 100),
    ]
    two = plan(node, 2)
    assert (two.gpus, two.tier, two.intra, two.fragmentation) == (("e", "f"), 1, 100, 0)
    three = plan(node, 3)
    assert (three.gpus, three.tier, three.intra, three.fragmentation) == (("b", "c", "d"), 1, 95, 1)
    assert three.reason == "same-NUMA: all 3 GPUs on NUMA 0 (domain size 4)"
    assert three.score == tier_banded_score(1, 95)


def test_numa_domains_of_equal_size_tie_on_placement_then_names() -> None:
    node = [gpu("a", 0, 10), gpu("b", 0, 10), gpu("c", 1, 50), gpu("d", 1, 0)]
    assert plan(node, 2).gpus == ("c", "d")
    even = [gpu("c", 1), gpu("d", 1), gpu("a", 0), gpu("b", 0)]
    assert plan(even, 2).gpus == ("a", "b")


def test_numa_intra_has_a_floor_of_50() -> None:
    node = [gpu(f"g{i:02}", 0) for i in range(14)]
    assert plan(node, 2).intra == 50  # 100 - 5 × 12 = 40 → 50


def test_cross_numa_enumeration() -> None:
    node = [gpu("a", 0), gpu("b", 0), gpu("c", 1), gpu("d", 1), gpu("e", 1)]
    result = plan(node, 4)
    # 1 + 3 split: 3 same pairs, 3 cross → (36 × 100 + 30) div 60 = 60; fragmentation 1.
    # 2 + 2 split: 2 same, 4 cross → 47. Ties between a and b go to the name.
    assert (result.gpus, result.tier, result.intra, result.fragmentation) == (
        ("a", "c", "d", "e"),
        2,
        60,
        1,
    )
    assert result.reason == "cross-NUMA: 4 GPUs over 2 NUMA domains (searched 5 combinations)"
    scored = [gpu("a", 0), gpu("b", 0, 5), gpu("c", 1), gpu("d", 1), gpu("e", 1)]
    assert plan(scored, 4).gpus == ("b", "c", "d", "e")


def test_cross_numa_prefers_known_with_unknown_over_all_unknown() -> None:
    result = plan([gpu("u2"), gpu("a", 0), gpu("u1")], 2)
    assert (result.gpus, result.tier, result.intra) == (("a", "u1"), 2, 0)
    all_unknown = plan([gpu("u2", score=1), gpu("a", 0), gpu("u1"), gpu("u3", score=1)], 3)
    assert all_unknown.gpus == ("a", "u2", "u3")


def test_cross_numa_pruned_to_the_largest_domains() -> None:
    # 16 GPUs in 4 domains of 4, count 5: C(16, 5) = 4368 > 256. Pruning keeps the two domains
    # with the best placement sums (2 and 3), C(8, 5) = 56: the lone 100 of domain 0 is lost.
    scores = {0: [100, 0, 0, 0], 1: [0, 0, 0, 0], 2: [30, 30, 30, 30], 3: [31, 31, 30, 30]}
    node = [gpu(f"n{d}-{i}", d, s) for d, row in scores.items() for i, s in enumerate(row)]
    result = plan(node, 5)
    assert result.reason == (
        "cross-NUMA: 5 GPUs over 2 NUMA domains "
        "(pruned to 8 GPUs of the largest domains, searched 56 combinations)"
    )
    # 4 + 1: 6 same pairs, 4 cross → 68, fragmentation 3; the best placement is all of domain 3
    # and domain 2's first by name.
    assert result.gpus == ("n2-0", "n3-0", "n3-1", "n3-2", "n3-3")
    assert (result.tier, result.intra, result.fragmentation, result.degraded) == (2, 68, 3, False)


def test_cross_numa_greedy_beyond_the_search_limit() -> None:
    # 3 domains of 6, count 7: C(18, 7) > 256, pruned C(12, 7) = 792 > 256 → greedy.
    node = [gpu(f"n{d}-{i}", d, 10 if d == 1 else 0) for d in range(3) for i in range(6)]
    node.append(gpu("u-0", -1, 99))
    result = plan(node, 7)
    assert result.degraded
    assert result.gpus == ("n0-0", *(f"n1-{i}" for i in range(6)))
    assert (result.tier, result.intra, result.fragmentation) == (2, 50, 5)
    assert result.reason.startswith("heuristic: 7 GPUs over 2 NUMA domains")


def test_numa_source_ignores_peers() -> None:
    # a and b share NVLink but sit on different NUMA nodes; c is a's NUMA neighbour.
    node = [
        gpu("a", 0, peers=[link("b", 0)]),
        gpu("b", 1, peers=[link("a", 0)]),
        gpu("c", 0),
    ]
    assert plan(node, 2).gpus == ("a", "b")
    numa = plan(node, 2, NUMA)
    assert (numa.gpus, numa.evaluator) == (("a", "c"), "numa")


def test_numa_source_without_numa_data_is_unknown() -> None:
    result = plan([gpu("a", peers=[link("b", 0)]), gpu("b", score=3)], 1, NUMA)
    assert (result.gpus, result.tier, result.evaluator) == (("b",), 3, "none")


# --- peer evaluator -----------------------------------------------------------------------


def test_peer_tier0_cluster() -> None:
    names = ["p0", "p1", "p2", "p3"]
    peers = links_among(names, {frozenset(("p0", "p1")): 0, frozenset(("p2", "p3")): 0}, 600)
    node = [gpu(n, peers=peers[n]) for n in names]
    result = plan(node, 2)
    assert (result.gpus, result.tier, result.intra, result.bandwidth) == (("p0", "p1"), 0, 100, 600)
    assert result.reason == "same-interconnect: all 2 GPUs in tier-0 cluster (cluster size 2)"
    assert result.evaluator == "peer"
    scored = [gpu(n, score=10 if n in {"p2", "p3"} else 0, peers=peers[n]) for n in names]
    assert plan(scored, 2).gpus == ("p2", "p3")


def test_peer_smallest_tier0_cluster_that_fits() -> None:
    names = ["q0", "q1", "q2", "q3", "q4"]
    nvlink = {frozenset(p): 0 for p in [("q0", "q1"), ("q0", "q2"), ("q1", "q2"), ("q3", "q4")]}
    peers = links_among(names, nvlink)
    node = [gpu(n, score=50 if n < "q3" else 0, peers=peers[n]) for n in names]
    assert plan(node, 2).gpus == ("q3", "q4")
    three = plan(node, 3)
    assert (three.gpus, three.tier, three.intra) == (("q0", "q1", "q2"), 0, 100)


def test_peer_cluster_that_is_not_all_tier0_is_searched() -> None:
    # r0-r1 and r1-r2 are NVLink, r0-r2 is not: one union-find cluster, not all tier 0.
    names = ["r0", "r1", "r2"]
    peers = links_among(names, {frozenset(("r0", "r1")): 0, frozenset(("r1", "r2")): 0})
    node = [gpu(n, peers=peers[n]) for n in names]
    three = plan(node, 3)
    assert (three.tier, three.fragmentation) == (2, 0)
    two = plan(node, 2)
    assert (two.gpus, two.tier, two.intra, two.fragmentation) == (("r0", "r1"), 0, 100, 1)
    assert two.reason == "cross-cluster: 2 GPUs over 1 tier-0 clusters (searched 3 combinations)"


def test_asymmetric_peers_take_the_better_known_tier_and_the_higher_bandwidth() -> None:
    node = [
        gpu("s0", peers=[link("s1", 0, 100)]),
        gpu("s1", peers=[link("s0", 2, 300)]),
        gpu("s2", score=100),
    ]
    result = plan(node, 2)
    assert (result.gpus, result.tier, result.bandwidth) == (("s0", "s1"), 0, 300)
    # An unknown report (3) loses to the other side's known tier.
    pair = [gpu("s0", 0, peers=[link("s1", 3)]), gpu("s1", 1, peers=[link("s0", 1, 7)])]
    assert (plan(pair, 2).tier, plan(pair, 2).bandwidth) == (1, 7)


def test_peer_tiers_outside_0_to_3_are_unknown() -> None:
    # Neither a negative nor a too-large tier claims NVLink; the pair falls back to NUMA.
    for bad in (-1, 7):
        node = [gpu("s0", 0, peers=[link("s1", bad)]), gpu("s1", 0)]
        assert plan(node, 2).tier == 1
        assert plan([*node, gpu("s2", 5)], 1).gpus == ("s1",)


def test_duplicate_self_and_foreign_links() -> None:
    node = [
        gpu("s0", peers=[link("s1", 2, 10), link("s1", 0, 50), link("s0", 0), link("zz", 0)]),
        gpu("s1"),
        gpu("s2"),
    ]
    result = plan(node, 2)
    assert (result.gpus, result.tier, result.bandwidth, result.fragmentation) == (
        ("s0", "s1"),
        0,
        50,
        0,
    )


def test_unknown_pairs_fall_back_to_numa() -> None:
    # Only a and b report peers (a PCIe link across sockets); c and d have none.
    node = [
        gpu("a", 0, peers=[link("b", 2)]),
        gpu("b", 1, peers=[link("a", 2)]),
        gpu("c", 0),
        gpu("d", 0),
    ]
    result = plan(node, 3)
    # a-c, a-d, c-d fall back to same NUMA (tier 1, affinity 6): (18 × 100 + 15) div 30 = 60.
    assert (result.gpus, result.tier, result.intra, result.evaluator) == (
        ("a", "c", "d"),
        1,
        60,
        "peer",
    )
    unknown = [gpu("a", peers=[link("b", 1)]), gpu("b"), gpu("c")]
    assert plan(unknown, 3).tier == 3


def test_peer_single_gpu_least_damage() -> None:
    node = [
        gpu("n0", 0, 90, [link("n1", 0), link("n2", 2)]),
        gpu("n1", 0, 80, [link("n0", 0), link("n2", 2)]),
        gpu("n2", 1, 10, [link("n0", 2), link("n1", 2)]),
        gpu("n3", 0, 5),
    ]
    no_peers = plan(node, 1)  # GPUs without peer data first
    assert (no_peers.gpus, no_peers.tier) == (("n3",), 1)
    smallest = plan(node[:3], 1)  # then the smallest tier-0 cluster
    assert (smallest.gpus, smallest.tier, smallest.fragmentation) == (("n2",), 0, 0)
    best = plan(node, 1, NO_DAMAGE)
    assert (best.gpus, best.tier, best.fragmentation) == (("n0",), 0, 1)
    assert plan([gpu("x", peers=[link("y", 1)]), gpu("y")], 1, NO_DAMAGE).tier == 0


def test_vendor_source_without_peers_uses_numa_pairs() -> None:
    node = [gpu("a", 0, 9), gpu("b", 1, 9), gpu("c", 1, 0)]
    single = plan(node, 1, VENDOR)
    assert (single.gpus, single.tier, single.evaluator) == (("a",), 1, "peer")
    two = plan(node, 2, VENDOR)
    assert (two.gpus, two.tier, two.intra) == (("b", "c"), 1, 60)
    assert plan([gpu("a"), gpu("b")], 2, VENDOR).evaluator == "none"


def test_peer_search_pruned_and_greedy() -> None:
    # Clusters of 6 with NVLink inside, PCIe across sockets between them.
    def clusters(count: int, size: int) -> list[TopologyGPU]:
        names = [f"c{c}-{i}" for c in range(count) for i in range(size)]
        tiers = {frozenset((a, b)): 0 for a in names for b in names if a[:3] == b[:3] and a != b}
        peers = links_among(names, tiers, 5)
        return [gpu(n, score=1 if n.startswith("c2") else 0, peers=peers[n]) for n in names]

    greedy = plan(clusters(3, 6), 7)  # C(18, 7) and C(12, 7) exceed 256
    assert greedy.degraded
    assert greedy.gpus == ("c0-0", *(f"c2-{i}" for i in range(6)))
    assert (greedy.tier, greedy.intra, greedy.fragmentation) == (2, 50, 5)
    assert greedy.reason.startswith("heuristic: 7 GPUs over 2 tier-0 clusters")

    pruned = plan(clusters(4, 4), 5)  # C(16, 5) > 256, two clusters: C(8, 5) = 56
    assert "pruned to 8 GPUs of the largest clusters" in pruned.reason
    assert pruned.gpus == ("c0-0", "c2-0", "c2-1", "c2-2", "c2-3")
    assert (pruned.tier, pruned.fragmentation, pruned.degraded) == (2, 3, False)


# --- arguments ----------------------------------------------------------------------------


def test_max_allowed_tier_zero_means_zero() -> None:
    # Regression: the reference read an explicit `maxAllowedTier: 0` as 1.
    assert TopologyArgs(max_allowed_tier=0).max_allowed_tier == 0
    assert DEFAULT.max_allowed_tier == 1
    assert DEFAULT.with_overrides(TopologyOverrides(max_tier=0)).max_allowed_tier == 0
    zero = TopologyArgs(mode=TopologyMode.HARD, max_allowed_tier=0)
    assert zero.with_overrides(TopologyOverrides()).max_allowed_tier == 0
    same_numa = plan([gpu("a", 0), gpu("b", 0)], 2, zero)
    assert not is_satisfied(same_numa, zero)
    assert topology_rejection(same_numa, zero) == (
        "GPU topology constraint not satisfied: same-NUMA: all 2 GPUs on NUMA 0 (domain size 2) "
        "(tier=1, maxAllowed=0)"
    )
    assert topology_rejection(a_plan(0), zero) is None


def test_max_allowed_tier_is_checked() -> None:
    with pytest.raises(ValueError, match="maxAllowedTier"):
        TopologyArgs(max_allowed_tier=4)


def test_overrides() -> None:
    assert DEFAULT.with_overrides(TopologyOverrides()) is DEFAULT
    args = DEFAULT.with_overrides(
        TopologyOverrides(mode=TopologyMode.HARD, max_tier=2, source=TopologySource.NUMA)
    )
    assert (args.mode, args.max_allowed_tier, args.source) == (
        TopologyMode.HARD,
        2,
        TopologySource.NUMA,
    )
    assert DEFAULT.with_overrides(TopologyOverrides(max_tier=9)).max_allowed_tier == 3
    base = TopologyArgs(unknown_policy=UnknownTopologyPolicy.REJECT, prefer_least_damage=False)
    kept = base.with_overrides(TopologyOverrides(mode=TopologyMode.HARD))
    assert (kept.unknown_policy, kept.prefer_least_damage) == (UnknownTopologyPolicy.REJECT, False)


# --- hard-mode filter ---------------------------------------------------------------------


def test_soft_mode_never_rejects() -> None:
    reject = TopologyArgs(max_allowed_tier=0, unknown_policy=UnknownTopologyPolicy.REJECT)
    assert topology_rejection(None, reject) is None
    assert topology_rejection(a_plan(3), reject) is None


def test_hard_mode_without_a_plan() -> None:
    assert topology_rejection(None, HARD) == (
        "GPU topology constraint not satisfied: no topology plan for node (tier=3, maxAllowed=1)"
    )
    assert (
        topology_rejection(None, TopologyArgs(mode=TopologyMode.HARD, max_allowed_tier=3)) is None
    )
    reject = TopologyArgs(
        mode=TopologyMode.HARD, max_allowed_tier=3, unknown_policy=UnknownTopologyPolicy.REJECT
    )
    assert topology_rejection(None, reject) == (
        "GPU topology unknown and unknownTopologyPolicy=reject: no topology plan for node"
    )


def test_hard_mode_unknown_tier() -> None:
    worst = TopologyArgs(mode=TopologyMode.HARD, max_allowed_tier=3)
    unknown = plan([gpu("a"), gpu("b")], 1)
    assert topology_rejection(unknown, worst) is None
    assert is_satisfied(unknown, worst)
    reject = TopologyArgs(
        mode=TopologyMode.HARD, max_allowed_tier=3, unknown_policy=UnknownTopologyPolicy.REJECT
    )
    assert topology_rejection(unknown, reject) == (
        "GPU topology unknown and unknownTopologyPolicy=reject: "
        "no topology data available, using unknown tier"
    )
    assert not is_satisfied(unknown, reject)


def test_hard_mode_tier_above_the_maximum() -> None:
    cross = plan([gpu("a", 0), gpu("b", 1)], 2)
    assert topology_rejection(cross, HARD) == (
        "GPU topology constraint not satisfied: cross-NUMA: 2 GPUs over 2 NUMA domains "
        "(searched 1 combinations) (tier=2, maxAllowed=1)"
    )
    assert topology_rejection(a_plan(1), HARD) is None
    assert is_satisfied(a_plan(1), HARD)
    assert not is_satisfied(None, HARD)
    # The per-pod maximum is the one reported.
    pod = HARD.with_overrides(TopologyOverrides(max_tier=0))
    assert topology_rejection(a_plan(1, "x"), pod) == (
        "GPU topology constraint not satisfied: x (tier=1, maxAllowed=0)"
    )


# --- properties ---------------------------------------------------------------------------

NAMES = st.text(alphabet="abcxyz019-", min_size=1, max_size=4)


@st.composite
def nodes(draw: st.DrawFn, max_gpus: int = 9) -> list[TopologyGPU]:
    names = draw(st.lists(NAMES, min_size=1, max_size=max_gpus, unique=True))
    n = len(names)
    with_peers = draw(st.booleans())
    gpus = []
    for name in names:
        peers: list[PeerLink] = []
        if with_peers:
            for target, tier, bandwidth in draw(
                st.lists(
                    st.tuples(
                        st.integers(0, n),  # n: a GPU that is not a candidate
                        st.sampled_from([-1, 0, 0, 0, 1, 2, 3, 5]),
                        st.integers(0, 3),
                    ),
                    max_size=n + 1,
                )
            ):
                peer = names[target] if target < n else "elsewhere"
                peers.append(PeerLink(f"uuid-{peer}", tier, bandwidth))
        gpus.append(
            TopologyGPU(
                name=name,
                uuid=f"uuid-{name}",
                numa_node=draw(st.sampled_from([-1, -1, 0, 0, 1, 2])),
                peers=tuple(peers),
                placement_score=draw(st.integers(0, 3)),
            )
        )
    return gpus


ARGS = st.builds(
    TopologyArgs,
    source=st.sampled_from(list(TopologySource)),
    prefer_least_damage=st.booleans(),
)


@settings(deadline=None)
@given(st.data(), nodes(max_gpus=20), ARGS)
def test_plan_picks_count_distinct_candidates(
    data: st.DataObject, node: list[TopologyGPU], args: TopologyArgs
) -> None:
    count = data.draw(st.integers(1, len(node)))
    result = plan(node, count, args)
    assert len(result.gpus) == count
    assert len(set(result.gpus)) == count
    assert set(result.gpus) <= {g.name for g in node}
    assert list(result.gpus) == sorted(result.gpus)
    assert 0 <= result.tier <= 3
    assert 0 <= result.intra <= 100
    assert result.fragmentation >= 0
    assert result.placement == sum(g.placement_score for g in node if g.name in result.gpus)


@settings(deadline=None)
@given(st.data(), nodes(max_gpus=14), ARGS)
def test_plan_does_not_depend_on_input_order(
    data: st.DataObject, node: list[TopologyGPU], args: TopologyArgs
) -> None:
    count = data.draw(st.integers(1, len(node)))
    shuffled = [
        TopologyGPU(g.name, g.uuid, g.numa_node, tuple(reversed(g.peers)), g.placement_score)
        for g in data.draw(st.permutations(node))
    ]
    assert plan(shuffled, count, args) == plan(node, count, args)


# A direct reading of §10 for several GPUs, without the shortcuts of the implementation.
# Keys: (tier, -intra, fragmentation, -bandwidth, -placement, names), smallest is best.
Key = tuple[int, int, int, int, int, tuple[str, ...]]
Outcome = tuple[int, tuple[str, ...], int, int, int]  # tier, gpus, intra, fragmentation, band


def _numa_reference(node: Sequence[TopologyGPU], count: int) -> Outcome:
    domain = {g.name: max(g.numa_node, -1) for g in node}
    sizes = Counter(domain.values())
    fitting = [d for d in sizes if d >= 0 and sizes[d] >= count]
    if fitting:
        options = []
        for d in fitting:
            members = [g for g in node if domain[g.name] == d]
            top = sorted(members, key=lambda g: (-g.placement_score, g.name))[:count]
            names = tuple(sorted(g.name for g in top))
            options.append((sizes[d], -sum(g.placement_score for g in top), names))
        size, _, names = min(options)
        return (1, names, max(50, 100 - 5 * (size - count)), size - count, 0)
    best: Key | None = None
    for combo in combinations(sorted(node, key=lambda g: g.name), count):
        doms = [domain[g.name] for g in combo]
        used = set(doms)
        tier = 3 if used == {-1} else 1 if len(used) == 1 else 2
        affinity = sum(
            0 if a < 0 or b < 0 else 10 if a == b else 2 for a, b in combinations(doms, 2)
        )
        most = comb(count, 2) * 10
        intra = (affinity * 100 + most // 2) // most
        fragmentation = sum(sizes[d] - doms.count(d) for d in used if d >= 0)
        placement = sum(g.placement_score for g in combo)
        names = tuple(g.name for g in combo)
        key = (tier, -intra, fragmentation, 0, -placement, names)
        if best is None or key < best:
            best = key
    assert best is not None
    tier, neg_intra, fragmentation, _, _, names = best
    return (tier, names, -neg_intra, fragmentation, 0)


def _peer_reference(node: Sequence[TopologyGPU], count: int) -> Outcome:
    ordered = sorted(node, key=lambda g: g.name)
    n = len(ordered)

    def reports(a: TopologyGPU, b: TopologyGPU) -> list[PeerLink]:
        return [p for p in a.peers if p.peer_uuid == b.uuid] + [
            p for p in b.peers if p.peer_uuid == a.uuid
        ]

    tier = [[3] * n for _ in range(n)]
    band = [[0] * n for _ in range(n)]
    for i, j in combinations(range(n), 2):
        a, b = ordered[i], ordered[j]
        known = [p.tier for p in reports(a, b) if 0 <= p.tier < 3]
        if known:
            tier[i][j] = tier[j][i] = min(known)
        elif a.numa_node >= 0 and b.numa_node >= 0:
            tier[i][j] = tier[j][i] = 1 if a.numa_node == b.numa_node else 2
        band[i][j] = band[j][i] = max([0] + [p.bandwidth for p in reports(a, b)])
    cluster = list(range(n))
    for i, j in combinations(range(n), 2):
        if tier[i][j] == 0:
            old, new = max(cluster[i], cluster[j]), min(cluster[i], cluster[j])
            cluster = [new if c == old else c for c in cluster]
    sizes = Counter(cluster)

    fitting = []
    for c, size in sizes.items():
        members = [i for i in range(n) if cluster[i] == c]
        if size >= count and all(tier[i][j] == 0 for i, j in combinations(members, 2)):
            top = sorted(members, key=lambda i: (-ordered[i].placement_score, i))[:count]
            fitting.append((size, -sum(ordered[i].placement_score for i in top), sorted(top)))
    if fitting:
        size, _, top = min(fitting)
        bandwidth = sum(band[i][j] for i, j in combinations(top, 2))
        names = tuple(ordered[i].name for i in top)
        return (0, names, max(50, 100 - 5 * (size - count)), size - count, bandwidth)

    best: Key | None = None
    for combo in combinations(range(n), count):
        pairs = list(combinations(combo, 2))
        worst = max(tier[i][j] for i, j in pairs)
        affinity = sum((10, 6, 2, 0)[tier[i][j]] for i, j in pairs)
        most = len(pairs) * 10
        intra = (affinity * 100 + most // 2) // most
        fragmentation = sum(sizes[c] for c in {cluster[i] for i in combo}) - count
        bandwidth = sum(band[i][j] for i, j in pairs)
        placement = sum(ordered[i].placement_score for i in combo)
        names = tuple(ordered[i].name for i in combo)
        key = (worst, -intra, fragmentation, -bandwidth, -placement, names)
        if best is None or key < best:
            best = key
    assert best is not None
    worst, neg_intra, fragmentation, neg_bandwidth, _, names = best
    return (worst, names, -neg_intra, fragmentation, -neg_bandwidth)


@settings(deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(st.data(), nodes(max_gpus=9), st.sampled_from([NUMA, VENDOR]))
def test_several_gpus_match_a_direct_reading_of_the_spec(
    data: st.DataObject, node: list[TopologyGPU], args: TopologyArgs
) -> None:
    assume(len(node) >= 2)
    count = data.draw(st.integers(2, len(node)))
    assert comb(len(node), count) <= 256  # no pruning or greedy fill at this size
    result = plan(node, count, args)
    got = (result.tier, result.gpus, result.intra, result.fragmentation, result.bandwidth)
    if result.evaluator == "numa":
        assert got == _numa_reference(node, count)
    elif result.evaluator == "peer":
        assert got == _peer_reference(node, count)
    else:  # nothing known: the best placement scores, then names
        top = sorted(node, key=lambda g: (-g.placement_score, g.name))[:count]
        assert result.gpus == tuple(sorted(g.name for g in top))
        assert result.tier == 3
