"""The native-plugin view of a set of nodes: Node facts, the requests of the pods bound to each
node, each pod's rejection and NodeResourcesFit score per node, and a bound of that score.
Pods with equal requirements but their names (`PodRequirements.class_key`) share one outcome
per node, kept until the node changes.

One implementation for the simulator (nodes of its cluster file) and the extender (Nodes and
bound pods from the informer cache): the decision reads it through `NativeView`.
"""

from __future__ import annotations

import copy
import heapq
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tensorfusion.domain.scheduling.native.framework import NativePlugins
from tensorfusion.domain.scheduling.native.free_bounds import FreeBounds
from tensorfusion.domain.scheduling.native.node import NodeFacts
from tensorfusion.domain.scheduling.native.pod import PodRequirements
from tensorfusion.domain.scheduling.native.resources import CPU, MEMORY, NodeUsage, pod_resources

__all__ = ["NativeCluster", "NativeOutcome", "PodNativeView", "requests_pod"]


def requests_pod(requests: Mapping[str, str]) -> dict[str, Any]:
    """A one-container pod requesting `requests` (what other pods on a node already take)."""
    return {"spec": {"containers": [{"name": "bound", "resources": {"requests": dict(requests)}}]}}


def _allocatable(facts: NodeFacts, resource: str) -> int:
    return facts.allocatable.cpu_milli if resource == CPU else facts.allocatable.memory


@dataclass(slots=True)
class NativeOutcome:
    """Whether a pod passes the native filters on a node, its fit, and the reason once asked."""

    admitted: bool
    fit: int
    rejection: tuple[str, str] | None = None


@dataclass(slots=True)
class PodNativeView:
    """One pod's native rejection and fit score per node (the decision's `NativeView`)."""

    cluster: NativeCluster
    requirements: PodRequirements
    token: int

    def rejection(self, node: str) -> tuple[str, str] | None:
        """(plugin, reason) of the first native filter that fails; unknown nodes fail."""
        memo = self.cluster.outcomes.get(node)
        if memo is None:
            return "NodeNotFound", f'node "{node}" not found'
        outcome = self._outcome(node, memo)
        if outcome.admitted:
            return None
        if outcome.rejection is None:
            # The reason text is built only when asked for.
            cluster = self.cluster
            result = cluster.plugins.filter(self.requirements, cluster.facts[node],
                                            cluster.usage[node])  # fmt: skip
            assert result is not None
            outcome.rejection = (result.plugin, result.message)
        return outcome.rejection

    def admits(self, node: str) -> bool:
        """Whether every native filter passes (no reason text is built)."""
        memo = self.cluster.outcomes.get(node)
        return memo is not None and self._outcome(node, memo).admitted

    def fit(self, node: str) -> int:
        """NodeResourcesFit score of the pod on the node."""
        memo = self.cluster.outcomes.get(node)
        return 0 if memo is None else self._outcome(node, memo).fit

    def admitted_fit(self, node: str) -> int:
        """NodeResourcesFit score when every native filter passes, else -1."""
        memo = self.cluster.outcomes.get(node)
        if memo is None:
            return -1
        outcome = memo.get(self.token)
        if outcome is None:
            outcome = self._outcome(node, memo)
        return outcome.fit if outcome.admitted else -1

    def fits_somewhere(self) -> bool:
        """False when no node has the CPU, memory or pod slot the pod asks for."""
        return self.cluster.free.admits_somewhere(self.requirements.resources)

    def _outcome(self, node: str, memo: dict[int, NativeOutcome]) -> NativeOutcome:
        # Both depend only on the pod and on the node's facts and usage, so they are kept
        # per node until a pod binds to or leaves it, or the node changes.
        outcome = memo.get(self.token)
        if outcome is None:
            cluster = self.cluster
            facts, usage = cluster.facts[node], cluster.usage[node]
            outcome = NativeOutcome(
                cluster.plugins.admits(self.requirements, facts, usage),
                cluster.plugins.fit_score(self.requirements, facts, usage),
            )
            memo[self.token] = outcome
        return outcome

    def fit_bound(self) -> int:
        """An upper bound of `fit` over every node."""
        return self.cluster.fit_bound(self.requirements)

    def cpu_request(self) -> int:
        """The pod's CPU request in millicores."""
        return self.requirements.resources.requests.cpu_milli

    def cpu_free(self, node: str) -> int | None:
        """The node's allocatable CPU less the requests bound to it (None: unknown node)."""
        facts = self.cluster.facts.get(node)
        if facts is None:
            return None
        return facts.allocatable.cpu_milli - self.cluster.usage[node].cpu_milli


