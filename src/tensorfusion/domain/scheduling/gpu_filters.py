"""The GPU filter chain of GPUResourcesFit (scheduling.md §4): one class per stage, registered
in chain order by name.

A stage is one of three kinds: a request check (the quota, decided once per request), a GPU
check (one GPU at a time) or a survivor check (the GPUs of a node left by the GPU checks).
A GPU is removed by the first stage that rejects it; `GPU_FILTERS` is the order, and a stage's
position in it is what a failure records. A new stage is one class here and its place in
`GPU_FILTERS`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Final, Protocol, runtime_checkable

from tensorfusion.domain.allocator.gpu_state import (
    TENSOR_FUSION_USER,
    WHOLE_CARD_MODES,
    GPUState,
    resource_failure,
    whole_card_failure,
)
from tensorfusion.domain.allocator.quota import charge_for, check_single, check_total
from tensorfusion.domain.allocator.records import NodeState
from tensorfusion.domain.vocabulary import GPUPhase, IsolationMode, IsolationPolicy

if TYPE_CHECKING:
    from tensorfusion.domain.scheduling.request_context import RequestContext

__all__ = [
    "GPU_CHECKS",
    "GPU_FILTERS",
    "GPU_STAGES",
    "NODE_STAGES",
    "PASSED",
    "QUOTA_POSITION",
    "SURVIVOR_CHECKS",
    "FilterStage",
    "GPUCheck",
    "RequestCheck",
    "SurvivorCheck",
    "isolation_compatible",
    "phase_failure",
    "revalidation_failure",
    "stage_position",
]


class FilterStage(Protocol):
    """A stage of the chain: its name and whether it applies to a request."""

    name: ClassVar[str]

    def active(self, ctx: RequestContext) -> bool:
        """Whether the stage can remove GPUs for this request (else it is skipped)."""


@runtime_checkable
class RequestCheck(FilterStage, Protocol):
    """A stage decided once per request: it removes every GPU or none."""

    def reject_request(self, ctx: RequestContext) -> str | None:
        """Why the request is refused everywhere, or None."""


@runtime_checkable
class GPUCheck(FilterStage, Protocol):
    """A stage decided per GPU."""

    def reject(self, ctx: RequestContext, gpu: GPUState, explain: bool) -> str | None:
        """Why the GPU is removed, or None; with `explain` False a stage whose text costs a
        format may answer ""."""


@runtime_checkable
class SurvivorCheck(FilterStage, Protocol):
    """A stage decided over the GPUs of a node that passed the GPU checks."""

    def reject_survivors(
        self, ctx: RequestContext, node: NodeState, survivors: list[GPUState]
    ) -> str | None:
        """Why all the survivors are removed, or None."""


def _always(ctx: RequestContext) -> bool:
    return True


@dataclass(frozen=True, slots=True)
class QuotaCheck:
    """Stage 0: the namespace quota admits the request (checked once, scheduling.md §5.1)."""

    name: ClassVar[str] = "QuotaCheck"

    def active(self, ctx: RequestContext) -> bool:
        """Only where the namespace has a quota."""
        return ctx.quota_checked

    def reject_request(self, ctx: RequestContext) -> str | None:
        """The quota's rejection of the request."""
        return ctx.quota_rejection


def _isolation(ctx: RequestContext, gpu: GPUState) -> tuple[bool, str] | None:
    """(policy stage?, reason) of stages 1 and 4, or None."""
    if ctx.plain_static and not _suspect(ctx, gpu):
        return None
    return isolation_failure(ctx, gpu)


def _suspect(ctx: RequestContext, gpu: GPUState) -> bool:
    """Under the Static policy, whether the GPU may fail stage 1 or 4 (the usual GPU, without
    a policy or lock of its own and with the capabilities asked, surely passes both)."""
    mode = ctx.request.isolation
    return (
        (gpu.isolation_policy is not None and gpu.isolation_policy is not IsolationPolicy.STATIC)
        or (mode is not IsolationMode.SHARED and gpu.isolation_mode not in ("", mode))
        or (gpu.capabilities is not None and not gpu.capabilities.supports(mode))
    )


