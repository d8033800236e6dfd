"""The right-sizing what-if's request of each pod (`simulate --auto-scale`, docs/simulator.md):
the per-GPU request and limit its workload would run with once the autoscaler had seen its
usage profile.

The pods of a trace entry are alike, so they get one plan, made at the first one admitted. Its
settings are the autoscaler's: the entry's own `autoScalingConfig` over the first matching
`verticalScalingRules` entry of its pool (`resolve_config`), parsed by `parse_auto_set`, the
defaults where neither says anything; the recommendation is `recommend`'s, fed the percentiles
of the profile (`right_size`). Every entry with a `usage` profile is right-sized unless its
config says `enable: false`: `enable` unset counts as on, since the what-if turns it on.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from tensorfusion.domain.admission.dry_run import PreparedPod
from tensorfusion.domain.allocation_request import AllocationRequest, ResourceAmount
from tensorfusion.domain.autoscaling.config_resolution import resolve_config
from tensorfusion.domain.autoscaling.recommendation import Recommendation
from tensorfusion.domain.autoscaling.settings import AutoScaleConfigError, parse_auto_set
from tensorfusion.domain.autoscaling.usage_profile import right_size, sample_counts
from tensorfusion.domain.model.scheduling import VerticalScalingRule
from tensorfusion.domain.object_views import labels_of
from tensorfusion.sim.engine import SimPod
from tensorfusion.sim.input_errors import InputError
from tensorfusion.sim.workload_file import TraceEntry, WorkloadFile

__all__ = ["RightSizer", "WorkloadPlan"]


@dataclass(frozen=True, slots=True)
class WorkloadPlan:
    """One entry's right-sizing: its per-GPU request and limit as admitted, the recommendation
    (None: not right-sized), where its settings came from, and why."""

    entry: int
    name: str
    namespace: str
    gpus: int
    requests: ResourceAmount
    limits: ResourceAmount
    recommendation: Recommendation | None
    source: str
    reason: str
    warnings: tuple[str, ...] = ()
    """Resources whose profile's highest use is above the right-sized limit."""

    @property
    def changed(self) -> bool:
        """Whether its pods are placed with another request or limit."""
        return self.recommendation is not None and self.recommendation.change

    @property
    def new_requests(self) -> ResourceAmount:
        """The per-GPU request its pods are placed with in the right-sized run."""
        return self.recommendation.requests if self.recommendation else self.requests

    @property
    def new_limits(self) -> ResourceAmount:
        """The per-GPU limit its pods are placed with in the right-sized run."""
        return self.recommendation.limits if self.recommendation else self.limits


def _why(found: Recommendation, entry: TraceEntry, requests: ResourceAmount, target: str) -> str:
    usage = entry.usage
    assert usage is not None
    parts = []
    for name, given, result, asked in (
        ("tflops", usage.tflops, found.compute, requests.tflops_milli),
        ("vram", usage.vram, found.vram, requests.vram_bytes),
    ):
        if result is not None:
            parts.append(result.reason if given is not None else f"{name}: no usage profile")
        elif given is not None and not asked:
            parts.append(f"{name}: " + ("compute asked as a percent (the autoscaler sizes TFLOPS)"
                                        if name == "tflops" else "no request"))  # fmt: skip
        elif given is not None:
            parts.append(f"{name}: not targeted (targetResource {target})")
    return "; ".join(parts)


def _workers(entry: TraceEntry, request: AllocationRequest) -> int:
    """The workers of the pod's workload: the entry's pods when admission gives them one (their
    controller in `ownerReferences`), else one (a bare pod is a workload of its own)."""
    return 1 if request.workload == request.pod_name else entry.replicas


def _gib(count: float) -> str:
    return f"{count / 2**30:.1f}".removesuffix(".0") + "Gi"


