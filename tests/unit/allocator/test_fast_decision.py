"""The indexed decision chooses exactly what the full evaluation of every node chooses."""

from __future__ import annotations

from dataclasses import dataclass, replace

from hypothesis import given, settings
from hypothesis import strategies as st

from tensorfusion.domain.allocation_request import AllocationRequest
from tensorfusion.domain.allocator.allocator import Allocator, PoolSettings
from tensorfusion.domain.allocator.filter_chain import GPUSchedulingArgs
from tensorfusion.domain.allocator.quota import QuotaCaps, QuotaSpec
from tensorfusion.domain.scheduling.decision import ScoreWeights, decide, decide_indexed
from tensorfusion.domain.scheduling.node_index import NodeScoreIndex
from tensorfusion.domain.topology import TopologyArgs
from tensorfusion.domain.vocabulary import (
    GPUPhase,
    IsolationMode,
    IsolationPolicy,
    PlacementMode,
    TopologyMode,
)

from .builders import gpu, request


@dataclass
class TableView:
    """Native filters and fits from tables (a node missing from `fits` is rejected)."""

    fits: dict[str, int]

    def rejection(self, node: str) -> tuple[str, str] | None:
        return None if node in self.fits else ("NodeAffinity", "no match")

    def fit(self, node: str) -> int:
        return self.fits[node]

    def fit_bound(self) -> int:
        return max(self.fits.values(), default=0)


node_shapes = st.lists(
    st.tuples(
        st.integers(1, 4),  # GPUs
        st.sampled_from([("312", "80Gi"), ("100", "16Gi")]),
        st.sampled_from([GPUPhase.RUNNING, GPUPhase.RUNNING, GPUPhase.PENDING]),
        st.sampled_from(["", "", "soft", "hard"]),
        st.sampled_from([-1, 0, 1]),  # NUMA node of odd GPUs
    ),
    min_size=1,
    max_size=6,
)
pods = st.lists(
    st.tuples(
        st.integers(0, 120),
        st.integers(0, 40),
        st.integers(1, 3),
        st.sampled_from([IsolationMode.SOFT, IsolationMode.HARD, IsolationMode.SHARED]),
        st.sampled_from(["plain", "plain", "indices", "model", "percent", "quota"]),
        st.sampled_from(["none", "none", "shrink", "move"]),  # inventory change afterwards
    ),
    min_size=1,
    max_size=25,
)


def shaped_request(
    uid: str, tflops: int, vram: int, count: int, isolation: IsolationMode, kind: str
) -> AllocationRequest:
    base = request(uid, (str(tflops), f"{vram}Gi"), count=count, isolation=isolation)
    if kind == "indices":
        return replace(base, gpu_indices=tuple(range(count)))
    if kind == "model":
        return replace(base, gpu_model="A100" if tflops % 2 else "L40S")
    if kind == "percent":
        return request(uid, ("0", f"{vram}Gi"), count=count, isolation=isolation,
                       percent=str(max(1, tflops % 100)))  # fmt: skip
    if kind == "quota":
        return replace(base, namespace="capped")
    return base