def isolation_failure(ctx: RequestContext, gpu: GPUState) -> tuple[bool, str] | None:
    """Stages 1 and 4 for a GPU's isolation state, memoised per distinct state:
    (True for stage 1, reason), or None."""
    # GPUState.isolation_state() plus the capabilities, spelled out: this runs per GPU.
    key = (
        gpu.isolation_policy,
        gpu.isolation_mode,
        gpu.active_isolation_mode,
        gpu.dynamic_isolation_conflict,
        gpu.capabilities,
    )
    memo = ctx.isolation_memo
    if key in memo:
        return memo[key]
    reason = _policy_failure(ctx, gpu)
    result: tuple[bool, str] | None
    if reason is not None:
        result = (True, reason)
    else:
        mode_reason = _mode_failure(ctx, gpu)
        result = None if mode_reason is None else (False, mode_reason)
    memo[key] = result
    return result


def _policy_failure(ctx: RequestContext, gpu: GPUState) -> str | None:
    mode = ctx.request.isolation
    controller_policy = ctx.allocator.isolation_policy
    policy = gpu.isolation_policy or controller_policy
    if controller_policy is IsolationPolicy.STATIC:
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


def _mode_failure(ctx: RequestContext, gpu: GPUState) -> str | None:
    # Stage 4 also restates the Static and Dynamic rules of stage 1 (§4); a GPU that breaks
    # them never gets here, so only the capabilities remain to check.
    mode = ctx.request.isolation
    caps = gpu.capabilities
    if caps is not None and not caps.supports(mode):
        return f"capabilities do not support {mode} isolation"
    return None


def isolation_compatible(ctx: RequestContext, gpu: GPUState) -> bool:
    """Whether the GPU passes stage 1 (its node score counts only such GPUs, §7.3)."""
    failure = isolation_failure(ctx, gpu)
    return failure is None or not failure[0]


@dataclass(frozen=True, slots=True)
class IsolationPolicyFilter:
    """Stage 1: the GPU's isolation policy and lock admit the request's mode (§5.2)."""

    name: ClassVar[str] = "IsolationPolicy"
    active = staticmethod(_always)

    def reject(self, ctx: RequestContext, gpu: GPUState, explain: bool) -> str | None:
        """The policy's reason, or None."""
        if ctx.plain_static and gpu.isolation_policy is None:
            return _policy_failure(ctx, gpu)  # the usual GPU: the Static rules alone
        failure = _isolation(ctx, gpu)
        return failure[1] if failure is not None and failure[0] else None


_OURS: Final = ("", TENSOR_FUSION_USER)
"""`usedBy` values of a GPU TensorFusion may schedule on."""


def phase_failure(gpu: GPUState) -> str | None:
    """Stage 2 (PhaseFilter) for a GPU: None when it may be scheduled."""
    if gpu.missing:
        return f"GPU is missing since {gpu.missing_since}"
    if gpu.used_by not in _OURS:
        return f"usedBy is {gpu.used_by}"
    if gpu.phase is not GPUPhase.RUNNING:
        return f"phase is {gpu.phase}"
    if gpu.capacity_tflops <= 0 or gpu.capacity_vram <= 0:
        return "capacity is zero"
    return None


@dataclass(frozen=True, slots=True)
class PhaseFilter:
    """Stage 2: the GPU is present, Running, ours and has capacity."""

    name: ClassVar[str] = "PhaseFilter"
    active = staticmethod(_always)

    def reject(self, ctx: RequestContext, gpu: GPUState, explain: bool) -> str | None:
        """The phase's reason, or None."""
        if (
            gpu.phase is GPUPhase.RUNNING
            and not gpu.missing_since
            and gpu.used_by in _OURS
            and gpu.capacity_tflops > 0
            and gpu.capacity_vram > 0
        ):
            return None  # the usual GPU, decided inline
        return phase_failure(gpu)


@dataclass(frozen=True, slots=True)
class GPUIndexFilter:
    """Stage 3: the GPU's index is among the pod's `gpu-indices`."""

    name: ClassVar[str] = "GPUIndexFilter"

    def active(self, ctx: RequestContext) -> bool:
        """Only for a pod that names indices."""
        return bool(ctx.indices)

    def reject(self, ctx: RequestContext, gpu: GPUState, explain: bool) -> str | None:
        """Why the index is not among those asked, or None."""
        if gpu.index is not None and gpu.index in ctx.indices:
            return None
        return f"index {gpu.index} not in gpu-indices {sorted(ctx.indices)}" if explain else ""