def _above_limit(found: Recommendation, entry: TraceEntry, requests: ResourceAmount) -> list[str]:
    """The right-sized resources whose highest use in the profile is above their new limit:
    TFLOPS above it are throttled, VRAM above it is out of memory (or host memory)."""
    assert entry.usage is not None
    profile = entry.usage.profile()
    warnings = []
    for name, result, points, asked, limit, shown in (
        ("tflops", found.compute, profile.compute, requests.tflops_milli,
         found.limits.tflops_milli, lambda v: f"{v / 1000:.1f}".removesuffix(".0")),
        ("vram", found.vram, profile.vram, requests.vram_bytes, found.limits.vram_bytes, _gib),
    ):  # fmt: skip
        if result is None or not result.change or points is None:
            continue
        peak = max((f for f, _ in sample_counts(points, entry.duration)), default=0.0) * asked
        if peak > limit:
            warnings.append(f"{name}: the highest use, {shown(peak)}, is above the right-sized "
                            f"limit {shown(limit)}")  # fmt: skip
    return warnings


@dataclass(slots=True)
class RightSizer:
    """The engine's `resize` hook: the right-sized request of each admitted pod whose entry has a
    usage profile; `plans` keeps each entry's plan, made at its first admitted pod."""

    workload: WorkloadFile
    rules: Mapping[str, Sequence[VerticalScalingRule]]
    plans: dict[tuple[int, AllocationRequest], WorkloadPlan] = field(default_factory=dict)

    def __call__(self, pod: SimPod, prepared: PreparedPod) -> AllocationRequest:
        """The request `pod` is placed with: admission's, right-sized when planned so."""
        request = prepared.request
        if self.workload.workloads[pod.entry_index].usage is None:
            return request
        plan = self.plan_of(pod.entry_index, request)
        if plan is None:
            plan = self._plan(pod.entry_index, request, prepared)
            self.plans[self._key(pod.entry_index, request)] = plan
        if not plan.changed:
            return request
        return replace(request, request=plan.new_requests, limit=plan.new_limits)

    def plan_of(self, entry: int, request: AllocationRequest) -> WorkloadPlan | None:
        """The plan made for pods of `entry` admitted with `request`, if any."""
        return self.plans.get(self._key(entry, request))

    @staticmethod
    def _key(entry: int, request: AllocationRequest) -> tuple[int, AllocationRequest]:
        # The pods of an entry are admitted alike but for their name, uid, pod index and, when
        # each is a workload of its own, workload name.
        return entry, replace(request, pod_name="", pod_uid="", pod_index=None, workload="")

    def _plan(self, index: int, request: AllocationRequest, prepared: PreparedPod) -> WorkloadPlan:
        entry = self.workload.workloads[index]
        assert entry.usage is not None
        resolved = resolve_config(entry.auto_scaling_config, self.rules.get(request.pool, ()),
                                  labels_of(prepared.pod))  # fmt: skip
        auto = resolved.config.auto_set_resources if resolved is not None else None
        source = resolved.source if resolved is not None and auto is not None else "defaults"
        plan = WorkloadPlan(
            entry=index, name=entry.name, namespace=entry.namespace, gpus=request.count,
            requests=request.request, limits=request.limit, recommendation=None,
            source=source, reason="",
        )  # fmt: skip
        if auto is not None and auto.enable is False:
            return replace(plan, reason=f"autoSetResources.enable is false ({source})")
        try:
            settings = parse_auto_set(auto)
        except AutoScaleConfigError as exc:
            raise InputError(f"workload: workloads[{index}] ({entry.name}): autoScalingConfig "
                             f"({source}): autoSetResources.{exc}") from None  # fmt: skip
        found = right_size(
            settings, requests=request.request, limits=request.limit,
            usage=entry.usage.profile(), duration_s=entry.duration,
            rows_per_sample=_workers(entry, request) * request.count,
        )  # fmt: skip
        reason = _why(found, entry, request.request, settings.target_resource)
        warnings = tuple(_above_limit(found, entry, request.request))
        return replace(plan, recommendation=found, reason=reason, warnings=warnings)
