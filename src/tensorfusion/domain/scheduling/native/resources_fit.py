"""NodeResourcesFit: the request-fits-allocatable filter and the three scoring strategies.

Scores follow kube-scheduler in integer arithmetic (Go division truncates toward zero):

* `LeastAllocated`: per resource `(allocatable − requested) × 100 div allocatable` (0 if over),
  node score `Σ score × weight div Σ weight`.
* `MostAllocated`: per resource `min(requested, allocatable) × 100 div allocatable`, same mean.
* `RequestedToCapacityRatio`: per resource `u = requested × 100 div allocatable` (100 if over),
  a piecewise-linear score of u from the shape (scores 0..10 scaled ×10), node score the
  weight-averaged mean over resources with a positive score, rounded half away from zero.

A resource enters only when the node's allocatable of it is positive, and an extended (scalar)
resource only when the pod requests it. `requested` includes the pod; cpu and memory use the
non-zero variants (100m and 200Mi for containers without a request).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Final

from tensorfusion.domain.scheduling.native.node import NodeFacts
from tensorfusion.domain.scheduling.native.resources import (
    CPU,
    EPHEMERAL_STORAGE,
    MEMORY,
    NodeUsage,
    PodResources,
    is_extended_resource_name,
    is_scalar_resource_name,
)

__all__ = [
    "DEFAULT_RESOURCE_WEIGHTS",
    "MAX_CUSTOM_PRIORITY_SCORE",
    "MAX_NODE_SCORE",
    "MAX_UTILIZATION",
    "NODE_RESOURCES_FIT",
    "NodeResourcesFitArgs",
    "ResourceWeight",
    "ResourcesFitChecker",
    "ResourcesFitScorer",
    "ScoringStrategy",
    "ScoringStrategyType",
    "ShapePoint",
]

NODE_RESOURCES_FIT: Final = "NodeResourcesFit"
MAX_NODE_SCORE: Final = 100
MAX_CUSTOM_PRIORITY_SCORE: Final = 10
MAX_UTILIZATION: Final = 100


class ScoringStrategyType(StrEnum):
    """NodeResourcesFit `scoringStrategy.type`."""

    LEAST_ALLOCATED = "LeastAllocated"
    MOST_ALLOCATED = "MostAllocated"
    REQUESTED_TO_CAPACITY_RATIO = "RequestedToCapacityRatio"


@dataclass(frozen=True, slots=True)
class ResourceWeight:
    """One `scoringStrategy.resources` entry."""

    name: str
    weight: int = 1


@dataclass(frozen=True, slots=True)
class ShapePoint:
    """One `requestedToCapacityRatio.shape` point: utilization 0..100 → score 0..10."""

    utilization: int
    score: int


DEFAULT_RESOURCE_WEIGHTS: Final = (ResourceWeight(CPU, 1), ResourceWeight(MEMORY, 1))


@dataclass(frozen=True, slots=True)
class ScoringStrategy:
    """`scoringStrategy`; the default is kube-scheduler's (LeastAllocated, cpu 1, memory 1)."""

    type: ScoringStrategyType = ScoringStrategyType.LEAST_ALLOCATED
    resources: tuple[ResourceWeight, ...] = DEFAULT_RESOURCE_WEIGHTS
    shape: tuple[ShapePoint, ...] = ()

    def __post_init__(self) -> None:
        if self.type is ScoringStrategyType.REQUESTED_TO_CAPACITY_RATIO and not self.shape:
            raise ValueError("RequestedToCapacityRatio needs at least one shape point")


@dataclass(frozen=True, slots=True)
class NodeResourcesFitArgs:
    """NodeResourcesFit plugin args (kube-scheduler's defaults when constructed empty)."""

    ignored_resources: frozenset[str] = frozenset()
    ignored_resource_groups: frozenset[str] = frozenset()
    scoring_strategy: ScoringStrategy = field(default_factory=ScoringStrategy)

    def with_ignored_resources(self, names: Iterable[str]) -> NodeResourcesFitArgs:
        """A copy whose `ignoredResources` are the given names.

        kube-scheduler replaces `ignoredResources` with the extenders' `ignoredByScheduler`
        resources when there are any.
        """
        return NodeResourcesFitArgs(
            ignored_resources=frozenset(names),
            ignored_resource_groups=self.ignored_resource_groups,
            scoring_strategy=self.scoring_strategy,
        )

    def is_ignored(self, name: str) -> bool:
        """Whether the filter skips this resource (extended resources only)."""
        if not is_extended_resource_name(name):
            return False
        return (
            name in self.ignored_resources or name.split("/", 1)[0] in self.ignored_resource_groups
        )


