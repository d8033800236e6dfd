"""The native kube-scheduler subset: filters in order with reason texts, requests, fit scores."""

from __future__ import annotations

from typing import Any

import pytest

from tensorfusion.domain.scheduling.native import (
    DEFAULT_MEMORY_REQUEST,
    DEFAULT_MILLI_CPU_REQUEST,
    FILTER_ORDER,
    NativeInputError,
    NativePlugins,
    NativeRejection,
    NodeFacts,
    NodeResourcesFitArgs,
    NodeUsage,
    PodRequirements,
    ResourcesFitScorer,
    ResourceWeight,
    ScoringStrategy,
    ScoringStrategyType,
    ShapePoint,
    Taint,
    check_node_affinity,
    check_taint_toleration,
    is_extended_resource_name,
    pod_resources,
)

GI = 1024**3
MI = 1024**2

SHIPPED = ScoringStrategy(
    ScoringStrategyType.REQUESTED_TO_CAPACITY_RATIO,
    (ResourceWeight("cpu", 1), ResourceWeight("memory", 1), ResourceWeight("nvidia.com/gpu", 5)),
    (ShapePoint(0, 0), ShapePoint(75, 9), ShapePoint(100, 10)),
)
SHIPPED_ARGS = NodeResourcesFitArgs(
    ignored_resource_groups=frozenset({"tensor-fusion.ai"}), scoring_strategy=SHIPPED
)


def make_node(
    name: str = "node-a",
    *,
    labels: dict[str, str] | None = None,
    taints: list[dict[str, str]] | None = None,
    unschedulable: bool = False,
    allocatable: dict[str, Any] | None = None,
) -> NodeFacts:
    node: dict[str, Any] = {
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {"taints": taints or [], "unschedulable": unschedulable},
        "status": {
            "allocatable": allocatable
            or {"cpu": "64", "memory": "512Gi", "pods": "110", "ephemeral-storage": "100Gi"}
        },
    }
    return NodeFacts.from_node(node)