def _usage_copy(usage: NodeUsage) -> NodeUsage:
    copied = copy.copy(usage)
    copied.scalar = dict(usage.scalar)
    return copied


@dataclass(slots=True)
class _PodClass:
    """Pods with one `class_key`: the token of their shared outcomes and how many there are."""

    token: int
    members: int = 0


@dataclass(slots=True)
class NativeCluster:
    """Node facts, the requests of the pods bound to each node, and compiled pods."""

    plugins: NativePlugins
    facts: dict[str, NodeFacts] = field(default_factory=dict)
    usage: dict[str, NodeUsage] = field(default_factory=dict)
    pods: dict[str, PodRequirements] = field(default_factory=dict)
    bound: dict[str, str] = field(default_factory=dict)
    outcomes: dict[str, dict[int, NativeOutcome]] = field(default_factory=dict)
    free: FreeBounds = field(default_factory=FreeBounds)
    _classes: dict[tuple[object, ...], _PodClass] = field(default_factory=dict)
    _next_token: int = 0
    _names: list[str] | None = None
    _fullest: dict[str, list[tuple[float, int, str]]] = field(default_factory=dict)
    _version: dict[str, int] = field(default_factory=dict)
    _min_allocatable: dict[str, int] | None = None

    @classmethod
    def from_nodes(
        cls, plugins: NativePlugins, node_objects: Mapping[str, Mapping[str, Any]]
    ) -> NativeCluster:
        """A view of the given Node objects with no pod bound yet."""
        cluster = cls(plugins)
        for name in sorted(node_objects):
            cluster.set_node(name, node_objects[name])
        return cluster

    def copy(self) -> NativeCluster:
        """An independent copy for a reader in another thread (reading fills memos and pops
        stale heap entries): node facts and compiled pods are shared (immutable), usage and
        the bookkeeping copied, the outcome memos start empty."""
        return NativeCluster(
            plugins=self.plugins,
            facts=dict(self.facts),
            usage={name: _usage_copy(usage) for name, usage in self.usage.items()},
            pods=dict(self.pods),
            bound=dict(self.bound),
            outcomes={name: {} for name in self.outcomes},
            free=self.free.copy(),
            _classes={key: _PodClass(c.token, c.members) for key, c in self._classes.items()},
            _next_token=self._next_token,
            _names=None,
            _fullest={resource: list(heap) for resource, heap in self._fullest.items()},
            _version=dict(self._version),
            _min_allocatable=None,
        )

    # ---- nodes -----------------------------------------------------------------------------

    def set_node(self, name: str, node: Mapping[str, Any]) -> None:
        """Add a Node or replace its facts (labels, taints, allocatable); usage is kept."""
        self.facts[name] = NodeFacts.from_node(node)
        self.usage.setdefault(name, NodeUsage())
        self._names = None
        self._min_allocatable = None
        self._track(name)

    def remove_node(self, name: str) -> None:
        """Forget a Node; pods bound to it stay counted on it until they are unbound."""
        self.facts.pop(name, None)
        self.outcomes.pop(name, None)
        self.free.remove(name)
        self._version[name] = self._version.get(name, 0) + 1
        self._names = None
        self._min_allocatable = None

    def node_names(self) -> list[str]:
        """Every node, sorted by name."""
        if self._names is None:
            self._names = sorted(self.facts)
        return self._names

    # ---- pods ------------------------------------------------------------------------------

    def add_pod(self, uid: str, pod: Mapping[str, Any]) -> PodRequirements:
        """Compile a pod once for all its scheduling attempts (NativeInputError if invalid)."""
        requirements = PodRequirements.from_pod(pod)
        self.add_requirements(uid, requirements)
        return requirements

    def add_requirements(self, uid: str, requirements: PodRequirements) -> None:
        """Register a pod compiled elsewhere (replacing what the UID had)."""
        previous = self.pods.get(uid)
        if previous is not None:
            self._leave_class(previous)
        self.pods[uid] = requirements
        pod_class = self._classes.get(requirements.class_key)
        if pod_class is None:
            self._next_token += 1
            pod_class = self._classes[requirements.class_key] = _PodClass(self._next_token)
        pod_class.members += 1

    def forget_pod(self, uid: str) -> None:
        """Unbind the pod if bound and drop its compiled form (and its class's outcomes once
        no pod of the class is left)."""
        self.unbind(uid)
        requirements = self.pods.pop(uid, None)
        if requirements is not None:
            self._leave_class(requirements)

    def view(self, uid: str) -> PodNativeView:
        """The native view of a compiled pod; pods of one class share their outcomes."""
        requirements = self.pods[uid]
        return PodNativeView(self, requirements, self._classes[requirements.class_key].token)

    def _leave_class(self, requirements: PodRequirements) -> None:
        pod_class = self._classes[requirements.class_key]
        pod_class.members -= 1
        if pod_class.members == 0:
            del self._classes[requirements.class_key]
            for memo in self.outcomes.values():
                memo.pop(pod_class.token, None)

    def bind(self, uid: str, node: str) -> None:
        """Count the compiled pod's requests on the node (moving it if bound elsewhere)."""
        if self.bound.get(uid) == node:
            return
        self.unbind(uid)
        usage = self.usage.setdefault(node, NodeUsage())
        usage.add(self.pods[uid].resources)
        self.bound[uid] = node
        if node in self.facts:
            self._track(node)

    def unbind(self, uid: str) -> None:
        """Forget the pod's requests on its node."""
        node = self.bound.pop(uid, None)
        if node is not None:
            usage = self.usage.get(node)
            if usage is not None:
                usage.remove(self.pods[uid].resources)
            if node in self.facts:
                self._track(node)

    def add_requests(self, node: str, requests: Mapping[str, str]) -> None:
        """Count requests of pods outside the view (a cluster file's `requested`)."""
        usage = self.usage.setdefault(node, NodeUsage())
        usage.add(pod_resources(requests_pod(requests)))
        if node in self.facts:
            self._track(node)

    # ---- the fit bound -----------------------------------------------------------------------

    def fit_bound(self, pod: PodRequirements) -> int:
        """An upper bound of the pod's NodeResourcesFit score over all nodes.

        Per scored resource, the utilisation on any node is at most the highest utilisation
        of bound pods plus the pod's own request over the smallest allocatable.
        """
        scorer = self.plugins.scorer
        smallest_of = self._smallest_allocatable()
        bounds: dict[str, int] = {}
        for resource in scorer.resources_scored(pod.resources):
            smallest = smallest_of.get(resource, 0)
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

    def _smallest_allocatable(self) -> dict[str, int]:
        if self._min_allocatable is None:
            self._min_allocatable = {
                resource: min((_allocatable(f, resource) for f in self.facts.values()), default=0)
                for resource in (CPU, MEMORY)
            }
        return self._min_allocatable

    def _highest_ratio(self, resource: str) -> float:
        heap = self._fullest.get(resource)
        while heap:
            negative, version, node = heap[0]
            if self._version.get(node) == version:
                return -negative
            heapq.heappop(heap)
        return 0.0

    def _track(self, node: str) -> None:
        self.outcomes[node] = {}
        self.free.update(node, self.facts[node], self.usage[node])
        version = self._version.get(node, 0) + 1
        self._version[node] = version
        for resource in (CPU, MEMORY):
            heap = self._fullest.setdefault(resource, [])
            entry = self._ratio_entry(node, resource)
            if entry is not None:
                heapq.heappush(heap, entry)
            if len(heap) > 4 * len(self.facts) + 64:
                # Drop the superseded entries that never reached the top.
                self._fullest[resource] = [
                    e for n in self.facts if (e := self._ratio_entry(n, resource)) is not None
                ]
                heapq.heapify(self._fullest[resource])

    def _ratio_entry(self, node: str, resource: str) -> tuple[float, int, str] | None:
        allocatable = _allocatable(self.facts[node], resource)
        if allocatable <= 0:
            return None
        usage = self.usage[node]
        used = usage.non_zero_cpu_milli if resource == CPU else usage.non_zero_memory
        return -used / allocatable, self._version[node], node
