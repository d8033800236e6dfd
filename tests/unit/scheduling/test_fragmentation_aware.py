"""The FragmentationAware placement mode: the measure, the choice, the learned mix, and the
same decision from the simulator's path and the extender's."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tensorfusion.domain.allocation_request import AllocationRequest, ResourceAmount
from tensorfusion.domain.allocator.allocator import Allocator, PoolSettings
from tensorfusion.domain.allocator.workload_mix import (
    MixSnapshot,
    NodeFragments,
    RequestClass,
    WorkloadMix,
    cpu_class,
)
from tensorfusion.domain.annotations import KEYS
from tensorfusion.domain.scheduling.decision import ScoreWeights, decide, decide_indexed
from tensorfusion.domain.scheduling.extender_verbs import filter_worker
from tensorfusion.domain.scheduling.fragmentation import GPUKey, measure_weights, node_fragmentation
from tensorfusion.domain.scheduling.node_index import NodeScoreIndex
from tensorfusion.domain.scheduling.placement import PlacementWeights
from tensorfusion.domain.scheduling.scheduler_config import SchedulingProfile
from tensorfusion.domain.vocabulary import PlacementMode

from ..allocator.builders import POOL, AllNodesPass, allocator_with, gpu, request

GIB = 2**30
ARGS = SchedulingProfile()
WEIGHTS = ScoreWeights(1, 5)
CAP = ("100", "100Gi")
FGD = PlacementMode.FRAGMENTATION_AWARE


def key(free: int, *, idle: bool = False) -> GPUKey:
    """A 100-TFLOPs, 100Gi GPU with `free` TFLOPs and Gi free."""
    return (free * 1000, free * GIB, 100_000, 100 * GIB, "A100", True, idle)


def amount(size: int) -> ResourceAmount:
    return ResourceAmount(tflops_milli=size * 1000, vram_bytes=size * GIB)


def cluster(mode: PlacementMode, *nodes: int) -> Allocator:
    """Nodes node-a, node-b, ... with the given numbers of 100-TFLOPs, 100Gi GPUs."""
    gpus = [
        gpu(f"{chr(97 + n)}{i}", f"node-{chr(97 + n)}", capacity=CAP)
        for n, count in enumerate(nodes)
        for i in range(1, count + 1)
    ]
    return allocator_with(*gpus, pools=(PoolSettings(POOL, placement_mode=mode),))


def hold(allocator: Allocator, uid: str, node: str, gpus: tuple[str, ...], size: int) -> None:
    pod = request(uid, (str(size), f"{size}Gi"), count=len(gpus))
    allocator.assume(pod, node, gpus, 0.0)
    allocator.commit(uid, 0.0)


def learn(allocator: Allocator, *pods: AllocationRequest) -> None:
    for pod in pods:
        allocator.workload_mix(POOL).observe(pod)


def place(allocator: Allocator, pod: AllocationRequest) -> tuple[str | None, tuple[str, ...]]:
    index = NodeScoreIndex(allocator, ARGS.gpu_fit.weights)
    decision = decide_indexed(index, pod, AllNodesPass(), profile=ARGS, reasons=False)
    full = decide(allocator, pod, AllNodesPass(), sorted(allocator.nodes), profile=ARGS)
    assert (full.node, full.gpus) == (decision.node, decision.gpus)
    return decision.node, decision.gpus


# ---- the measure ---------------------------------------------------------------------------


def test_fragmentation_of_a_node_by_hand() -> None:
    # Free units: 0.3 and 1.0 GPU. Class 50 (x2) cannot use the 0.3: 2 x 300,000. Class 20
    # uses both: 0. A 2-GPU class 50 finds one host only: all 1,300,000 is fragment.
    mix = MixSnapshot(
        (RequestClass(1, amount(50)), RequestClass(1, amount(20)), RequestClass(2, amount(50))),
        (2, 1, 1),
    )
    weights = PlacementWeights()
    assert node_fragmentation([key(30), key(100)], mix, weights) == 2 * 300_000 + 1_300_000
    # Only TFLOPs short: the GPU is still a fragment for class 50 (VRAM alone is not enough).
    tflops_short: GPUKey = (30_000, 100 * GIB, 100_000, 100 * GIB, "A100", True, False)
    units = round((0.3 * 0.3 + 0.7 * 1.0) * 1_000_000)
    one_class = MixSnapshot((RequestClass(1, amount(50)),), (1,))
    assert node_fragmentation([tflops_short], one_class, weights) == units


def test_whole_card_model_and_percent_classes_by_hand() -> None:
    weights = PlacementWeights()
    whole = MixSnapshot((RequestClass(1, ResourceAmount(), whole_card=True),), (1,))
    # A busy GPU (not idle) is a fragment for a whole-card request, an idle one is not.
    assert node_fragmentation([key(60), key(100, idle=True)], whole, weights) == 600_000
    other_model = MixSnapshot((RequestClass(1, amount(10), gpu_model="H100"),), (3,))
    assert node_fragmentation([key(100)], other_model, weights) == 3 * 1_000_000
    half = MixSnapshot((RequestClass(1, ResourceAmount(percent_milli=50_000)),), (1,))
    assert node_fragmentation([key(40), key(50)], half, weights) == 400_000


# ---- the choice ----------------------------------------------------------------------------


def test_compact_first_strands_capacity_the_mix_needs_and_this_mode_does_not() -> None:
    # node-a holds 50 of 100; the observed pods take 50 each; a 30 arrives.
    history = [request(f"h{i}", ("50", "50Gi")) for i in range(8)]
    choices = {}
    for mode in (PlacementMode.COMPACT_FIRST, FGD):
        allocator = cluster(mode, 1, 1)
        hold(allocator, "held", "node-a", ("a1",), 50)
        learn(allocator, *history)
        choices[mode] = place(allocator, request("new", ("30", "30Gi")))
    assert choices[PlacementMode.COMPACT_FIRST] == ("node-a", ("a1",))  # leaves 20: unusable
    assert choices[FGD] == ("node-b", ("b1",))  # leaves 50 and 70: both usable


def test_low_load_first_strands_capacity_the_mix_needs_and_this_mode_does_not() -> None:
    # node-a has 40 free; the mix is 40s and 60s; a 40 arrives.
    history = [request(f"h{i}", (f"{s}", f"{s}Gi")) for i, s in enumerate([40, 60] * 4)]
    choices = {}
    for mode in (PlacementMode.LOW_LOAD_FIRST, FGD):
        allocator = cluster(mode, 1, 1)
        hold(allocator, "held", "node-a", ("a1",), 60)
        learn(allocator, *history)
        choices[mode] = place(allocator, request("new", ("40", "40Gi")))
    assert choices[PlacementMode.LOW_LOAD_FIRST][0] == "node-b"
    assert choices[FGD] == ("node-a", ("a1",))  # fills the 40 a 60 could never use


def test_percent_request_keeps_two_gpus_usable_for_a_two_gpu_mix() -> None:
    # node-a: a1 half used, a2 empty; the mix asks 2 x 50%. A 1 x 50% pod goes on a2: on a1
    # it would leave a2 alone, which no 2-GPU pod can use.
    allocator = cluster(FGD, 2, 2)
    hold(allocator, "held", "node-a", ("a1",), 50)
    learn(allocator, *[request(f"h{i}", count=2, percent="50") for i in range(4)])
    assert place(allocator, request("new", percent="50")) == ("node-a", ("a2",))


def test_multi_gpu_request_fills_half_used_gpus_that_whole_gpu_pods_cannot_use() -> None:
    allocator = cluster(FGD, 2, 2)
    hold(allocator, "h-a", "node-a", ("a1", "a2"), 50)
    learn(allocator, *[request(f"w{i}", ("100", "100Gi")) for i in range(4)])
    pod = request("new", ("50", "50Gi"), count=2)
    assert place(allocator, pod) == ("node-a", ("a1", "a2"))
    low = cluster(PlacementMode.LOW_LOAD_FIRST, 2, 2)
    hold(low, "h-a", "node-a", ("a1", "a2"), 50)
    assert place(low, pod)[0] == "node-b"


# ---- the learned mix -----------------------------------------------------------------------


def test_the_mix_depends_on_arrivals_only_and_counts_each_pod_once() -> None:
    pods = [request("p1", ("10", "1Gi")), request("p2", ("20", "2Gi")),
            request("p3", ("10", "1Gi"), count=2), request("p4", ("10", "1Gi"))]  # fmt: skip
    one, other = WorkloadMix(), WorkloadMix()
    for pod in pods:
        one.observe(pod)
    for pod in reversed(pods):
        other.observe(pod)
    assert one.observe(pods[0]) is False  # a retry of a waiting pod
    assert one.snapshot().as_dict() == other.snapshot().as_dict()
    assert one.snapshot().as_dict()[RequestClass.of(pods[0])] == 2
    assert one.arrivals == 4


def test_the_window_forgets_the_oldest_arrivals() -> None:
    mix = WorkloadMix(window=2)
    for uid, size in (("a", "10"), ("b", "20"), ("c", "20")):
        mix.observe(request(uid, (size, "1Gi")))
    assert mix.snapshot().as_dict() == {RequestClass.of(request("x", ("20", "1Gi"))): 2}
    assert mix.observe(request("a", ("10", "1Gi"))) is True  # forgotten, so new again


def test_decisions_learn_the_mix_in_this_mode_only() -> None:
    for mode, learned in ((FGD, 1), (PlacementMode.NODE_COMPACT_GPU_LOW_LOAD, 0)):
        allocator = cluster(mode, 1)
        pod = request("p", ("10", "1Gi"))
        place(allocator, pod)
        place(allocator, pod)  # the same pod again: counted once
        assert allocator.workload_mix(POOL).arrivals == learned


# ---- the simulator's path and the extender's -----------------------------------------------


def worker(uid: str, tflops: str, vram: str) -> Any:
    return {
        "metadata": {
            "name": uid, "namespace": "default", "uid": uid,
            "labels": {KEYS.component: "worker"},
            "annotations": {KEYS.gpupool: POOL, KEYS.tflops_request: tflops,
                            KEYS.vram_request: vram},
        },
        "spec": {"containers": [{"name": "main"}]},
    }  # fmt: skip


def test_simulator_and_extender_paths_decide_the_same() -> None:
    sizes = [50, 30, 70, 20, 50, 40, 30, 60]
    sim, ext = cluster(FGD, 2, 2, 1), cluster(FGD, 2, 2, 1)
    sim_index, ext_index = (
        NodeScoreIndex(sim, ARGS.gpu_fit.weights),
        NodeScoreIndex(ext, ARGS.gpu_fit.weights),
    )
    names = sorted(ext.nodes)
    for i, size in enumerate(sizes):
        uid = f"p{i}"
        pod = request(uid, (str(size), f"{size}Gi"))
        decision = decide_indexed(sim_index, pod, AllNodesPass(), profile=ARGS, reasons=False)
        answer = filter_worker(
            ext_index,
            worker(uid, str(size), f"{size}Gi"),
            node_names=names,
            native=AllNodesPass(),
            profile=ARGS,
            now=0.0,
        )
        if decision.node is None:
            assert answer.assumed is None
            continue
        assert answer.assumed is not None
        assert (answer.assumed.node, answer.assumed.gpus) == (decision.node, decision.gpus)
        sim.assume(pod, decision.node, decision.gpus, 0.0)
        sim.commit(uid, 0.0)
        ext.commit(uid, 0.0)
    assert sim.workload_mix(POOL).snapshot().as_dict() == (
        ext.workload_mix(POOL).snapshot().as_dict()
    )


# ---- CPU, the measured dimensions and the per-node memo ------------------------------------


def test_a_class_whose_cpu_exceeds_the_free_cpu_finds_all_free_units_a_fragment() -> None:
    weights = PlacementWeights()
    mix = MixSnapshot(
        (RequestClass(1, amount(20), cpu_milli=8000), RequestClass(1, amount(20))), (3, 1)
    )
    # 0.3 + 1.0 GPU free, both usable by a 20: nothing is a fragment while the CPU fits.
    assert node_fragmentation([key(30), key(100)], mix, weights, cpu_free=8000) == 0
    assert node_fragmentation([key(30), key(100)], mix, weights) == 0
    # 7.9 cores free: the 8-core class cannot come, so its 3 arrivals see 1.3 GPU stranded.
    assert node_fragmentation([key(30), key(100)], mix, weights, cpu_free=7999) == 3 * 1_300_000


def test_node_fragments_add_each_cpu_threshold_below_the_free_cpu() -> None:
    fragments = NodeFragments(free=0, roomy=5, thresholds=(2000, 8000), extra=(30, 10, 0))
    assert [fragments.at(c) for c in (None, 9000, 8000, 7999, 2000, 1999, -1)] == [
        5, 5, 5, 15, 15, 35, 35,
    ]  # fmt: skip


def test_cpu_classes_round_down_to_a_power_of_two_of_whole_cores() -> None:
    assert [cpu_class(m) for m in (0, 999, 1000, 1999, 3000, 12000, 16000)] == [
        0, 0, 1000, 1000, 2000, 8000, 16000,
    ]  # fmt: skip
    pod = request("p", percent="50")
    assert RequestClass.of(pod, 12_500).cpu_milli == 8000


def test_free_vram_that_no_class_asks_for_is_not_measured() -> None:
    # Compute-percent pods ask no VRAM: a GPU with no compute left is no fragment, however
    # much VRAM it has free.
    weights = PlacementWeights()
    percent = MixSnapshot((RequestClass(1, ResourceAmount(percent_milli=50_000)),), (1,))
    no_compute: GPUKey = (0, 100 * GIB, 100_000, 100 * GIB, "A100", True, False)
    assert measure_weights(percent, weights) == PlacementWeights(vram=0.0, tflops=0.3)
    assert node_fragmentation([no_compute, key(40)], percent, weights) == 400_000
    both = MixSnapshot((RequestClass(1, amount(50)),), (1,))
    assert measure_weights(both, weights) == weights


@dataclass
class CPUView(AllNodesPass):
    """Every node passes; the pod asks `request` millicores and each node has `free`."""

    request: int = 0
    free: dict[str, int] = field(default_factory=dict)

    def cpu_request(self) -> int:
        return self.request

    def cpu_free(self, node: str) -> int | None:
        return self.free.get(node)


def test_a_cpu_heavy_pod_goes_where_it_strands_no_gpu() -> None:
    # Both nodes: one empty GPU. The mix: 4-core pods of 20%. node-a has 10 cores free,
    # node-b 40: an 8-core pod on node-a would leave 2 cores, and its 80% free no 4-core pod
    # could reach; on node-b nothing is stranded.
    allocator = cluster(FGD, 1, 1)
    history = [request(f"h{i}", percent="20") for i in range(4)]
    for pod in history:
        allocator.workload_mix(POOL).observe(pod, 4000)
    view = CPUView(request=8000, free={"node-a": 10_000, "node-b": 40_000})
    pod = request("new", percent="20")
    index = NodeScoreIndex(allocator, ARGS.gpu_fit.weights)
    fast = decide_indexed(index, pod, view, profile=ARGS, reasons=False)
    full = decide(allocator, pod, view, sorted(allocator.nodes), profile=ARGS)
    assert fast.node == full.node == "node-b"
    roomy = CPUView(request=8000, free={"node-a": 40_000, "node-b": 10_000})
    assert (
        decide_indexed(index, request("n2", percent="20"), roomy, profile=ARGS, reasons=False).node
        == "node-a"
    )


def test_pods_of_one_class_decide_the_same_with_the_node_memo_as_without() -> None:
    # The memo keeps each node's evaluation and pick per class until the node changes:
    # a long run of repeated classes decides exactly as fresh indexes do.
    sizes = [50, 30, 50, 30, 20, 50, 30, 20, 70, 30, 50]
    kept, fresh = cluster(FGD, 2, 2, 1), cluster(FGD, 2, 2, 1)
    kept_index = NodeScoreIndex(kept, ARGS.gpu_fit.weights)
    for i, size in enumerate(sizes):
        pod = request(f"p{i}", (str(size), f"{size}Gi"))
        memo = decide_indexed(kept_index, pod, AllNodesPass(), profile=ARGS, reasons=False)
        new = decide_indexed(
            NodeScoreIndex(fresh, ARGS.gpu_fit.weights),
            pod,
            AllNodesPass(),
            profile=ARGS,
            reasons=False,
        )
        assert (memo.node, memo.gpus) == (new.node, new.gpus)
        for allocator in (kept, fresh):
            if memo.node is not None:
                allocator.assume(pod, memo.node, memo.gpus, 0.0)
                allocator.commit(pod.pod_uid, 0.0)