def make_pod(
    *,
    containers: list[dict[str, Any]] | None = None,
    init_containers: list[dict[str, Any]] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    body: dict[str, Any] = {"containers": containers or [{"name": "main"}], **spec}
    if init_containers:
        body["initContainers"] = init_containers
    return {"metadata": {"namespace": "default", "name": "p"}, "spec": body}


def container(
    requests: dict[str, Any] | None = None, limits: dict[str, Any] | None = None, **extra: Any
) -> dict[str, Any]:
    resources: dict[str, Any] = {}
    if requests is not None:
        resources["requests"] = requests
    if limits is not None:
        resources["limits"] = limits
    return {"name": "c", "resources": resources, **extra}


def requirements(**kwargs: Any) -> PodRequirements:
    return PodRequirements.from_pod(make_pod(**kwargs))


def usage_of(cpu_milli: int = 0, memory: int = 0, pods: int = 0, **scalar: int) -> NodeUsage:
    usage = NodeUsage()
    usage.cpu_milli = usage.non_zero_cpu_milli = cpu_milli
    usage.memory = usage.non_zero_memory = memory
    usage.pods = pods
    usage.scalar = {k.replace("__", "/"): v for k, v in scalar.items()}
    return usage


PLUGINS = NativePlugins(SHIPPED_ARGS)


# --- order ---------------------------------------------------------------------------------


def test_filter_order_is_kube_schedulers() -> None:
    assert FILTER_ORDER == (
        "NodeUnschedulable",
        "NodeName",
        "TaintToleration",
        "NodeAffinity",
        "NodeResourcesFit",
    )


def test_first_failure_is_reported() -> None:
    node = make_node(
        unschedulable=True,
        taints=[{"key": "dedicated", "value": "inference", "effect": "NoSchedule"}],
        labels={},
        allocatable={"cpu": "1", "memory": "1Gi", "pods": "10"},
    )
    pod = requirements(containers=[container({"cpu": "16"})], nodeSelector={"gpu-type": "a100"})
    assert PLUGINS.filter(pod, node, NodeUsage()) == NativeRejection(
        "NodeUnschedulable", "node(s) were unschedulable"
    )
    uncordoned = make_node(
        taints=[{"key": "dedicated", "value": "inference", "effect": "NoSchedule"}],
        allocatable={"cpu": "1", "memory": "1Gi", "pods": "10"},
    )
    rejection = PLUGINS.filter(pod, uncordoned, NodeUsage())
    assert rejection is not None
    assert rejection.plugin == "TaintToleration"


def test_spec_example_tolerated_taint_then_affinity() -> None:
    """§16.1: node-b tolerated but unlabelled → NodeAffinity; node-d short of cpu."""
    pod = requirements(
        containers=[container({"cpu": "16"})],
        nodeSelector={"gpu-type": "a100"},
        tolerations=[
            {"key": "dedicated", "operator": "Equal", "value": "inference", "effect": "NoSchedule"}
        ],
    )
    node_b = make_node(
        "node-b", taints=[{"key": "dedicated", "value": "inference", "effect": "NoSchedule"}]
    )
    assert PLUGINS.filter(pod, node_b, NodeUsage()) == NativeRejection(
        "NodeAffinity", "node(s) didn't match Pod's node affinity/selector"
    )
    node_d = make_node(
        "node-d",
        labels={"gpu-type": "a100"},
        allocatable={"cpu": "16", "memory": "64Gi", "pods": "110"},
    )
    assert PLUGINS.filter(pod, node_d, usage_of(4000, 16 * GI, 2)) == NativeRejection(
        "NodeResourcesFit", "Insufficient cpu"
    )
    node_a = make_node("node-a", labels={"gpu-type": "a100"})
    assert PLUGINS.filter(pod, node_a, usage_of(32000, 256 * GI, 3)) is None


# --- NodeUnschedulable ---------------------------------------------------------------------


def test_cordoned_node_rejected() -> None:
    assert PLUGINS.filter(requirements(), make_node(unschedulable=True), NodeUsage()) == (
        NativeRejection("NodeUnschedulable", "node(s) were unschedulable")
    )


@pytest.mark.parametrize(
    "toleration",
    [
        {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"},
        {"key": "node.kubernetes.io/unschedulable", "operator": "Exists"},
        {"operator": "Exists"},
        {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"},
    ],
)
def test_cordon_tolerated(toleration: dict[str, str]) -> None:
    pod = requirements(tolerations=[toleration])
    assert PLUGINS.filter(pod, make_node(unschedulable=True), NodeUsage()) is None


def test_cordon_not_tolerated_by_other_effect() -> None:
    toleration = {
        "key": "node.kubernetes.io/unschedulable",
        "operator": "Exists",
        "effect": "NoExecute",
    }
    pod = requirements(tolerations=[toleration])
    rejection = PLUGINS.filter(pod, make_node(unschedulable=True), NodeUsage())
    assert rejection is not None
    assert rejection.plugin == "NodeUnschedulable"


# --- NodeName ------------------------------------------------------------------------------


def test_node_name() -> None:
    pod = requirements(nodeName="node-x")
    assert PLUGINS.filter(pod, make_node("node-x"), NodeUsage()) is None
    assert PLUGINS.filter(pod, make_node("node-y"), NodeUsage()) == NativeRejection(
        "NodeName", "node(s) didn't match the requested node name"
    )


# --- TaintToleration -----------------------------------------------------------------------


def test_untolerated_taint_message_format() -> None:
    node = make_node(taints=[{"key": "dedicated", "value": "inference", "effect": "NoSchedule"}])
    assert check_taint_toleration(requirements(), node) == NativeRejection(
        "TaintToleration", "node(s) had untolerated taint {dedicated: inference}"
    )


def test_taint_without_value_message() -> None:
    node = make_node(taints=[{"key": "gpu", "effect": "NoExecute"}])
    rejection = check_taint_toleration(requirements(), node)
    assert rejection is not None
    assert rejection.message == "node(s) had untolerated taint {gpu: }"


def test_prefer_no_schedule_ignored_by_filter() -> None:
    node = make_node(
        taints=[
            {
                "key": "tensor-fusion.ai/used-by",
                "value": "tensor-fusion",
                "effect": "PreferNoSchedule",
            }
        ]
    )
    assert check_taint_toleration(requirements(), node) is None
    assert PLUGINS.filter(requirements(), node, NodeUsage()) is None


def test_first_untolerated_taint_in_node_order() -> None:
    node = make_node(
        taints=[
            {"key": "a", "value": "1", "effect": "PreferNoSchedule"},
            {"key": "b", "value": "2", "effect": "NoSchedule"},
            {"key": "c", "value": "3", "effect": "NoExecute"},
        ]
    )
    pod = requirements(tolerations=[{"key": "b", "operator": "Exists"}])
    rejection = check_taint_toleration(pod, node)
    assert rejection is not None
    assert rejection.message == "node(s) had untolerated taint {c: 3}"


@pytest.mark.parametrize(
    ("toleration", "tolerated"),
    [
        ({"key": "k", "operator": "Equal", "value": "v", "effect": "NoSchedule"}, True),
        ({"key": "k", "value": "v"}, True),  # empty operator = Equal, empty effect = all
        ({"key": "k", "operator": "Equal", "value": "w"}, False),
        ({"key": "k", "operator": "Exists"}, True),
        ({"key": "k", "operator": "Exists", "effect": "NoExecute"}, False),
        ({"key": "other", "operator": "Exists"}, False),
        ({"operator": "Exists"}, True),
        ({"operator": "Exists", "effect": "NoSchedule"}, True),
        ({"key": "k", "operator": "Lt", "value": "v"}, False),
    ],
)
def test_toleration_matching(toleration: dict[str, str], tolerated: bool) -> None:
    node = make_node(taints=[{"key": "k", "value": "v", "effect": "NoSchedule"}])
    pod = requirements(tolerations=[toleration])
    assert (check_taint_toleration(pod, node) is None) is tolerated


# --- NodeAffinity --------------------------------------------------------------------------


AFFINITY_REJECTION = NativeRejection(
    "NodeAffinity", "node(s) didn't match Pod's node affinity/selector"
)


def affinity_pod(*terms: dict[str, Any]) -> PodRequirements:
    return requirements(
        affinity={
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)}
            }
        }
    )


