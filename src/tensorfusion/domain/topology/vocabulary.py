"""Shared vocabulary of topology evaluation: tiers, GPUs, arguments, plans and the constraint (§10).

Tiers: 0 same interconnect (NVLink/HCCS/XGMI), 1 same NUMA node, 2 cross NUMA, 3 unknown.
`topology_rejection` is the hard-mode node filter.
"""

from __future__ import annotations

from dataclasses import dataclass
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
    "tier_banded_score",
    "topology_rejection",
]

TIER_SAME_INTERCONNECT: Final = 0
TIER_SAME_NUMA: Final = 1
TIER_CROSS_NUMA: Final = 2
TIER_UNKNOWN: Final = 3
MAX_COMBINATIONS: Final = 256
"""Combination search limit: beyond it the search is pruned, then greedy."""


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