@settings(max_examples=250, deadline=None)
@given(
    node_shapes,
    pods,
    st.sampled_from(list(PlacementMode)),
    st.sampled_from([IsolationPolicy.STATIC, IsolationPolicy.DYNAMIC]),
    st.lists(st.integers(0, 100), min_size=6, max_size=6),
    st.sets(st.integers(0, 5), max_size=2),
    st.sets(st.integers(0, 5), max_size=2),
    st.sampled_from([(1, 1), (1, 5), (3, 1), (0, 1)]),
    st.sampled_from([TopologyMode.SOFT, TopologyMode.HARD]),
)
def test_indexed_decision_equals_full_evaluation(
    shapes: list[tuple[int, tuple[str, str], GPUPhase, str, int]],
    sequence: list[tuple[int, int, int, IsolationMode, str, str]],
    mode: PlacementMode,
    policy: IsolationPolicy,
    fits: list[int],
    rejected: set[int],
    excluded: set[int],
    weight_pair: tuple[int, int],
    topology_mode: TopologyMode,
) -> None:
    allocator = Allocator(isolation_policy=policy)
    allocator.set_pool(PoolSettings("tensor-fusion-shared", mode))
    allocator.set_quota(QuotaSpec("capped", "q", total_requests=QuotaCaps(tflops=150_000)))
    for n, (count, capacity, phase, isolation, numa) in enumerate(shapes):
        for g in range(count):
            state = gpu(
                f"g{n}-{g}", f"node-{n}", capacity=capacity, phase=phase, index=g,
                model="A100" if capacity[0] == "312" else "L40S", numa=numa if g % 2 else 0,
            )  # fmt: skip
            state.isolation_mode = isolation if g % 2 else ""
            allocator.upsert_gpu(state)
    names = sorted(allocator.nodes)
    allowed = [n for i, n in enumerate(names) if i not in excluded]
    view = TableView({f"node-{n}": fits[n] for n in range(len(shapes)) if n not in rejected})
    weights = ScoreWeights(node_resources_fit=weight_pair[0], gpu_resources_fit=weight_pair[1])
    args = GPUSchedulingArgs(topology=TopologyArgs(mode=topology_mode, max_allowed_tier=1))
    index = NodeScoreIndex(allocator, args.weights)
    for i, (tflops, vram, count, isolation, kind, change) in enumerate(sequence):
        req = shaped_request(f"p{i}", tflops, vram, count, isolation, kind)
        full = decide(allocator, req, view, allowed, args, weights)
        fast = decide_indexed(index, req, view, args, weights, set(allowed), reasons=False)
        assert (fast.node, fast.gpus, fast.combined) == (full.node, full.gpus, full.combined)
        if full.node is not None:
            allocator.assume(req, full.node, full.gpus, now=float(i))
            if i % 3:
                allocator.commit(req.pod_uid, now=float(i))
            if i % 4 == 3:
                allocator.release(f"p{i - 1}")
        gpus = sorted(allocator.gpus)
        target = allocator.gpus[gpus[i % len(gpus)]]
        if change == "shrink":
            # Capacity below what pods hold: effective free figures go negative.
            allocator.upsert_gpu(replace(target, capacity_tflops=50_000, capacity_vram=2**30,
                                         holders={}, running_apps={}))  # fmt: skip
        elif change == "move":
            allocator.upsert_gpu(replace(target, node=names[(i + 1) % len(names)],
                                         holders={}, running_apps={}))  # fmt: skip


@dataclass
class AllPassView:
    def rejection(self, node: str) -> tuple[str, str] | None:
        return None

    def fit(self, node: str) -> int:
        return 0

    def fit_bound(self) -> int:
        return 0


def compact_allocator(*names_and_nodes: tuple[str, str]) -> Allocator:
    allocator = Allocator()
    allocator.set_pool(PoolSettings("tensor-fusion-shared", PlacementMode.COMPACT_FIRST))
    for name, node in names_and_nodes:
        allocator.upsert_gpu(gpu(name, node))
    return allocator


def test_a_gpu_moved_to_another_node_re_ranks_both_nodes() -> None:
    allocator = compact_allocator(("a0", "node-a"), ("a1", "node-a"), ("b0", "node-b"))
    allocator.assume(request("p", ("156", "40Gi")), "node-a", ["a0"], now=0)
    allocator.assume(request("q", ("156", "40Gi")), "node-b", ["b0"], now=0)
    args, weights = GPUSchedulingArgs(), ScoreWeights(1, 1)
    index = NodeScoreIndex(allocator, args.weights)
    index.sync()
    allocator.upsert_gpu(replace(allocator.gpus["a1"], node="node-c", holders={}))
    req = request("r", ("1", "1Gi"))
    full = decide(allocator, req, AllPassView(), sorted(allocator.nodes), args, weights)
    fast = decide_indexed(index, req, AllPassView(), args, weights)
    assert full.node == "node-a"  # a0 alone now: half used
    assert (fast.node, fast.gpus, fast.combined) == (full.node, full.gpus, full.combined)


def test_a_zero_vram_request_still_sees_gpus_over_committed_by_a_capacity_drop() -> None:
    allocator = compact_allocator(("a0", "node-a"), ("b0", "node-b"))
    allocator.assume(request("big", ("10", "60Gi")), "node-a", ["a0"], now=0)
    allocator.upsert_gpu(replace(allocator.gpus["a0"], capacity_vram=40 * 2**30, holders={}))
    assert allocator.gpus["a0"].effective_vram < 0
    args, weights = GPUSchedulingArgs(), ScoreWeights(1, 1)
    req = request("zero", ("1", "0"))
    full = decide(allocator, req, AllPassView(), sorted(allocator.nodes), args, weights)
    index = NodeScoreIndex(allocator, args.weights)
    fast = decide_indexed(index, req, AllPassView(), args, weights, reasons=False)
    assert full.node == "node-a"
    assert (fast.node, fast.combined) == (full.node, full.combined)