def expr(key: str, operator: str, *values: str) -> dict[str, Any]:
    body: dict[str, Any] = {"key": key, "operator": operator}
    if values:
        body["values"] = list(values)
    return body


def test_node_selector() -> None:
    pod = requirements(nodeSelector={"gpu-type": "a100", "zone": "z1"})
    assert check_node_affinity(pod, make_node(labels={"gpu-type": "a100", "zone": "z1"})) is None
    assert check_node_affinity(pod, make_node(labels={"gpu-type": "a100"})) == AFFINITY_REJECTION
    assert check_node_affinity(pod, make_node(labels={"gpu-type": "h100", "zone": "z1"})) == (
        AFFINITY_REJECTION
    )


@pytest.mark.parametrize(
    ("expression", "labels", "matches"),
    [
        (expr("t", "In", "a", "b"), {"t": "b"}, True),
        (expr("t", "In", "a", "b"), {"t": "c"}, False),
        (expr("t", "In", "a"), {}, False),
        (expr("t", "NotIn", "a"), {"t": "b"}, True),
        (expr("t", "NotIn", "a"), {}, True),
        (expr("t", "NotIn", "a"), {"t": "a"}, False),
        (expr("t", "Exists"), {"t": ""}, True),
        (expr("t", "Exists"), {}, False),
        (expr("t", "DoesNotExist"), {}, True),
        (expr("t", "DoesNotExist"), {"t": "x"}, False),
        (expr("n", "Gt", "4"), {"n": "5"}, True),
        (expr("n", "Gt", "4"), {"n": "4"}, False),
        (expr("n", "Gt", "4"), {"n": "five"}, False),
        (expr("n", "Gt", "4"), {}, False),
        (expr("n", "Lt", "4"), {"n": "-3"}, True),
        (expr("n", "Lt", "4"), {"n": "4"}, False),
        # unparsable requirements make the term match nothing
        (expr("n", "Gt", "x"), {"n": "5"}, False),
        (expr("n", "Gt", "1", "2"), {"n": "5"}, False),
        (expr("t", "In"), {"t": "a"}, False),
        (expr("t", "Exists", "a"), {"t": "a"}, False),
        (expr("t", "Near", "a"), {"t": "a"}, False),
    ],
)
def test_match_expressions(
    expression: dict[str, Any], labels: dict[str, str], matches: bool
) -> None:
    pod = affinity_pod({"matchExpressions": [expression]})
    assert (check_node_affinity(pod, make_node(labels=labels)) is None) is matches


