"""Everything about one request that does not depend on the node: the plugin arguments, the
placement mode, the quota pre-check and the GPU filter stages that apply (scheduling.md §4,
§5.2).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from tensorfusion.domain.allocation_request import AllocationRequest
from tensorfusion.domain.allocator.allocator import Allocator
from tensorfusion.domain.allocator.gpu_state import GPUState
from tensorfusion.domain.allocator.oversubscription import OversubscriptionSettings
from tensorfusion.domain.allocator.quota import charge_for, check_single, check_total
from tensorfusion.domain.allocator.records import NodeState
from tensorfusion.domain.scheduling.gpu_filters import GPU_CHECKS, GPU_FILTERS, SURVIVOR_CHECKS
from tensorfusion.domain.scheduling.placement_modes import PlacementModePlugin, plugin_of
from tensorfusion.domain.scheduling.scheduler_config import SchedulingProfile
from tensorfusion.domain.topology import TopologyArgs
from tensorfusion.domain.vocabulary import IsolationPolicy, PlacementMode

__all__ = ["RequestContext"]

GPURejection = Callable[["RequestContext", GPUState, bool], "str | None"]
SurvivorRejection = Callable[["RequestContext", NodeState, list[GPUState]], "str | None"]


@dataclass(slots=True)
class RequestContext:
    """Everything about one request that does not depend on the node."""

    allocator: Allocator
    request: AllocationRequest
    profile: SchedulingProfile
    placement: PlacementModePlugin
    topology: TopologyArgs
    quota_rejection: str | None
    quota_checked: bool
    percent_quota: bool
    indices: frozenset[int]
    oversubscription: OversubscriptionSettings | None = None
    plain_static: bool = False
    isolation_memo: dict[tuple[object, ...], tuple[bool, str] | None] = field(default_factory=dict)
    gpu_checks: tuple[tuple[int, GPURejection], ...] = ()
    """(position, check) of the GPU stages that apply to the request, in chain order."""
    survivor_checks: tuple[tuple[int, SurvivorRejection], ...] = ()
    """(position, check) of the survivor stages that apply, in chain order."""

    @classmethod
    def build(
        cls, allocator: Allocator, request: AllocationRequest, profile: SchedulingProfile
    ) -> RequestContext:
        """Resolve placement mode, topology overrides, active stages and the quota check."""
        quota = allocator.quotas.get(request.namespace)
        rejection: str | None = None
        percent_quota = False
        if quota is not None:
            rejection = check_single(quota.spec, request) or check_total(
                quota, charge_for(request, [0] * request.count)
            )
            uses_percent = bool(request.request.percent_milli or request.limit.percent_milli)
            percent_quota = uses_percent and quota.spec.has_tflops_cap()
        ctx = cls(
            allocator=allocator,
            request=request,
            profile=profile,
            placement=plugin_of(allocator.pool(request.pool).placement_mode),
            oversubscription=allocator.pool(request.pool).oversubscription,
            plain_static=allocator.isolation_policy is IsolationPolicy.STATIC,
            topology=profile.topology.with_overrides(request.topology),
            quota_rejection=rejection,
            quota_checked=quota is not None,
            percent_quota=percent_quota,
            indices=frozenset(request.gpu_indices),
        )
        ctx.gpu_checks = tuple((p, s.reject) for p, s in GPU_CHECKS if s.active(ctx))
        ctx.survivor_checks = tuple(
            (p, s.reject_survivors) for p, s in SURVIVOR_CHECKS if s.active(ctx)
        )
        return ctx

    @property
    def placement_mode(self) -> PlacementMode:
        """The pool's placement mode."""
        return self.placement.mode

    @property
    def active(self) -> tuple[bool, ...]:
        """Per stage of the chain, whether it applies to the request."""
        return tuple(stage.active(self) for stage in GPU_FILTERS)
