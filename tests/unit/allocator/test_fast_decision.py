"""The indexed decision chooses exactly what the full evaluation of every node chooses."""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from tensorfusion.domain.allocator.allocator import Allocator, PoolSettings
from tensorfusion.domain.allocator.filter_chain import GPUSchedulingArgs
from tensorfusion.domain.scheduling.decision import ScoreWeights, decide, decide_indexed
from tensorfusion.domain.scheduling.node_index import NodeScoreIndex
from tensorfusion.domain.vocabulary import GPUPhase, IsolationMode, PlacementMode

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
    ),
    min_size=1,
    max_size=25,
)


@settings(max_examples=200, deadline=None)
@given(
    node_shapes,
    pods,
    st.sampled_from(list(PlacementMode)),
    st.lists(st.integers(0, 100), min_size=6, max_size=6),
    st.sets(st.integers(0, 5), max_size=2),
    st.sampled_from([(1, 1), (1, 5), (3, 1), (0, 1)]),
)
def test_indexed_decision_equals_full_evaluation(
    shapes: list[tuple[int, tuple[str, str], GPUPhase, str]],
    sequence: list[tuple[int, int, int, IsolationMode]],
    mode: PlacementMode,
    fits: list[int],
    rejected: set[int],
    weight_pair: tuple[int, int],
) -> None:
    allocator = Allocator()
    allocator.set_pool(PoolSettings("tensor-fusion-shared", mode))
    for n, (count, capacity, phase, isolation) in enumerate(shapes):
        for g in range(count):
            state = gpu(f"g{n}-{g}", f"node-{n}", capacity=capacity, phase=phase)
            state.isolation_mode = isolation if g % 2 else ""
            allocator.upsert_gpu(state)
    names = sorted(allocator.nodes)
    view = TableView({f"node-{n}": fits[n] for n in range(len(shapes)) if n not in rejected})
    weights = ScoreWeights(node_resources_fit=weight_pair[0], gpu_resources_fit=weight_pair[1])
    args = GPUSchedulingArgs()
    index = NodeScoreIndex(allocator, args.weights)
    for i, (tflops, vram, count, isolation) in enumerate(sequence):
        req = request(f"p{i}", (str(tflops), f"{vram}Gi"), count=count, isolation=isolation)
        full = decide(allocator, req, view, names, args, weights)
        fast = decide_indexed(index, req, view, args, weights)
        assert (fast.node, fast.gpus, fast.combined) == (full.node, full.gpus, full.combined)
        if not full.schedulable:
            assert fast.message == full.message
            continue
        assert full.node is not None
        allocator.assume(req, full.node, full.gpus, now=float(i))
        if i % 3:
            allocator.commit(req.pod_uid, now=float(i))
        if i % 4 == 3:
            allocator.release(f"p{i - 1}")