def test_terms_are_ored_and_expressions_anded() -> None:
    pod = affinity_pod(
        {"matchExpressions": [expr("a", "Exists"), expr("b", "In", "1")]},
        {"matchExpressions": [expr("c", "Exists")]},
    )
    assert check_node_affinity(pod, make_node(labels={"a": "x", "b": "1"})) is None
    assert check_node_affinity(pod, make_node(labels={"a": "x", "b": "2"})) == AFFINITY_REJECTION
    assert check_node_affinity(pod, make_node(labels={"c": "y"})) is None


def test_invalid_term_does_not_spoil_others() -> None:
    pod = affinity_pod(
        {"matchExpressions": [expr("n", "Gt", "x")]},
        {"matchExpressions": [expr("c", "Exists")]},
    )
    assert check_node_affinity(pod, make_node(labels={"c": "1", "n": "9"})) is None


def test_empty_terms_match_nothing() -> None:
    assert check_node_affinity(affinity_pod(), make_node()) == AFFINITY_REJECTION
    assert check_node_affinity(affinity_pod({}), make_node()) == AFFINITY_REJECTION


def test_match_fields_metadata_name() -> None:
    pod = affinity_pod(
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-a"]}]}
    )
    assert check_node_affinity(pod, make_node("node-a")) is None
    assert check_node_affinity(pod, make_node("node-b")) == AFFINITY_REJECTION
    not_in = affinity_pod(
        {"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["node-a"]}]}
    )
    assert check_node_affinity(not_in, make_node("node-a")) == AFFINITY_REJECTION
    assert check_node_affinity(not_in, make_node("node-b")) is None
    bad_key = affinity_pod(
        {"matchFields": [{"key": "metadata.uid", "operator": "In", "values": ["node-a"]}]}
    )
    assert check_node_affinity(bad_key, make_node("node-a")) == AFFINITY_REJECTION


def test_selector_and_affinity_both_required() -> None:
    pod = requirements(
        nodeSelector={"zone": "z1"},
        affinity={
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": [expr("gpu", "Exists")]}]
                }
            }
        },
    )
    assert check_node_affinity(pod, make_node(labels={"zone": "z1", "gpu": "1"})) is None
    assert check_node_affinity(pod, make_node(labels={"gpu": "1"})) == AFFINITY_REJECTION
    assert check_node_affinity(pod, make_node(labels={"zone": "z1"})) == AFFINITY_REJECTION


def test_preferred_affinity_does_not_filter() -> None:
    pod = requirements(
        affinity={
            "nodeAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 1, "preference": {"matchExpressions": [expr("x", "Exists")]}}
                ]
            }
        }
    )
    assert check_node_affinity(pod, make_node()) is None


# --- NodeResourcesFit filter ---------------------------------------------------------------


