"""The native subset of kube-scheduler that the simulator and the extender reproduce.

Filters (scheduling.md §16.1, in kube-scheduler's order, first failure reported with its reason
text): NodeUnschedulable, NodeName, TaintToleration, NodeAffinity, NodeResourcesFit. Scoring:
NodeResourcesFit with LeastAllocated, MostAllocated or RequestedToCapacityRatio (§14).
Pods and nodes are Kubernetes JSON dicts, compiled once (`PodRequirements.from_pod`,
`NodeFacts.from_node`); `NodeUsage` holds what the pods bound to a node request.
"""

from tensorfusion.domain.scheduling.native.framework import (
    FILTER_ORDER,
    NativePlugins,
    NativeRejection,
    check_node_affinity,
    check_node_name,
    check_node_unschedulable,
    check_taint_toleration,
)
from tensorfusion.domain.scheduling.native.node import (
    NO_EXECUTE,
    NO_SCHEDULE,
    PREFER_NO_SCHEDULE,
    NodeFacts,
    Taint,
)
from tensorfusion.domain.scheduling.native.node_affinity import (
    NODE_AFFINITY,
    NODE_AFFINITY_REASON,
    AffinityRequirement,
    AffinityTerm,
    RequiredNodeAffinity,
)
from tensorfusion.domain.scheduling.native.node_name import NODE_NAME, NODE_NAME_REASON
from tensorfusion.domain.scheduling.native.node_unschedulable import (
    NODE_UNSCHEDULABLE,
    NODE_UNSCHEDULABLE_REASON,
)
from tensorfusion.domain.scheduling.native.pod import PodRequirements
from tensorfusion.domain.scheduling.native.resources import (
    DEFAULT_MEMORY_REQUEST,
    DEFAULT_MILLI_CPU_REQUEST,
    NativeInputError,
    NodeUsage,
    PodResources,
    ResourceAmounts,
    is_extended_resource_name,
    pod_resources,
)
from tensorfusion.domain.scheduling.native.resources_fit import (
    NODE_RESOURCES_FIT,
    NodeResourcesFitArgs,
    ResourcesFitChecker,
    ResourcesFitScorer,
    ResourceWeight,
    ScoringStrategy,
    ScoringStrategyType,
    ShapePoint,
)
from tensorfusion.domain.scheduling.native.taint_toleration import (
    TAINT_TOLERATION,
    Toleration,
    untolerated_taint_reason,
)

__all__ = [
    "DEFAULT_MEMORY_REQUEST",
    "DEFAULT_MILLI_CPU_REQUEST",
    "FILTER_ORDER",
    "NODE_AFFINITY",
    "NODE_AFFINITY_REASON",
    "NODE_NAME",
    "NODE_NAME_REASON",
    "NODE_RESOURCES_FIT",
    "NODE_UNSCHEDULABLE",
    "NODE_UNSCHEDULABLE_REASON",
    "NO_EXECUTE",
    "NO_SCHEDULE",
    "PREFER_NO_SCHEDULE",
    "TAINT_TOLERATION",
    "AffinityRequirement",
    "AffinityTerm",
    "NativeInputError",
    "NativePlugins",
    "NativeRejection",
    "NodeFacts",
    "NodeResourcesFitArgs",
    "NodeUsage",
    "PodRequirements",
    "PodResources",
    "RequiredNodeAffinity",
    "ResourceAmounts",
    "ResourceWeight",
    "ResourcesFitChecker",
    "ResourcesFitScorer",
    "ScoringStrategy",
    "ScoringStrategyType",
    "ShapePoint",
    "Taint",
    "Toleration",
    "check_node_affinity",
    "check_node_name",
    "check_node_unschedulable",
    "check_taint_toleration",
    "is_extended_resource_name",
    "pod_resources",
    "untolerated_taint_reason",
]
