"""The two `/api/simulate-schedule` examples of scheduling.md §16.1, field by field.

The cluster of the examples is `data/spec_16_1_cluster.yaml`. Two facts of the examples cannot
be written in the cluster-file format: GPU names (`gpu-a1`, ...; the file generates
`gpu-<node>-<i>`) and the pod holding 100 TFLOPs / 20Gi on `gpu-a1`. The test wraps the
runner's `build_cluster` to rename the GPUs and commit that holder, then calls
`simulate_schedule` unchanged: admission dry run, native filters, GPU stages, scores, choice.
The expected bodies in `data/` are the spec's JSON blocks, copied verbatim.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from tensorfusion.adapters.package_data import default_scheduler_config
from tensorfusion.domain.admission.dry_run import PodPreparer
from tensorfusion.domain.allocation_request import AllocationRequest, ResourceAmount
from tensorfusion.domain.quantities import parse_quantity
from tensorfusion.domain.scheduling.decision import NOT_SELECTED, decide, decide_indexed
from tensorfusion.domain.scheduling.native import NativePlugins
from tensorfusion.domain.scheduling.native.cluster_view import NativeCluster
from tensorfusion.domain.scheduling.node_index import NodeScoreIndex
from tensorfusion.domain.scheduling.scheduler_config import read_scheduler_settings
from tensorfusion.domain.simulate_schedule import UnknownNodesError, simulate_schedule
from tensorfusion.sim import runner
from tensorfusion.sim.cluster_file import ClusterFile, load_cluster
from tensorfusion.sim.virtual_cluster import PolicyOverrides, VirtualCluster, build_cluster

DATA = Path(__file__).parent / "data"
CLUSTER = DATA / "spec_16_1_cluster.yaml"
GPU_NAMES = {
    "gpu-node-a-0": "gpu-a1",
    "gpu-node-a-1": "gpu-a2",
    "gpu-node-b-0": "gpu-b1",
    "gpu-node-c-0": "gpu-c1",
    "gpu-node-d-0": "gpu-d1",
    "gpu-node-d-1": "gpu-d2",
}
HOLDER = AllocationRequest(
    pool="tensor-fusion-shared",
    namespace="other",
    pod_name="holder",
    pod_uid="uid-holder",
    workload="holder",
    request=ResourceAmount(tflops_milli=100_000, vram_bytes=parse_quantity("20Gi").ceil()),
    limit=ResourceAmount(tflops_milli=100_000, vram_bytes=parse_quantity("20Gi").ceil()),
)


def spec_cluster(cluster: Any, overrides: PolicyOverrides | None = None) -> VirtualCluster:
    """The cluster file's virtual cluster with the spec's GPU names and gpu-a1's holder."""
    virtual = build_cluster(cluster, overrides)
    allocator = virtual.allocator
    for old, new in GPU_NAMES.items():
        state = allocator.gpus[old]
        allocator.remove_gpu(old)
        allocator.upsert_gpu(
            replace(state, name=new, uuid=new, running_apps={}, holders={}, partitions={})
        )
    assert sorted(allocator.gpus) == sorted(GPU_NAMES.values())
    allocator.assume(HOLDER, "node-a", ["gpu-a1"], now=0.0)
    allocator.commit(HOLDER.pod_uid, now=0.0)
    allocator.mark_running(HOLDER.pod_uid)
    return virtual