SMALL = {
    "cpu": "4",
    "memory": "8Gi",
    "pods": "3",
    "ephemeral-storage": "10Gi",
    "example.com/foo": "2",
    "tensor-fusion.ai/index_0": "36",
}


def fit(
    pod: PodRequirements, usage: NodeUsage | None = None, args: NodeResourcesFitArgs = SHIPPED_ARGS
) -> NativeRejection | None:
    return NativePlugins(args).filter(pod, make_node(allocatable=SMALL), usage or NodeUsage())


def test_fit_passes() -> None:
    pod = requirements(containers=[container({"cpu": "1", "memory": "1Gi"})])
    assert fit(pod, usage_of(3000, 7 * GI, 2)) is None


@pytest.mark.parametrize(
    ("requests", "message"),
    [
        ({"cpu": "4500m"}, "Insufficient cpu"),
        ({"memory": "9Gi"}, "Insufficient memory"),
        ({"ephemeral-storage": "11Gi"}, "Insufficient ephemeral-storage"),
        ({"example.com/foo": "3"}, "Insufficient example.com/foo"),
        ({"example.com/bar": "1"}, "Insufficient example.com/bar"),
        (
            {"cpu": "5", "memory": "9Gi", "example.com/foo": "3"},
            "Insufficient cpu, Insufficient memory, Insufficient example.com/foo",
        ),
    ],
)
def test_fit_insufficient(requests: dict[str, str], message: str) -> None:
    rejection = fit(requirements(containers=[container(requests)]))
    assert rejection == NativeRejection("NodeResourcesFit", message)


def test_fit_counts_bound_pods() -> None:
    pod = requirements(containers=[container({"cpu": "1"})])
    assert fit(pod, usage_of(3000)) is None
    assert fit(pod, usage_of(3001)) == NativeRejection("NodeResourcesFit", "Insufficient cpu")


def test_too_many_pods_comes_first() -> None:
    pod = requirements(containers=[container({"cpu": "8"})])
    assert fit(pod, usage_of(pods=3)) == NativeRejection(
        "NodeResourcesFit", "Too many pods, Insufficient cpu"
    )
    assert fit(requirements(), usage_of(pods=3)) == NativeRejection(
        "NodeResourcesFit", "Too many pods"
    )


def test_ignored_resource_groups_and_names() -> None:
    pod = requirements(
        containers=[container(limits={"tensor-fusion.ai/index_3": "5", "example.com/foo": "9"})]
    )
    # the group is ignored; example.com/foo is not
    assert fit(pod) == NativeRejection("NodeResourcesFit", "Insufficient example.com/foo")
    args = NodeResourcesFitArgs(ignored_resources=frozenset({"example.com/foo"}))
    assert fit(pod, args=args) == NativeRejection(
        "NodeResourcesFit", "Insufficient tensor-fusion.ai/index_3"
    )
    both = NodeResourcesFitArgs(
        ignored_resources=frozenset({"example.com/foo"}),
        ignored_resource_groups=frozenset({"tensor-fusion.ai"}),
    )
    assert fit(pod, args=both) is None


def test_native_resources_are_never_ignored() -> None:
    args = NodeResourcesFitArgs(
        ignored_resources=frozenset({"cpu", "hugepages-2Mi"}),
        ignored_resource_groups=frozenset({"kubernetes.io"}),
    )
    pod = requirements(containers=[container({"cpu": "5", "hugepages-2Mi": "4Mi"})])
    assert fit(pod, args=args) == NativeRejection(
        "NodeResourcesFit", "Insufficient cpu, Insufficient hugepages-2Mi"
    )


def test_extended_resource_names() -> None:
    assert is_extended_resource_name("nvidia.com/gpu")
    assert is_extended_resource_name("tensor-fusion.ai/index_f")
    assert not is_extended_resource_name("cpu")
    assert not is_extended_resource_name("hugepages-1Gi")
    assert not is_extended_resource_name("kubernetes.io/foo")
    assert not is_extended_resource_name("requests.example.com/foo")