@dataclass(frozen=True, slots=True)
class GPUIsolationModeFilter:
    """Stage 4: the GPU's capabilities support the request's isolation mode."""

    name: ClassVar[str] = "GPUIsolationModeFilter"
    active = staticmethod(_always)

    def reject(self, ctx: RequestContext, gpu: GPUState, explain: bool) -> str | None:
        """The capability's reason, or None."""
        if ctx.plain_static and gpu.isolation_policy is None:
            # Stage 1 passed under the Static policy: only the capabilities remain.
            return _mode_failure(ctx, gpu)
        failure = _isolation(ctx, gpu)
        return failure[1] if failure is not None and not failure[0] else None


@dataclass(frozen=True, slots=True)
class SharedWholeGPUFilter:
    """Stage 5: a whole-card pod gets an idle GPU; a GPU held whole takes no shared pod."""

    name: ClassVar[str] = "SharedWholeGPUFilter"

    def active(self, ctx: RequestContext) -> bool:
        """Only for whole-card isolation modes."""
        return ctx.request.isolation in WHOLE_CARD_MODES

    def reject(self, ctx: RequestContext, gpu: GPUState, explain: bool) -> str | None:
        """Why the GPU cannot be taken whole, or None."""
        return whole_card_failure(gpu, ctx.request)


@dataclass(frozen=True, slots=True)
class GPUResourceFilter:
    """Stage 6: the GPU is not held whole by a shared pod and its effective free TFLOPs and
    VRAM cover the request."""

    name: ClassVar[str] = "GPUResourceFilter"
    active = staticmethod(_always)

    def reject(self, ctx: RequestContext, gpu: GPUState, explain: bool) -> str | None:
        """The shortfall (its text only with `explain`), or None."""
        request = ctx.request
        if gpu.whole_holders and request.isolation not in WHOLE_CARD_MODES:
            return whole_card_failure(gpu, request)
        return resource_failure(gpu, request, explain)


@dataclass(frozen=True, slots=True)
class QuotaPercentCheck:
    """Stage 7: the quota's TFLOPs caps with percent values converted with this GPU."""

    name: ClassVar[str] = "QuotaPercentCheck"

    def active(self, ctx: RequestContext) -> bool:
        """Only for a percent request under a quota with TFLOPs caps."""
        return ctx.percent_quota

    def reject(self, ctx: RequestContext, gpu: GPUState, explain: bool) -> str | None:
        """The quota's rejection with this GPU's capacity, or None."""
        request = ctx.request
        quota = ctx.allocator.quotas.get(request.namespace)
        if quota is None:
            return None
        capacity = gpu.capacity_tflops
        return check_single(quota.spec, request, capacity) or check_total(
            quota, charge_for(request, [capacity] * request.count)
        )


@dataclass(frozen=True, slots=True)
class GPUModelFilter:
    """Stage 8: the GPU's model is the one the pod asks for."""

    name: ClassVar[str] = "GPUModelFilter"

    def active(self, ctx: RequestContext) -> bool:
        """Only for a pod that names a model."""
        return ctx.request.gpu_model is not None

    def reject(self, ctx: RequestContext, gpu: GPUState, explain: bool) -> str | None:
        """The model mismatch, or None."""
        wanted = ctx.request.gpu_model
        if wanted is None or gpu.model == wanted:
            return None
        return f"gpuModel is {gpu.model}, request is {wanted}"


@dataclass(frozen=True, slots=True)
class GPUVendorFilter:
    """Stage 9: the GPU's vendor is the one the pod asks for."""

    name: ClassVar[str] = "GPUVendorFilter"

    def active(self, ctx: RequestContext) -> bool:
        """Only for a pod that names a vendor."""
        return ctx.request.vendor is not None

    def reject(self, ctx: RequestContext, gpu: GPUState, explain: bool) -> str | None:
        """The vendor mismatch, or None."""
        wanted = ctx.request.vendor
        if wanted is None or gpu.vendor == wanted:
            return None
        return f"vendor is {gpu.vendor}, request is {wanted}"


