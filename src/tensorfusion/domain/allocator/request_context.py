"""Everything about one request that does not depend on the node: stage names, the plugin
arguments, the quota pre-check and the isolation compatibility of a GPU (scheduling.md §4, §5.2).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

from tensorfusion.domain.allocation_request import AllocationRequest
from tensorfusion.domain.allocator.allocator import Allocator
from tensorfusion.domain.allocator.gpu_state import WHOLE_CARD_MODES, GPUState
from tensorfusion.domain.allocator.oversubscription import Oversubscription
from tensorfusion.domain.allocator.placement import PlacementWeights
from tensorfusion.domain.allocator.quota import charge_for, check_single, check_total
from tensorfusion.domain.topology import TopologyArgs
from tensorfusion.domain.vocabulary import IsolationMode, IsolationPolicy, PlacementMode

__all__ = [
    "GPU_STAGES",
    "ISOLATION_MODE",
    "ISOLATION_POLICY",
    "NODE_STAGES",
    "PASSED",
    "GPUSchedulingArgs",
    "RequestContext",
]

GPU_STAGES: Final = (
    "QuotaCheck",
    "IsolationPolicy",
    "PhaseFilter",
    "GPUIndexFilter",
    "GPUIsolationModeFilter",
    "SharedWholeGPUFilter",
    "GPUResourceFilter",
    "QuotaPercentCheck",
    "GPUModelFilter",
    "GPUVendorFilter",
    "SameNodeFilter",
    "MaxWorkerPerNode",
)
NODE_STAGES: Final = (
    "NodeNotInPool",
    "InsufficientGPUs",
    "HypervisorHealth",
    "PodIndexBusy",
    "VirtualCapacity",
    "Topology",
)
(
    QUOTA_CHECK,
    ISOLATION_POLICY,
    PHASE_FILTER,
    GPU_INDEX,
    ISOLATION_MODE,
    SHARED_WHOLE,
    RESOURCE,
    QUOTA_PERCENT,
    MODEL,
    VENDOR,
    SAME_NODE,
    MAX_WORKER,
) = range(12)
PASSED: Final = len(GPU_STAGES)


@dataclass(frozen=True, slots=True)
class GPUSchedulingArgs:
    """Arguments of the GPU plugins (GPUResourcesFit and GPUNetworkTopologyAware)."""

    max_worker_per_node: int = 256
    weights: PlacementWeights = field(default_factory=PlacementWeights)
    topology: TopologyArgs = field(default_factory=TopologyArgs)


@dataclass(slots=True)
class RequestContext:
    """Everything about one request that does not depend on the node."""

    allocator: Allocator
    request: AllocationRequest
    args: GPUSchedulingArgs
    placement_mode: PlacementMode
    topology: TopologyArgs
    quota_rejection: str | None
    quota_checked: bool
    percent_quota: bool
    active: tuple[bool, ...]
    indices: frozenset[int]
    oversubscription: Oversubscription | None = None
    plain_static: bool = False
    isolation_memo: dict[tuple[object, ...], tuple[int, str] | None] = field(default_factory=dict)

    @classmethod
    def build(
        cls, allocator: Allocator, request: AllocationRequest, args: GPUSchedulingArgs
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
        active = (
            quota is not None,
            True,
            True,
            bool(request.gpu_indices),
            True,
            request.isolation in WHOLE_CARD_MODES,
            True,
            percent_quota,
            request.gpu_model is not None,
            request.vendor is not None,
            request.count > 1,
            args.max_worker_per_node > 0,
        )
        return cls(
            allocator=allocator,
            request=request,
            args=args,
            placement_mode=allocator.pool(request.pool).placement_mode,
            oversubscription=allocator.pool(request.pool).oversubscription,
            plain_static=allocator.isolation_policy is IsolationPolicy.STATIC,
            topology=args.topology.with_overrides(request.topology),
            quota_rejection=rejection,
            quota_checked=quota is not None,
            percent_quota=percent_quota,
            active=active,
            indices=frozenset(request.gpu_indices),
        )

    def isolation_compatible(self, gpu: GPUState) -> str | None:
        """Stage 1 (§5.2): None when compatible, else the reason."""
        failure = self.isolation_failure(gpu)
        return failure[1] if failure is not None and failure[0] == ISOLATION_POLICY else None

    def isolation_failure(self, gpu: GPUState) -> tuple[int, str] | None:
        """Stages 1 and 4 for a GPU's isolation state, memoised per distinct state."""
        # GPUState.isolation_state() plus the capabilities, spelled out: this runs per GPU.
        key = (
            gpu.isolation_policy,
            gpu.isolation_mode,
            gpu.active_isolation_mode,
            gpu.dynamic_isolation_conflict,
            gpu.capabilities,
        )
        memo = self.isolation_memo
        if key in memo:
            return memo[key]
        reason = self._policy_failure(gpu)
        result: tuple[int, str] | None
        if reason is not None:
            result = (ISOLATION_POLICY, reason)
        else:
            mode_reason = self._mode_failure(gpu)
            result = None if mode_reason is None else (ISOLATION_MODE, mode_reason)
        memo[key] = result
        return result

    def _policy_failure(self, gpu: GPUState) -> str | None:
        mode = self.request.isolation
        policy = gpu.isolation_policy or self.allocator.isolation_policy
        if self.allocator.isolation_policy is IsolationPolicy.STATIC:
            if policy is not IsolationPolicy.STATIC:
                return f"isolationPolicy is {policy}, controller policy is Static"
            if mode is IsolationMode.SHARED or gpu.isolation_mode in ("", mode):
                return None
            return f"isolationMode is {gpu.isolation_mode}, request is {mode}"
        if policy is not IsolationPolicy.DYNAMIC:
            return f"isolationPolicy is {policy}, controller policy is Dynamic"
        if mode is IsolationMode.PARTITIONED:
            return "partitioned isolation is refused under the Dynamic policy"
        if gpu.dynamic_isolation_conflict:
            return "dynamicIsolationConflict is true"
        if gpu.active_isolation_mode not in ("", mode):
            return f"activeIsolationMode is {gpu.active_isolation_mode}, request is {mode}"
        return None

    def _mode_failure(self, gpu: GPUState) -> str | None:
        # Stage 4 also restates the Static and Dynamic rules of stage 1 (§4); a GPU that
        # breaks them never gets here, so only the capabilities remain to check.
        mode = self.request.isolation
        caps = gpu.capabilities
        if caps is not None and not caps.supports(mode):
            return f"capabilities do not support {mode} isolation"
        return None
