"""The extender's `filter` and `prioritize` answers (scheduling.md §1, §11, §15)."""

from __future__ import annotations

from typing import Any

from tensorfusion.domain.allocator.allocator import Allocator
from tensorfusion.domain.allocator.records import RecordState
from tensorfusion.domain.annotations import KEYS
from tensorfusion.domain.scheduling.decision import ScoreWeights
from tensorfusion.domain.scheduling.extender_verbs import (
    PodKind,
    filter_native_gpu_pod,
    filter_worker,
    pod_kind,
    prioritize,
)
from tensorfusion.domain.scheduling.node_index import NodeScoreIndex
from tensorfusion.domain.scheduling.scheduler_config import SchedulingProfile

from ..allocator.builders import POOL, AllNodesPass, allocator_with, gpu, request

ARGS = SchedulingProfile()
WEIGHTS = ScoreWeights()
NODES = ("node-a", "node-b", "node-c")


def cluster() -> Allocator:
    """node-a: one 312 TFLOPs GPU; node-b: two; node-c: none of the pool."""
    return allocator_with(gpu("a1", "node-a"), gpu("b1", "node-b"), gpu("b2", "node-b"))


def worker(uid: str = "w", tflops: str = "100", vram: str = "10Gi", **labels: str) -> Any:
    return {
        "metadata": {
            "name": uid, "namespace": "default", "uid": uid,
            "labels": {KEYS.component: "worker", **labels},
            "annotations": {KEYS.gpupool: POOL, KEYS.tflops_request: tflops,
                            KEYS.vram_request: vram},
        },
        "spec": {"containers": [{"name": "main"}]},
    }  # fmt: skip


def test_one_node_passes_its_gpus_are_assumed_and_every_other_node_says_why() -> None:
    allocator = cluster()
    answer = filter_worker(
        NodeScoreIndex(allocator),
        worker(),
        node_names=NODES,
        native=AllNodesPass(),
        profile=ARGS,
        now=10,
    )
    assert answer.assumed is not None and answer.assumed.state is RecordState.ASSUMED
    [chosen] = answer.result.node_names
    assert chosen == answer.assumed.node
    assert allocator.records["w"] is answer.assumed
    # With a node chosen kube-scheduler shows no per-node reason: none is sent.
    assert answer.result.failed_and_unresolvable_nodes == {}
    assert answer.result.failed_nodes == {} and answer.unschedulable is None


def test_a_second_filter_replaces_the_assumption_instead_of_competing_with_it() -> None:
    allocator = allocator_with(gpu("a1", "node-a"))
    index = NodeScoreIndex(allocator)
    for _ in range(3):
        answer = filter_worker(
            index,
            worker(tflops="300"),
            node_names=NODES,
            native=AllNodesPass(),
            profile=ARGS,
            now=1,
        )
        assert answer.result.node_names == ("node-a",)
    assert allocator.gpus["a1"].assumed_tflops == 300_000
    assert list(allocator.records) == ["w"]


def test_nothing_feasible_fails_every_node_assumes_nothing_and_summarises() -> None:
    allocator = cluster()
    answer = filter_worker(
        NodeScoreIndex(allocator),
        worker(tflops="400"),
        node_names=NODES,
        native=AllNodesPass(),
        profile=ARGS,
        now=1,
    )
    assert answer.result.node_names == () and answer.assumed is None
    assert set(answer.result.failed_and_unresolvable_nodes) == set(NODES)
    failed = answer.result.failed_and_unresolvable_nodes
    assert failed["node-a"] == "0 of 1 required GPUs left after GPUResourceFilter"
    assert answer.unschedulable is not None
    assert answer.unschedulable.startswith("0/3 nodes are available: ")
    assert allocator.records == {}


def test_bad_annotations_fail_every_node_with_the_problem() -> None:
    pod = worker()
    pod["metadata"]["annotations"][KEYS.vram_request] = "lots"
    answer = filter_worker(
        NodeScoreIndex(cluster()), pod, node_names=NODES, native=AllNodesPass(), profile=ARGS, now=1
    )
    assert answer.result.node_names == ()
    assert all(KEYS.vram_request in reason
               for reason in answer.result.failed_and_unresolvable_nodes.values())  # fmt: skip
    assert answer.unschedulable is not None and KEYS.vram_request in answer.unschedulable


def test_prioritize_gives_10_to_the_assumed_node_only() -> None:
    allocator = cluster()
    answer = filter_worker(
        NodeScoreIndex(allocator),
        worker(),
        node_names=NODES,
        native=AllNodesPass(),
        profile=ARGS,
        now=1,
    )
    chosen = answer.result.node_names[0]
    scores = {p.host: p.score for p in prioritize(allocator, "w", NODES).priorities}
    assert scores == {name: 10 if name == chosen else 0 for name in NODES}
    assert {p.score for p in prioritize(allocator, "other", NODES).priorities} == {0}


def test_a_native_gpu_pod_avoids_nodes_with_tf_workers() -> None:
    allocator = cluster()
    allocator.assume(request("w", ("10", "1Gi")), "node-b", ["b1"], now=1)
    answer = filter_native_gpu_pod(allocator, NODES)
    assert answer.result.node_names == ("node-a", "node-c")
    assert answer.result.failed_and_unresolvable_nodes == {
        "node-b": "node hosts TensorFusion workers"}  # fmt: skip
    everywhere = filter_native_gpu_pod(allocator, ("node-b",))
    assert everywhere.unschedulable is not None


def test_pod_kinds() -> None:
    native = {"metadata": {}, "spec": {"containers": [
        {"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}  # fmt: skip
    assert pod_kind(worker(), progressive_migration=False) is PodKind.WORKER
    assert pod_kind(native, progressive_migration=True) is PodKind.NATIVE_GPU
    assert pod_kind(native, progressive_migration=False) is PodKind.OTHER
    assert pod_kind({"metadata": {}}, progressive_migration=True) is PodKind.OTHER