# --- pod requests --------------------------------------------------------------------------


def test_requests_sum_containers_and_max_init() -> None:
    pod = make_pod(
        containers=[
            container({"cpu": "500m", "memory": "1Gi"}),
            container({"cpu": "250m", "memory": "512Mi"}),
        ],
        init_containers=[container({"cpu": "2", "memory": "100Mi"})],
        overhead={"cpu": "100m", "memory": "10Mi"},
    )
    resources = pod_resources(pod)
    assert resources.requests.cpu_milli == 2100
    assert resources.requests.memory == 1536 * MI + 10 * MI
    assert resources.non_zero_cpu_milli == 2100
    assert resources.non_zero_memory == 1536 * MI + 10 * MI


def test_sidecar_init_containers_add_up() -> None:
    pod = make_pod(
        containers=[container({"cpu": "1"})],
        init_containers=[
            container({"cpu": "500m"}, restartPolicy="Always"),
            container({"cpu": "1200m"}),
        ],
    )
    # sum = 1 + 0.5 (sidecar); init peak = 1.2 + 0.5 = 1.7
    assert pod_resources(pod).requests.cpu_milli == 1700


def test_limits_default_requests() -> None:
    pod = make_pod(containers=[container(limits={"cpu": "2", "nvidia.com/gpu": "1"})])
    requests = pod_resources(pod).requests
    assert requests.cpu_milli == 2000
    assert requests.scalar == {"nvidia.com/gpu": 1}


def test_non_zero_defaults_per_container() -> None:
    pod = make_pod(containers=[container({"cpu": "1"}), container()])
    resources = pod_resources(pod)
    assert resources.requests.cpu_milli == 1000
    assert resources.requests.memory == 0
    assert resources.non_zero_cpu_milli == 1000 + DEFAULT_MILLI_CPU_REQUEST
    assert resources.non_zero_memory == 2 * DEFAULT_MEMORY_REQUEST


def test_explicit_zero_request_is_kept() -> None:
    resources = pod_resources(make_pod(containers=[container({"cpu": "0", "memory": "0"})]))
    assert resources.non_zero_cpu_milli == 0
    assert resources.non_zero_memory == 0


def test_pod_level_resources_override() -> None:
    pod = make_pod(
        containers=[container({"cpu": "1"}), container()],
        resources={"requests": {"cpu": "3"}},
    )
    resources = pod_resources(pod)
    assert resources.requests.cpu_milli == 3000
    assert resources.non_zero_cpu_milli == 3000
    # memory is missing at both levels: the per-container default applies
    assert resources.non_zero_memory == 2 * DEFAULT_MEMORY_REQUEST


def test_quantities_round_up() -> None:
    resources = pod_resources(make_pod(containers=[container({"cpu": "0.0001", "memory": 1.5})]))
    assert resources.requests.cpu_milli == 1
    assert resources.requests.memory == 2


def test_bad_quantity_names_the_field() -> None:
    with pytest.raises(NativeInputError, match=r"pod default/p: .*containers\[0\].*cpu"):
        PodRequirements.from_pod(make_pod(containers=[container({"cpu": "lots"})]))


def test_usage_add_and_remove() -> None:
    usage = NodeUsage()
    a = pod_resources(make_pod(containers=[container({"cpu": "1", "example.com/foo": "1"})]))
    b = pod_resources(make_pod(containers=[container()]))
    usage.add(a)
    usage.add(b)
    assert (usage.cpu_milli, usage.pods, usage.non_zero_cpu_milli) == (1000, 2, 1100)
    assert usage.scalar == {"example.com/foo": 1}
    usage.remove(a)
    assert (usage.cpu_milli, usage.pods, usage.non_zero_cpu_milli) == (0, 1, 100)
    assert usage.scalar == {}
    assert NodeUsage.of([a, b]).non_zero_memory == usage.non_zero_memory + DEFAULT_MEMORY_REQUEST


# --- NodeResourcesFit scoring --------------------------------------------------------------


