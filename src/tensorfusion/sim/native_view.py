"""Native kube-scheduler filters and NodeResourcesFit over the virtual cluster's nodes."""

from __future__ import annotations

import heapq
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tensorfusion.domain.scheduling.native import (
    NativePlugins,
    NodeFacts,
    NodeUsage,
    PodRequirements,
    PodResources,
    pod_resources,
)
from tensorfusion.domain.scheduling.native.resources import CPU, MEMORY

__all__ = ["NativeCluster", "PodNativeView"]


def _resources_of_requests(requests: Mapping[str, str]) -> PodResources:
    """The PodResources of the non-TF pods a node file says are already bound."""
    pod = {"spec": {"containers": [{"name": "bound", "resources": {"requests": dict(requests)}}]}}
    return pod_resources(pod)


def _allocatable(facts: NodeFacts, resource: str) -> int:
    return facts.allocatable.cpu_milli if resource == CPU else facts.allocatable.memory


@dataclass(slots=True)
class PodNativeView:
    """One pod's native rejection and fit score per node (the decision's `NativeView`)."""

    cluster: NativeCluster
    requirements: PodRequirements
    token: int

    def rejection(self, node: str) -> tuple[str, str] | None:
        """(plugin, reason) of the first native filter that fails."""
        return self._outcome(node)[0]

    def fit(self, node: str) -> int:
        """NodeResourcesFit score of the pod on the node."""
        return self._outcome(node)[1]

    def _outcome(self, node: str) -> tuple[tuple[str, str] | None, int]:
        # Both depend only on the pod and on the node's facts and usage, so they are kept
        # per node until a pod binds to or leaves it.
        memo = self.cluster.outcomes[node]
        outcome = memo.get(self.token)
        if outcome is None:
            cluster = self.cluster
            facts, usage = cluster.facts[node], cluster.usage[node]
            result = cluster.plugins.filter(self.requirements, facts, usage)
            outcome = (
                None if result is None else (result.plugin, result.message),
                cluster.plugins.fit_score(self.requirements, facts, usage),
            )
            memo[self.token] = outcome
        return outcome

    def fit_bound(self) -> int:
        """An upper bound of `fit` over every node."""
        return self.cluster.fit_bound(self.requirements)


@dataclass(slots=True)
class NativeCluster:
    """Node facts, the requests of bound pods per node, and the compiled pods of the trace."""

    plugins: NativePlugins
    facts: dict[str, NodeFacts] = field(default_factory=dict)
    usage: dict[str, NodeUsage] = field(default_factory=dict)
    pods: dict[str, PodRequirements] = field(default_factory=dict)
    bound: dict[str, str] = field(default_factory=dict)
    outcomes: dict[str, dict[int, tuple[tuple[str, str] | None, int]]] = field(default_factory=dict)
    _tokens: dict[int, tuple[PodRequirements, int]] = field(default_factory=dict)
    _names: list[str] = field(default_factory=list)
    _fullest: dict[str, list[tuple[float, int, str]]] = field(default_factory=dict)
    _version: dict[str, int] = field(default_factory=dict)
    _min_allocatable: dict[str, int] = field(default_factory=dict)

    @classmethod
    def build(
        cls,
        plugins: NativePlugins,
        node_objects: Mapping[str, dict[str, Any]],
        requested: Mapping[str, Mapping[str, str]],
    ) -> NativeCluster:
        """Compile the nodes; `requested` holds what already-bound non-TF pods request."""
        cluster = cls(plugins)
        for name in sorted(node_objects):
            cluster.facts[name] = NodeFacts.from_node(node_objects[name])
            usage = NodeUsage()
            bound = requested.get(name)
            if bound:
                usage.add(_resources_of_requests(bound))
            cluster.usage[name] = usage
        cluster._names = sorted(node_objects)
        for name in cluster._names:
            cluster._track(name)
        for resource in (CPU, MEMORY):
            cluster._min_allocatable[resource] = min(
                (_allocatable(f, resource) for f in cluster.facts.values()), default=0
            )
        return cluster

    def fit_bound(self, pod: PodRequirements) -> int:
        """An upper bound of the pod's NodeResourcesFit score over all nodes.

        Per scored resource, the utilisation on any node is at most the highest utilisation
        of bound pods plus the pod's own request over the smallest allocatable.
        """
        scorer = self.plugins.scorer
        bounds: dict[str, int] = {}
        for resource in scorer.resources_scored(pod.resources):
            smallest = self._min_allocatable.get(resource, 0)
            if resource not in (CPU, MEMORY) or smallest <= 0:
                bounds[resource] = 100
                continue
            own = (
                pod.resources.non_zero_cpu_milli
                if resource == CPU
                else pod.resources.non_zero_memory
            )
            ratio = self._highest_ratio(resource) + own / smallest
            bounds[resource] = min(100, math.ceil(ratio * 100 + 1e-9))
        return scorer.score_bound(bounds)

    def _highest_ratio(self, resource: str) -> float:
        heap = self._fullest.get(resource)
        while heap:
            negative, version, node = heap[0]
            if self._version[node] == version:
                return -negative
            heapq.heappop(heap)
        return 0.0

    def _track(self, node: str) -> None:
        self.outcomes[node] = {}
        version = self._version.get(node, 0) + 1
        self._version[node] = version
        usage = self.usage[node]
        facts = self.facts[node]
        for resource, used in ((CPU, usage.non_zero_cpu_milli), (MEMORY, usage.non_zero_memory)):
            allocatable = _allocatable(facts, resource)
            if allocatable > 0:
                heap = self._fullest.setdefault(resource, [])
                heapq.heappush(heap, (-used / allocatable, version, node))

    def node_names(self) -> list[str]:
        """Every node, sorted by name."""
        return self._names

    def add_pod(self, uid: str, pod: Mapping[str, Any]) -> PodRequirements:
        """Compile a pod once for all its scheduling attempts."""
        requirements = PodRequirements.from_pod(pod)
        self.pods[uid] = requirements
        return requirements

    def view(self, uid: str) -> PodNativeView:
        """The native view of a compiled pod."""
        requirements = self.pods[uid]
        known = self._tokens.get(id(requirements))
        if known is None or known[0] is not requirements:
            known = (requirements, len(self._tokens) + 1)
            self._tokens[id(requirements)] = known
        return PodNativeView(self, requirements, known[1])

    def bind(self, uid: str, node: str) -> None:
        """Count the pod's requests on the node."""
        self.usage[node].add(self.pods[uid].resources)
        self.bound[uid] = node
        self._track(node)

    def unbind(self, uid: str) -> None:
        """Forget the pod's requests on its node."""
        node = self.bound.pop(uid, None)
        if node is not None:
            self.usage[node].remove(self.pods[uid].resources)
            self._track(node)