def load_json(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((DATA / name).read_text(encoding="utf-8"))
    return data


def load_pod(name: str) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((DATA / name).read_text(encoding="utf-8"))
    return data


def simulate(pod: str, nodes: list[str] | None) -> dict[str, Any]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(runner, "build_cluster", spec_cluster)
        return runner.simulate_schedule(load_cluster(CLUSTER), CLUSTER, load_pod(pod), nodes)


@pytest.fixture(scope="module")
def success() -> dict[str, Any]:
    return simulate("guide_test_pod.yaml", None)


@pytest.fixture(scope="module")
def unschedulable() -> dict[str, Any]:
    return simulate("trainer_pod.yaml", ["node-a", "node-b", "node-d"])


SUCCESS = load_json("spec_16_1_success.json")
UNSCHEDULABLE = load_json("spec_16_1_unschedulable.json")


def test_the_cluster_file_builds_the_examples_cluster() -> None:
    virtual = spec_cluster(load_cluster(CLUSTER))
    gpus = virtual.allocator.gpus
    assert {n: g.node for n, g in gpus.items()} == {
        "gpu-a1": "node-a", "gpu-a2": "node-a", "gpu-b1": "node-b", "gpu-c1": "node-c",
        "gpu-d1": "node-d", "gpu-d2": "node-d",
    }  # fmt: skip
    assert gpus["gpu-d2"].phase == "Unknown"
    assert gpus["gpu-a1"].available_tflops == 212_000
    assert gpus["gpu-a1"].available_vram == parse_quantity("60Gi").ceil()


@pytest.mark.parametrize("field", [k for k in SUCCESS if k != "nodes"])
def test_success_example_field(success: dict[str, Any], field: str) -> None:
    assert success[field] == SUCCESS[field]


@pytest.mark.parametrize("index", range(len(SUCCESS["nodes"])))
def test_success_example_node(success: dict[str, Any], index: int) -> None:
    assert [n["node"] for n in success["nodes"]] == [n["node"] for n in SUCCESS["nodes"]]
    assert success["nodes"][index] == SUCCESS["nodes"][index]


def test_success_example_whole_body(success: dict[str, Any]) -> None:
    assert success == SUCCESS


@pytest.mark.parametrize("field", [k for k in UNSCHEDULABLE if k != "nodes"])
def test_unschedulable_example_field(unschedulable: dict[str, Any], field: str) -> None:
    assert unschedulable[field] == UNSCHEDULABLE[field]


@pytest.mark.parametrize("index", range(len(UNSCHEDULABLE["nodes"])))
def test_unschedulable_example_node(unschedulable: dict[str, Any], index: int) -> None:
    expected = UNSCHEDULABLE["nodes"]
    assert [n["node"] for n in unschedulable["nodes"]] == [n["node"] for n in expected]
    assert unschedulable["nodes"][index] == expected[index]


def test_unschedulable_example_whole_body(unschedulable: dict[str, Any]) -> None:
    assert unschedulable == UNSCHEDULABLE


def test_fit_scores_of_the_success_example(success: dict[str, Any]) -> None:
    # fit: node-a u = 50 → 60, node-d u = 25 → 30; combined = fit + 5 × nodeScore
    scores = {n["node"]: n["score"] for n in success["nodes"]}
    assert scores["node-a"] == {"nodeResourcesFit": 60, "gpuPlacement": 13, "combined": 125}
    assert scores["node-d"] == {"nodeResourcesFit": 30, "gpuPlacement": 0, "combined": 30}
    assert scores["node-b"] is None
    assert scores["node-c"] is None


def test_simulation_changes_nothing() -> None:
    # Two runs of the same request give the same body: no assumption, no index advance.
    first = simulate("guide_test_pod.yaml", None)
    second = simulate("guide_test_pod.yaml", None)
    assert first == second


def test_without_the_nodes_restriction_the_trainer_also_sees_node_c() -> None:
    body = simulate("trainer_pod.yaml", None)
    assert [n["node"] for n in body["nodes"]] == ["node-a", "node-b", "node-c", "node-d"]
    assert body["result"]["message"] == (
        "0/4 nodes are available: 1 GPUResourceFilter, 1 NodeAffinity, 1 NodeResourcesFit, "
        "1 NodeUnschedulable."
    )


def test_quota_rejection_ends_the_chain_at_quota_check() -> None:
    data = yaml.safe_load(CLUSTER.read_text(encoding="utf-8"))
    data["quotas"][0]["total"]["requests"]["tflops"] = "400"  # 2 × 250 = 500 > 400
    cluster = ClusterFile.model_validate(data)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(runner, "build_cluster", spec_cluster)
        body = runner.simulate_schedule(
            cluster, CLUSTER, load_pod("trainer_pod.yaml"), ["node-a", "node-b", "node-d"]
        )
    message = "GPU quota exceeded in namespace ml: total.requests.tflops requested 500, limit 400"
    assert body["quota"] == {
        "namespace": "ml", "quota": "ml-quota", "checked": True, "allowed": False,
        "message": message,
    }  # fmt: skip
    assert body["result"]["message"] == (
        "0/3 nodes are available: 1 NodeAffinity, 1 NodeResourcesFit, 1 QuotaCheck."
    )
    assert body["stages"] == [
        {"stage": "QuotaCheck", "in": 2, "out": 0, "removed": [
            {"gpu": "gpu-a1", "node": "node-a", "reason": message},
            {"gpu": "gpu-a2", "node": "node-a", "reason": message},
        ]},
    ]  # fmt: skip
    assert body["skippedStages"] == [
        "IsolationPolicy", "PhaseFilter", "GPUIndexFilter", "GPUIsolationModeFilter",
        "SharedWholeGPUFilter", "GPUResourceFilter", "QuotaPercentCheck", "GPUModelFilter",
        "GPUVendorFilter", "SameNodeFilter", "MaxWorkerPerNode",
    ]  # fmt: skip
    node_a = body["nodes"][0]
    assert node_a["rejectedAt"] == "QuotaCheck"
    # node_a["message"] is the quota message here; §16.1's generic rule would read
    # "0 of 2 required GPUs left after QuotaCheck": ambiguous, not asserted.
    assert [g["rejectedAt"] for g in node_a["gpus"]] == ["QuotaCheck", "QuotaCheck"]


def test_mutate_false_reads_the_pod_as_is() -> None:
    pod = load_pod("guide_test_pod.yaml")
    pod["metadata"]["annotations"]["tensor-fusion.ai/gpupool"] = "tensor-fusion-shared"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(runner, "build_cluster", spec_cluster)
        body = runner.simulate_schedule(load_cluster(CLUSTER), CLUSTER, pod, None, mutate=False)
    assert body["mutated"] is False
    assert body["warnings"] == []
    # no admission: no QoS derivation (the admitted pod is `high`, §16.1)
    assert body["request"]["qos"] == "medium"
    assert body["result"]["node"] == "node-a"
    assert body["result"]["gpus"] == ["gpu-a2"]


@pytest.mark.parametrize(
    ("pod", "nodes", "expected"),
    [
        ("guide_test_pod.yaml", None, SUCCESS),
        ("trainer_pod.yaml", ["node-a", "node-b", "node-d"], UNSCHEDULABLE),
    ],
)
def test_decisions_carry_the_message_of_every_node_the_example_shows(
    pod: str, nodes: list[str] | None, expected: dict[str, Any]
) -> None:
    """What the extender returns per node (`FailedAndUnresolvableNodes`) is the message the
    explanation shows. The indexed decision never opens nodes whose bound is too low: they
    lost on score whatever a native filter says (kube-scheduler filtered them already)."""
    cluster = load_cluster(CLUSTER)
    settings = read_scheduler_settings(cluster.scheduler_config or default_scheduler_config())
    virtual = spec_cluster(cluster)
    native = NativeCluster.from_nodes(NativePlugins(settings.node_resources_fit),
                                      virtual.node_objects)  # fmt: skip
    for name, spec in virtual.nodes.items():
        if spec.requested:
            native.add_requests(name, spec.requested)
    objects = virtual.objects
    prepared = PodPreparer(objects.pools, objects.quotas, objects.gpus).prepare(
        load_pod(pod), "p", "ml" if nodes else "default", "uid-p", advance_index=False
    )
    native.add_pod("uid-p", prepared.pod)
    args = settings.profile
    candidates = nodes or native.node_names()
    index = NodeScoreIndex(virtual.allocator, args.gpu_fit.weights)
    full = decide(
        virtual.allocator, prepared.request, native.view("uid-p"), candidates, profile=args
    )
    fast = decide_indexed(
        index, prepared.request, native.view("uid-p"), profile=args, allowed=set(candidates)
    )
    assert full.node == fast.node == expected["result"]["node"]
    for node in expected["nodes"]:
        if not node["selected"]:
            assert full.rejection_message(node["node"]) == node["message"]
            allowed = {node["message"]} if fast.node is None else {node["message"], NOT_SELECTED}
            assert fast.rejection_message(node["node"]) in allowed


def test_an_explanation_leaves_the_native_view_and_the_allocator_as_they_were() -> None:
    cluster = load_cluster(CLUSTER)
    settings = read_scheduler_settings(cluster.scheduler_config or default_scheduler_config())
    virtual = spec_cluster(cluster)
    native = NativeCluster.from_nodes(NativePlugins(settings.node_resources_fit),
                                      virtual.node_objects)  # fmt: skip
    objects = virtual.objects
    preparer = PodPreparer(objects.pools, objects.quotas, objects.gpus)
    records = dict(virtual.allocator.records)
    body = simulate_schedule(
        load_pod("guide_test_pod.yaml"),
        preparer,
        native,
        virtual.allocator,
        profile=settings.profile,
    )
    assert body["result"]["schedulable"]
    assert native.pods == {} and all(not memo for memo in native.outcomes.values())
    assert virtual.allocator.records == records
    assert preparer.index.peek() == 1
    with pytest.raises(UnknownNodesError, match="unknown node"):
        simulate_schedule(
            load_pod("guide_test_pod.yaml"),
            preparer,
            native,
            virtual.allocator,
            profile=settings.profile,
            nodes=["node-z"],
        )
