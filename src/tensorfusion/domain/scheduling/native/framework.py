"""The native filters in kube-scheduler's order and NodeResourcesFit scoring, over compiled data.

Order of the filter extension point: NodeUnschedulable, NodeName, TaintToleration, NodeAffinity,
(NodePorts, not simulated), NodeResourcesFit. The first failing plugin is reported, with its
reason text. Volume, port, inter-pod and spread filters are not simulated.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from tensorfusion.domain.scheduling.native.node import NodeFacts
from tensorfusion.domain.scheduling.native.node_affinity import (
    NODE_AFFINITY,
    NODE_AFFINITY_REASON,
)
from tensorfusion.domain.scheduling.native.node_name import NODE_NAME, NODE_NAME_REASON
from tensorfusion.domain.scheduling.native.node_unschedulable import (
    NODE_UNSCHEDULABLE,
    NODE_UNSCHEDULABLE_REASON,
)
from tensorfusion.domain.scheduling.native.pod import PodRequirements
from tensorfusion.domain.scheduling.native.resources import NodeUsage
from tensorfusion.domain.scheduling.native.resources_fit import (
    NODE_RESOURCES_FIT,
    NodeResourcesFitArgs,
    ResourcesFitChecker,
    ResourcesFitScorer,
)
from tensorfusion.domain.scheduling.native.taint_toleration import (
    TAINT_TOLERATION,
    first_untolerated_taint,
    untolerated_taint_reason,
)

__all__ = [
    "FILTER_ORDER",
    "NativePlugins",
    "NativeRejection",
    "check_node_affinity",
    "check_node_name",
    "check_node_unschedulable",
    "check_taint_toleration",
]

FILTER_ORDER: Final = (
    NODE_UNSCHEDULABLE,
    NODE_NAME,
    TAINT_TOLERATION,
    NODE_AFFINITY,
    NODE_RESOURCES_FIT,
)
"""The simulated filter plugins, in kube-scheduler's default order."""


@dataclass(frozen=True, slots=True)
class NativeRejection:
    """The first native filter plugin that rejected a node, and its kube-scheduler message."""

    plugin: str
    message: str


_UNSCHEDULABLE: Final = NativeRejection(NODE_UNSCHEDULABLE, NODE_UNSCHEDULABLE_REASON)
_NODE_NAME: Final = NativeRejection(NODE_NAME, NODE_NAME_REASON)
_AFFINITY: Final = NativeRejection(NODE_AFFINITY, NODE_AFFINITY_REASON)


def check_node_unschedulable(pod: PodRequirements, node: NodeFacts) -> NativeRejection | None:
    """NodeUnschedulable: a cordoned node unless the pod tolerates the unschedulable taint."""
    if node.unschedulable and not pod.tolerates_unschedulable:
        return _UNSCHEDULABLE
    return None


def check_node_name(pod: PodRequirements, node: NodeFacts) -> NativeRejection | None:
    """NodeName: `spec.nodeName`, when set, must be this node."""
    if pod.node_name and pod.node_name != node.name:
        return _NODE_NAME
    return None


def check_taint_toleration(pod: PodRequirements, node: NodeFacts) -> NativeRejection | None:
    """TaintToleration: the first NoSchedule/NoExecute taint the pod does not tolerate."""
    if not node.blocking_taints:
        return None
    taint = first_untolerated_taint(pod.tolerations, node.blocking_taints)
    if taint is None:
        return None
    return NativeRejection(TAINT_TOLERATION, untolerated_taint_reason(taint))


def check_node_affinity(pod: PodRequirements, node: NodeFacts) -> NativeRejection | None:
    """NodeAffinity: `nodeSelector` and required node affinity."""
    if pod.affinity.is_empty or pod.affinity.matches(node):
        return None
    return _AFFINITY


class NativePlugins:
    """The native filters and the NodeResourcesFit score under one NodeResourcesFit config."""

    __slots__ = ("_fit", "_scorer")

    def __init__(self, fit_args: NodeResourcesFitArgs | None = None) -> None:
        args = fit_args or NodeResourcesFitArgs()
        self._fit = ResourcesFitChecker(args)
        self._scorer = ResourcesFitScorer(args.scoring_strategy)

    @property
    def scorer(self) -> ResourcesFitScorer:
        """The NodeResourcesFit scorer in use."""
        return self._scorer

    @property
    def fit_args(self) -> NodeResourcesFitArgs:
        """The NodeResourcesFit args in use."""
        return self._fit.args

    def filter(
        self, pod: PodRequirements, node: NodeFacts, usage: NodeUsage
    ) -> NativeRejection | None:
        """Run the filters in order; the first rejection, or None when the node passes."""
        if node.unschedulable and not pod.tolerates_unschedulable:
            return _UNSCHEDULABLE
        if pod.node_name and pod.node_name != node.name:
            return _NODE_NAME
        if node.blocking_taints:
            rejection = check_taint_toleration(pod, node)
            if rejection is not None:
                return rejection
        if not pod.affinity.is_empty and not pod.affinity.matches(node):
            return _AFFINITY
        message = self._fit.check(pod.resources, node, usage)
        if message is not None:
            return NativeRejection(NODE_RESOURCES_FIT, message)
        return None

    def admits(self, pod: PodRequirements, node: NodeFacts, usage: NodeUsage) -> bool:
        """Whether every filter passes (`filter` is None), without building any reason text."""
        if node.unschedulable and not pod.tolerates_unschedulable:
            return False
        if pod.node_name and pod.node_name != node.name:
            return False
        if (
            node.blocking_taints
            and first_untolerated_taint(pod.tolerations, node.blocking_taints) is not None
        ):
            return False
        if not pod.affinity.is_empty and not pod.affinity.matches(node):
            return False
        return self._fit.fits(pod.resources, node, usage)

    def fit_score(self, pod: PodRequirements, node: NodeFacts, usage: NodeUsage) -> int:
        """NodeResourcesFit's score (0..100) of the pod on the node (`fit`, scheduling.md §7.6)."""
        return self._scorer.score(pod.resources, node, usage)