@dataclass(frozen=True, slots=True)
class SameNodeFilter:
    """Stage 10: a multi-GPU pod gets all its GPUs on one node."""

    name: ClassVar[str] = "SameNodeFilter"

    def active(self, ctx: RequestContext) -> bool:
        """Only for a pod of more than one GPU."""
        return ctx.request.count > 1

    def reject_survivors(
        self, ctx: RequestContext, node: NodeState, survivors: list[GPUState]
    ) -> str | None:
        """Why too few GPUs of the node are left, or None."""
        count = ctx.request.count
        if count > 1 and 0 < len(survivors) < count:
            return f"node keeps {len(survivors)} of {count} required GPUs"
        return None


@dataclass(frozen=True, slots=True)
class MaxWorkerPerNode:
    """Stage 11: the node runs fewer workers than GPUResourcesFit's `maxWorkerPerNode`."""

    name: ClassVar[str] = "MaxWorkerPerNode"

    def active(self, ctx: RequestContext) -> bool:
        """Only when the plugin sets a limit."""
        return ctx.profile.gpu_fit.max_worker_per_node > 0

    def reject_survivors(
        self, ctx: RequestContext, node: NodeState, survivors: list[GPUState]
    ) -> str | None:
        """Why the node takes no more workers, or None."""
        limit = ctx.profile.gpu_fit.max_worker_per_node
        if survivors and limit > 0 and node.workers >= limit:
            return f"node has {node.workers} workers, maxWorkerPerNode is {limit}"
        return None


GPU_FILTERS: Final[tuple[FilterStage, ...]] = (
    QuotaCheck(),
    IsolationPolicyFilter(),
    PhaseFilter(),
    GPUIndexFilter(),
    GPUIsolationModeFilter(),
    SharedWholeGPUFilter(),
    GPUResourceFilter(),
    QuotaPercentCheck(),
    GPUModelFilter(),
    GPUVendorFilter(),
    SameNodeFilter(),
    MaxWorkerPerNode(),
)
"""The chain in order (scheduling.md §4)."""

GPU_CHECKS: Final = tuple(
    (position, stage) for position, stage in enumerate(GPU_FILTERS) if isinstance(stage, GPUCheck)
)
"""(position, stage) of the per-GPU stages."""

SURVIVOR_CHECKS: Final = tuple(
    (position, stage)
    for position, stage in enumerate(GPU_FILTERS)
    if isinstance(stage, SurvivorCheck)
)
"""(position, stage) of the stages over a node's surviving GPUs."""

QUOTA_POSITION: Final = next(
    position for position, stage in enumerate(GPU_FILTERS) if isinstance(stage, RequestCheck)
)
"""The position of the request-wide quota stage."""

GPU_STAGES: Final = tuple(stage.name for stage in GPU_FILTERS)
"""The stage names in chain order (the explanation's `stages` and `skippedStages`)."""

PASSED: Final = len(GPU_FILTERS)
"""The position a GPU that passes every stage would have."""

NODE_STAGES: Final = (
    "NodeNotInPool",
    "InsufficientGPUs",
    "HypervisorHealth",
    "PodIndexBusy",
    "VirtualCapacity",
    "Topology",
)
"""The node stages after the GPU chain, in order (scheduling.md §4)."""


def stage_position(name: str) -> int:
    """A stage's position in the chain."""
    return GPU_STAGES.index(name)


def revalidation_failure(ctx: RequestContext, gpu: GPUState) -> str | None:
    """Whether a GPU assumed for the request still passes stages 1, 2 and 4 (§12 step 4):
    the stage message, or None. Capacity, quota and worker limits were charged at assume."""
    failure = isolation_failure(ctx, gpu)
    if failure is not None:
        stage = IsolationPolicyFilter.name if failure[0] else GPUIsolationModeFilter.name
        return f"{stage}: {gpu.name}: {failure[1]}"
    reason = phase_failure(gpu)
    return None if reason is None else f"{PhaseFilter.name}: {gpu.name}: {reason}"