class ResourcesFitChecker:
    """The NodeResourcesFit filter for one set of args (ignored-resource answers are cached)."""

    __slots__ = ("_args", "_ignored")

    def __init__(self, args: NodeResourcesFitArgs | None = None) -> None:
        self._args = args or NodeResourcesFitArgs()
        self._ignored: dict[str, bool] = {}

    @property
    def args(self) -> NodeResourcesFitArgs:
        """The plugin args."""
        return self._args

    def reasons(self, pod: PodResources, node: NodeFacts, usage: NodeUsage) -> list[str]:
        """kube-scheduler's insufficiency reasons, in its order (scalar resources by name)."""
        reasons: list[str] = []
        if usage.pods + 1 > node.allowed_pods:
            reasons.append("Too many pods")
        requests = pod.requests
        allocatable = node.allocatable
        if requests.cpu_milli > 0 and requests.cpu_milli > allocatable.cpu_milli - usage.cpu_milli:
            reasons.append("Insufficient cpu")
        if requests.memory > 0 and requests.memory > allocatable.memory - usage.memory:
            reasons.append("Insufficient memory")
        if (
            requests.ephemeral_storage > 0
            and requests.ephemeral_storage > allocatable.ephemeral_storage - usage.ephemeral_storage
        ):
            reasons.append("Insufficient ephemeral-storage")
        if requests.scalar:
            for name in sorted(requests.scalar):
                amount = requests.scalar[name]
                if amount == 0 or self._is_ignored(name):
                    continue
                if amount > allocatable.scalar.get(name, 0) - usage.scalar.get(name, 0):
                    reasons.append(f"Insufficient {name}")
        return reasons

    def fits(self, pod: PodResources, node: NodeFacts, usage: NodeUsage) -> bool:
        """Whether the filter passes (`reasons` is empty), without building any text."""
        if usage.pods + 1 > node.allowed_pods:
            return False
        requests = pod.requests
        allocatable = node.allocatable
        if requests.cpu_milli > 0 and requests.cpu_milli > allocatable.cpu_milli - usage.cpu_milli:
            return False
        if requests.memory > 0 and requests.memory > allocatable.memory - usage.memory:
            return False
        if (
            requests.ephemeral_storage > 0
            and requests.ephemeral_storage > allocatable.ephemeral_storage - usage.ephemeral_storage
        ):
            return False
        for name, amount in requests.scalar.items():
            if amount == 0 or self._is_ignored(name):
                continue
            if amount > allocatable.scalar.get(name, 0) - usage.scalar.get(name, 0):
                return False
        return True

    def check(self, pod: PodResources, node: NodeFacts, usage: NodeUsage) -> str | None:
        """The filter's message (reasons joined by ", "), or None when the pod fits."""
        reasons = self.reasons(pod, node, usage)
        return ", ".join(reasons) if reasons else None

    def _is_ignored(self, name: str) -> bool:
        answer = self._ignored.get(name)
        if answer is None:
            answer = self._ignored[name] = self._args.is_ignored(name)
        return answer


_CPU_KIND, _MEMORY_KIND, _STORAGE_KIND, _SCALAR_KIND, _OTHER_KIND = range(5)


