"""GPU interconnect topology: tiers, peer links and the placement plan of one node (§10)."""

from tensorfusion.domain.topology.planning import plan_topology
from tensorfusion.domain.topology.vocabulary import (
    MAX_COMBINATIONS,
    TIER_CROSS_NUMA,
    TIER_SAME_INTERCONNECT,
    TIER_SAME_NUMA,
    TIER_UNKNOWN,
    PeerLink,
    TopologyArgs,
    TopologyGPU,
    TopologyPlan,
    is_satisfied,
    tier_banded_score,
    topology_rejection,
)

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
