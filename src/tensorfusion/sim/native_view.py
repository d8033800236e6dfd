"""Native kube-scheduler filters and NodeResourcesFit over the virtual cluster's nodes."""

from __future__ import annotations

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

__all__ = ["NativeCluster", "PodNativeView"]


def _resources_of_requests(requests: Mapping[str, str]) -> PodResources:
    """The PodResources of the non-TF pods a node file says are already bound."""
    pod = {"spec": {"containers": [{"name": "bound", "resources": {"requests": dict(requests)}}]}}
    return pod_resources(pod)


@dataclass(slots=True)
class PodNativeView:
    """One pod's native rejection and fit score per node (the decision's `NativeView`)."""

    cluster: NativeCluster
    requirements: PodRequirements

    def rejection(self, node: str) -> tuple[str, str] | None:
        """(plugin, reason) of the first native filter that fails."""
        facts = self.cluster.facts[node]
        result = self.cluster.plugins.filter(self.requirements, facts, self.cluster.usage[node])
        return None if result is None else (result.plugin, result.message)

    def fit(self, node: str) -> int:
        """NodeResourcesFit score of the pod on the node."""
        facts = self.cluster.facts[node]
        return self.cluster.plugins.fit_score(self.requirements, facts, self.cluster.usage[node])


@dataclass(slots=True)
class NativeCluster:
    """Node facts, the requests of bound pods per node, and the compiled pods of the trace."""

    plugins: NativePlugins
    facts: dict[str, NodeFacts] = field(default_factory=dict)
    usage: dict[str, NodeUsage] = field(default_factory=dict)
    pods: dict[str, PodRequirements] = field(default_factory=dict)
    bound: dict[str, str] = field(default_factory=dict)
    _names: list[str] = field(default_factory=list)

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
        return cluster

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
        return PodNativeView(self, self.pods[uid])

    def bind(self, uid: str, node: str) -> None:
        """Count the pod's requests on the node."""
        self.usage[node].add(self.pods[uid].resources)
        self.bound[uid] = node

    def unbind(self, uid: str) -> None:
        """Forget the pod's requests on its node."""
        node = self.bound.pop(uid, None)
        if node is not None:
            self.usage[node].remove(self.pods[uid].resources)