def bound(cpu: str, memory: str) -> NodeUsage:
    return NodeUsage.of(
        [pod_resources(make_pod(containers=[container({"cpu": cpu, "memory": memory})]))]
    )


def test_spec_worked_example_node_a() -> None:
    """The guide's test pod (no requests) on node-a: u = 50 → 60."""
    pod = PodRequirements.from_pod(make_pod(containers=[{"name": "test-container"}]))
    node_a = make_node(allocatable={"cpu": "64", "memory": "512Gi", "pods": "110"})
    assert PLUGINS.fit_score(pod, node_a, bound("32", "256Gi")) == 60


def test_spec_worked_example_node_d() -> None:
    pod = PodRequirements.from_pod(make_pod(containers=[{"name": "test-container"}]))
    node_d = make_node(allocatable={"cpu": "16", "memory": "64Gi", "pods": "110"})
    assert PLUGINS.fit_score(pod, node_d, bound("4", "16Gi")) == 30


def test_empty_node_scores_zero_under_ratio() -> None:
    pod = PodRequirements.from_pod(make_pod())
    node = make_node(allocatable={"cpu": "64", "memory": "512Gi", "pods": "110"})
    # u = 0 for cpu and memory → score 0 for both → no positive scores → 0
    assert PLUGINS.fit_score(pod, node, NodeUsage()) == 0


def test_extended_resource_counts_only_when_requested() -> None:
    node = make_node(
        allocatable={"cpu": "10", "memory": "10Gi", "pods": "110", "nvidia.com/gpu": "8"}
    )
    usage = bound("7500m", "7680Mi")  # 75% + this pod's 100m / 200Mi → 76%
    no_gpu = PodRequirements.from_pod(make_pod())
    assert PLUGINS.fit_score(no_gpu, node, usage) == 90  # 90 + (10 × 1) / 25 → 90
    with_gpu = PodRequirements.from_pod(
        make_pod(containers=[container(limits={"nvidia.com/gpu": "8"})])
    )
    # gpu u = 100 → 100 (weight 5); cpu / memory 76 → 90: (90 + 90 + 500) / 7 = 97.1 → 97
    assert PLUGINS.fit_score(with_gpu, node, usage) == 97


def test_over_capacity_counts_as_full() -> None:
    node = make_node(allocatable={"cpu": "1", "memory": "1Gi", "pods": "110"})
    assert PLUGINS.fit_score(PodRequirements.from_pod(make_pod()), node, bound("2", "2Gi")) == 100


def test_score_rounds_half_away_from_zero() -> None:
    # cpu u = 75 → 90 (weight 1); memory u = 1 → 1 (weight 1): 45.5 → 46
    strategy = ScoringStrategy(
        ScoringStrategyType.REQUESTED_TO_CAPACITY_RATIO,
        (ResourceWeight("cpu", 1), ResourceWeight("memory", 1)),
        SHIPPED.shape,
    )
    node = make_node(allocatable={"cpu": "1", "memory": "100Gi", "pods": "110"})
    pod = PodRequirements.from_pod(
        make_pod(containers=[container({"cpu": "750m", "memory": "1Gi"})])
    )
    assert ResourcesFitScorer(strategy).score(pod.resources, node, NodeUsage()) == 46


@pytest.mark.parametrize(
    ("utilization", "score"),
    [(0, 0), (1, 1), (10, 12), (50, 60), (74, 88), (75, 90), (76, 90), (90, 96), (100, 100)],
)
def test_shape_interpolation(utilization: int, score: int) -> None:
    strategy = ScoringStrategy(
        ScoringStrategyType.REQUESTED_TO_CAPACITY_RATIO, (ResourceWeight("cpu", 1),), SHIPPED.shape
    )
    node = make_node(allocatable={"cpu": "100", "memory": "1Gi", "pods": "110"})
    pod = PodRequirements.from_pod(make_pod(containers=[container({"cpu": str(utilization)})]))
    assert ResourcesFitScorer(strategy).score(pod.resources, node, NodeUsage()) == score