class ResourcesFitScorer:
    """NodeResourcesFit's score (0..100) of a pod on a node under one scoring strategy."""

    __slots__ = ("_increasing", "_resource_score", "_resources", "_table", "strategy")

    def __init__(self, strategy: ScoringStrategy | None = None) -> None:
        self.strategy = strategy or ScoringStrategy()
        self._resources = tuple((r.name, r.weight, _kind(r.name)) for r in self.strategy.resources)
        kind = self.strategy.type
        self._resource_score: Callable[[int, int], int] = _least_allocated
        if kind is ScoringStrategyType.MOST_ALLOCATED:
            self._resource_score = _most_allocated
        # RequestedToCapacityRatio: utilization is an integer 0..100, so tabulate the shape.
        self._table: tuple[int, ...] | None = None
        if kind is ScoringStrategyType.REQUESTED_TO_CAPACITY_RATIO:
            self._table = _shape_table(self.strategy.shape)
        table = self._table
        self._increasing = kind is not ScoringStrategyType.LEAST_ALLOCATED and (
            table is None or all(a <= b for a, b in itertools.pairwise(table))
        )

    def score(self, pod: PodResources, node: NodeFacts, usage: NodeUsage) -> int:
        """The node score for the pod (the pod's own requests count as requested)."""
        allocatable_amounts = node.allocatable
        table = self._table
        total = 0
        weights = 0
        for name, weight, kind in self._resources:
            if kind == _CPU_KIND:
                allocatable = allocatable_amounts.cpu_milli
                requested = usage.non_zero_cpu_milli + pod.non_zero_cpu_milli
            elif kind == _MEMORY_KIND:
                allocatable = allocatable_amounts.memory
                requested = usage.non_zero_memory + pod.non_zero_memory
            elif kind == _STORAGE_KIND:
                allocatable = allocatable_amounts.ephemeral_storage
                requested = usage.ephemeral_storage + pod.requests.ephemeral_storage
            else:
                own = pod.requests.scalar.get(name, 0)
                if own == 0 and kind == _SCALAR_KIND:
                    continue
                allocatable = allocatable_amounts.scalar.get(name, 0)
                requested = usage.scalar.get(name, 0) + own
            if allocatable == 0:
                continue
            if table is None:
                resource_score = self._resource_score(requested, allocatable)
                total += resource_score * weight
                weights += weight
                continue
            if requested > allocatable:
                resource_score = table[MAX_UTILIZATION]
            else:
                resource_score = table[requested * MAX_UTILIZATION // allocatable]
            # RequestedToCapacityRatio averages only the resources with a positive score.
            if resource_score > 0:
                total += resource_score * weight
                weights += weight
        if weights == 0:
            return 0
        if table is None:
            return _go_div(total, weights)
        return _round_half_away(total, weights)

    def resources_scored(self, pod: PodResources) -> list[str]:
        """Names of the strategy's resources that can count for this pod."""
        return [
            name
            for name, _, kind in self._resources
            if kind != _SCALAR_KIND or pod.requests.scalar.get(name, 0) > 0
        ]

    def score_bound(self, utilization: Mapping[str, int]) -> int:
        """An upper bound of `score` on any node whose utilization (0..100, this pod included)
        of each resource scored for the pod (`resources_scored`) is at most the value given."""
        table = self._table
        if not self._increasing:
            return MAX_NODE_SCORE if table is None else max(table)
        best = 0
        for value in utilization.values():
            used = min(max(value, 0), MAX_UTILIZATION)
            best = max(best, table[used] if table is not None else used * MAX_NODE_SCORE // 100)
        return best


def _kind(name: str) -> int:
    if name == CPU:
        return _CPU_KIND
    if name == MEMORY:
        return _MEMORY_KIND
    if name == EPHEMERAL_STORAGE:
        return _STORAGE_KIND
    return _SCALAR_KIND if is_scalar_resource_name(name) else _OTHER_KIND


def _least_allocated(requested: int, allocatable: int) -> int:
    if allocatable == 0 or requested > allocatable:
        return 0
    return (allocatable - requested) * MAX_NODE_SCORE // allocatable


def _most_allocated(requested: int, allocatable: int) -> int:
    if allocatable == 0:
        return 0
    return min(requested, allocatable) * MAX_NODE_SCORE // allocatable


def _shape_table(shape: tuple[ShapePoint, ...]) -> tuple[int, ...]:
    """Scores for utilization 0..100 of the piecewise-linear shape, scaled to 0..100."""
    scale = MAX_NODE_SCORE // MAX_CUSTOM_PRIORITY_SCORE
    points = tuple((p.utilization, p.score * scale) for p in shape)

    def broken_linear(utilization: int) -> int:
        previous: tuple[int, int] | None = None
        for point in points:
            if utilization <= point[0]:
                if previous is None:
                    return point[1]
                rise = (point[1] - previous[1]) * (utilization - previous[0])
                return previous[1] + _go_div(rise, point[0] - previous[0])
            previous = point
        return points[-1][1]

    return tuple(broken_linear(u) for u in range(MAX_UTILIZATION + 1))


def _go_div(numerator: int, denominator: int) -> int:
    """Integer division truncating toward zero, as Go's `/` on integers."""
    quotient = abs(numerator) // abs(denominator)
    return quotient if (numerator >= 0) == (denominator > 0) else -quotient


def _round_half_away(numerator: int, denominator: int) -> int:
    """`math.Round(numerator / denominator)` for a positive denominator, exactly."""
    sign = -1 if numerator < 0 else 1
    return sign * ((2 * abs(numerator) + denominator) // (2 * denominator))
