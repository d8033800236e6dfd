"""GPUNetworkTopologyAware: which GPUs of one node a pod should get, and at what tier (§10).

`plan_topology` evaluates the valid GPUs of one node for a request of `count` GPUs with the
NUMA or the peer evaluator, whichever the source and the data select. Everything here is pure
and deterministic: the result never depends on the order of the candidates or of their peer
links. GPU names and UUIDs are assumed unique among the candidates of one node.
"""

from __future__ import annotations

from collections.abc import Sequence

from tensorfusion.domain.topology.numa import numa_plan
from tensorfusion.domain.topology.peer import peer_plan
from tensorfusion.domain.topology.selection import placement_rank, sorted_names
from tensorfusion.domain.topology.vocabulary import (
    TIER_UNKNOWN,
    TopologyArgs,
    TopologyGPU,
    TopologyPlan,
)
from tensorfusion.domain.vocabulary import TopologySource

__all__ = ["plan_topology"]


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
            return numa_plan(candidates, count, least_damage)
    elif source == TopologySource.VENDOR:
        # Peer evaluator even without peer data (pairs then fall back to NUMA tiers).
        if _any_peers(candidates) or _any_numa(candidates):
            return peer_plan(candidates, count, least_damage)
    elif _any_peers(candidates):
        return peer_plan(candidates, count, least_damage)
    elif _any_numa(candidates):
        return numa_plan(candidates, count, least_damage)
    # Nothing known (also for a forced source without its data: both evaluators would pick
    # exactly these GPUs at tier 3 then, only slower).
    return _no_data_plan(candidates, count)


def _any_peers(gpus: Sequence[TopologyGPU]) -> bool:
    return any(g.peers for g in gpus)


def _any_numa(gpus: Sequence[TopologyGPU]) -> bool:
    return any(g.numa_node >= 0 for g in gpus)


def _no_data_plan(candidates: Sequence[TopologyGPU], count: int) -> TopologyPlan:
    """Tier 3: the top `count` GPUs by placement score, then name."""
    chosen = (
        [min(candidates, key=placement_rank)]
        if count == 1
        else sorted(candidates, key=placement_rank)[:count]
    )
    return TopologyPlan(
        tier=TIER_UNKNOWN,
        gpus=sorted_names(chosen),
        intra=0,
        fragmentation=0,
        bandwidth=0,
        reason="no topology data available, using unknown tier",
        placement=sum(g.placement_score for g in chosen),
    )
