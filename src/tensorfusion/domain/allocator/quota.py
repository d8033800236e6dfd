"""GPUResourceQuota caps, usage and checks (scheduling.md §9)."""

from __future__ import annotations

from dataclasses import dataclass, field

from tensorfusion.domain.allocation_request import AllocationRequest, ResourceAmount
from tensorfusion.domain.model.quota import QuotaTotal
from tensorfusion.domain.quantities import format_bytes, format_milli

__all__ = ["QuotaAmounts", "QuotaCaps", "QuotaSpec", "quota_message"]

_TOTAL_FIELDS = QuotaTotal.model_fields
DEFAULT_MAX_WORKERS: int = _TOTAL_FIELDS["max_workers"].default
DEFAULT_ALERT_THRESHOLD_PERCENT: int = _TOTAL_FIELDS["alert_threshold_percent"].default


@dataclass(frozen=True, slots=True)
class QuotaCaps:
    """TFLOPs (milli) and VRAM (bytes) caps; zero = not enforced."""

    tflops: int = 0
    vram: int = 0


@dataclass(frozen=True, slots=True)
class QuotaSpec:
    """The effective GPUResourceQuota of one namespace (`allocator.mapping.quota_spec` builds
    it from the model, whose defaults it shares)."""

    namespace: str
    name: str
    total_requests: QuotaCaps = QuotaCaps()
    total_limits: QuotaCaps = QuotaCaps()
    max_workers: int = DEFAULT_MAX_WORKERS
    single_max_requests: QuotaCaps = QuotaCaps()
    single_max_limits: QuotaCaps = QuotaCaps()
    single_max_gpu_count: int = 0
    alert_threshold_percent: int = DEFAULT_ALERT_THRESHOLD_PERCENT

    def has_tflops_cap(self) -> bool:
        """Whether any TFLOPs cap is set (percent requests are then checked per GPU)."""
        return bool(
            self.total_requests.tflops
            or self.total_limits.tflops
            or self.single_max_requests.tflops
            or self.single_max_limits.tflops
        )


@dataclass(slots=True)
class QuotaAmounts:
    """Summed requests, limits and workers of a namespace's allocations."""

    request_tflops: int = 0
    request_vram: int = 0
    limit_tflops: int = 0
    limit_vram: int = 0
    workers: int = 0

    def add(self, other: QuotaAmounts, sign: int = 1) -> None:
        """Add (or with sign −1 subtract) another usage."""
        self.request_tflops += sign * other.request_tflops
        self.request_vram += sign * other.request_vram
        self.limit_tflops += sign * other.limit_tflops
        self.limit_vram += sign * other.limit_vram
        self.workers += sign * other.workers

    def to_json(self) -> dict[str, object]:
        """The `used`/`assumed` object of `/api/allocation`."""
        return {
            "requests": ResourceAmount(self.request_tflops, 0, self.request_vram).to_json(),
            "limits": ResourceAmount(self.limit_tflops, 0, self.limit_vram).to_json(),
            "workers": self.workers,
        }


@dataclass(slots=True)
class NamespaceQuota:
    """A namespace's quota with its committed and assumed usage."""

    spec: QuotaSpec
    committed: QuotaAmounts = field(default_factory=QuotaAmounts)
    assumed: QuotaAmounts = field(default_factory=QuotaAmounts)


def quota_message(namespace: str, resource: str, requested: str, cap: str) -> str:
    """The quota rejection text of scheduling.md §9."""
    return (
        f"GPU quota exceeded in namespace {namespace}: {resource} requested {requested}, "
        f"limit {cap}"
    )


def check_single(
    spec: QuotaSpec, request: AllocationRequest, capacity_tflops: int = 0
) -> str | None:
    """Per-pod caps; None when they hold. Percent values are converted with
    `capacity_tflops` (0, before a GPU is chosen, leaves them to the per-GPU check)."""
    ns = spec.namespace
    pairs = (
        ("single.maxRequests.tflops", request.request.tflops_on(capacity_tflops),
         spec.single_max_requests.tflops),
        ("single.maxLimits.tflops", request.limit.tflops_on(capacity_tflops),
         spec.single_max_limits.tflops),
    )  # fmt: skip
    for resource, value, cap in pairs:
        if cap and value > cap:
            return quota_message(ns, resource, format_milli(value), format_milli(cap))
    vram_pairs = (
        ("single.maxRequests.vram", request.request.vram_bytes, spec.single_max_requests.vram),
        ("single.maxLimits.vram", request.limit.vram_bytes, spec.single_max_limits.vram),
    )
    for resource, value, cap in vram_pairs:
        if cap and value > cap:
            return quota_message(ns, resource, format_bytes(value), format_bytes(cap))
    if spec.single_max_gpu_count and request.count > spec.single_max_gpu_count:
        return quota_message(
            ns, "single.maxGPUCount", str(request.count), str(spec.single_max_gpu_count)
        )
    return None


def check_total(
    quota: NamespaceQuota, charge: QuotaAmounts, growing_only: bool = False
) -> str | None:
    """Namespace-wide caps: committed + assumed + this charge; None when they hold.

    `growing_only` checks only the components the charge raises (a resize that lowers usage
    is never refused, even in a namespace already over a lowered cap).
    """
    spec = quota.spec
    ns = spec.namespace
    used = QuotaAmounts()
    used.add(quota.committed)
    used.add(quota.assumed)
    checks = (
        ("total.requests.tflops", used.request_tflops, charge.request_tflops,
         spec.total_requests.tflops, format_milli),
        ("total.requests.vram", used.request_vram, charge.request_vram,
         spec.total_requests.vram, format_bytes),
        ("total.limits.tflops", used.limit_tflops, charge.limit_tflops,
         spec.total_limits.tflops, format_milli),
        ("total.limits.vram", used.limit_vram, charge.limit_vram,
         spec.total_limits.vram, format_bytes),
    )  # fmt: skip
    for resource, before, added, cap, fmt in checks:
        if growing_only and added <= 0:
            continue
        if cap and before + added > cap:
            return quota_message(ns, resource, fmt(before + added), fmt(cap))
    if growing_only and charge.workers <= 0:
        return None
    if used.workers + charge.workers > spec.max_workers:
        return quota_message(
            ns, "total.maxWorkers", str(used.workers + charge.workers), str(spec.max_workers)
        )
    return None


def charge_for(request: AllocationRequest, capacities: list[int]) -> QuotaAmounts:
    """What an allocation charges: value × count (percent converted per GPU) and one worker.

    `capacities` are the TFLOPs capacities (milli) of the GPUs it takes (or, for a check
    before GPUs are chosen, `count` copies of the capacity to convert with).
    """
    return QuotaAmounts(
        request_tflops=sum(request.request.tflops_on(c) for c in capacities),
        request_vram=request.request.vram_bytes * request.count,
        limit_tflops=sum(request.limit.tflops_on(c) for c in capacities),
        limit_vram=request.limit.vram_bytes * request.count,
        workers=1,
    )