def test_decreasing_shape_truncates_toward_zero() -> None:
    # spread-style shape: (0,10) (100,0); u = 33 → 100 + (-100 × 33) / 100 = 100 - 33 = 67
    strategy = ScoringStrategy(
        ScoringStrategyType.REQUESTED_TO_CAPACITY_RATIO,
        (ResourceWeight("cpu", 1),),
        (ShapePoint(0, 10), ShapePoint(100, 0)),
    )
    node = make_node(allocatable={"cpu": "3", "memory": "1Gi", "pods": "110"})
    pod = PodRequirements.from_pod(make_pod(containers=[container({"cpu": "1"})]))
    # u = 1000 × 100 div 3000 = 33; score = 100 + trunc(-100 × 33 / 100) = 67
    assert ResourcesFitScorer(strategy).score(pod.resources, node, NodeUsage()) == 67


def test_shape_below_first_point_takes_its_score() -> None:
    strategy = ScoringStrategy(
        ScoringStrategyType.REQUESTED_TO_CAPACITY_RATIO,
        (ResourceWeight("cpu", 1),),
        (ShapePoint(20, 5), ShapePoint(80, 10)),
    )
    node = make_node(allocatable={"cpu": "10", "memory": "1Gi", "pods": "110"})
    pod = PodRequirements.from_pod(make_pod(containers=[container({"cpu": "1"})]))
    assert ResourcesFitScorer(strategy).score(pod.resources, node, NodeUsage()) == 50


def test_least_allocated() -> None:
    node = make_node(allocatable={"cpu": "4", "memory": "8Gi", "pods": "110"})
    pod = PodRequirements.from_pod(make_pod(containers=[container({"cpu": "1", "memory": "2Gi"})]))
    usage = bound("1", "4Gi")
    # cpu (4000 - 2000) × 100 / 4000 = 50; memory (8 - 6) × 100 / 8 = 25 → 75 / 2 = 37
    assert ResourcesFitScorer().score(pod.resources, node, usage) == 37
    assert NativePlugins().fit_score(pod, node, usage) == 37


def test_most_allocated() -> None:
    strategy = ScoringStrategy(ScoringStrategyType.MOST_ALLOCATED)
    node = make_node(allocatable={"cpu": "4", "memory": "8Gi", "pods": "110"})
    pod = PodRequirements.from_pod(make_pod(containers=[container({"cpu": "1", "memory": "2Gi"})]))
    # cpu 50, memory 75 → 62
    assert ResourcesFitScorer(strategy).score(pod.resources, node, bound("1", "4Gi")) == 62
    # over capacity is clamped to 100
    assert ResourcesFitScorer(strategy).score(pod.resources, node, bound("8", "16Gi")) == 100


def test_ratio_strategy_needs_a_shape() -> None:
    with pytest.raises(ValueError, match="shape"):
        ScoringStrategy(ScoringStrategyType.REQUESTED_TO_CAPACITY_RATIO)


def test_node_facts_from_node() -> None:
    node = make_node(
        taints=[{"key": "a", "effect": "PreferNoSchedule"}, {"key": "b", "effect": "NoExecute"}],
        allocatable={
            "cpu": "3500m",
            "memory": "1Gi",
            "pods": "110",
            "nvidia.com/gpu": "8",
            "hugepages-2Mi": "0",
            "tensor-fusion.ai/index_0": "36",
        },
    )
    assert node.allowed_pods == 110
    assert node.allocatable.cpu_milli == 3500
    assert node.allocatable.memory == GI
    assert node.allocatable.scalar["nvidia.com/gpu"] == 8
    assert node.blocking_taints == (Taint("b", "", "NoExecute"),)


def test_node_without_name_is_an_error() -> None:
    with pytest.raises(NativeInputError, match=r"metadata\.name"):
        NodeFacts.from_node({"metadata": {}})
