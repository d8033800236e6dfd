"""The GPU plugins' arguments as the allocator takes them, from the scheduler settings."""

from __future__ import annotations

from tensorfusion.domain.allocator.placement import PlacementWeights
from tensorfusion.domain.allocator.request_context import GPUSchedulingArgs
from tensorfusion.domain.scheduling.scheduler_config import SchedulerSettings
from tensorfusion.domain.topology import TopologyArgs

__all__ = ["gpu_scheduling_args"]


def gpu_scheduling_args(settings: SchedulerSettings) -> GPUSchedulingArgs:
    """GPUResourcesFit and GPUNetworkTopologyAware arguments of a scheduler profile."""
    fit = settings.gpu_resources_fit
    topology = settings.topology
    return GPUSchedulingArgs(
        max_worker_per_node=fit.max_worker_per_node,
        weights=PlacementWeights(vram=fit.vram_weight, tflops=fit.tflops_weight),
        topology=TopologyArgs(
            mode=topology.mode,
            source=topology.topology_source,
            max_allowed_tier=topology.max_allowed_tier,
            unknown_policy=topology.unknown_topology_policy,
            prefer_least_damage=topology.prefer_least_damage,
        ),
    )
