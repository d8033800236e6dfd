"""The indexed decision chooses exactly what the full evaluation of every node chooses."""

from __future__ import annotations

from dataclasses import dataclass, replace

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tensorfusion.domain.allocation_request import AllocationRequest
from tensorfusion.domain.allocator.allocator import Allocator, PoolSettings
from tensorfusion.domain.allocator.quota import QuotaCaps, QuotaSpec
from tensorfusion.domain.scheduling.decision import (
    NOT_SELECTED,
    Decision,
    ScoreWeights,
    decide,
    decide_indexed,
)
from tensorfusion.domain.scheduling.node_index import NodeScoreIndex
from tensorfusion.domain.scheduling.placement import PlacementWeights
from tensorfusion.domain.scheduling.scheduler_config import SchedulingProfile
from tensorfusion.domain.topology import TopologyArgs
from tensorfusion.domain.vocabulary import (
    GPUPhase,
    IsolationMode,
    IsolationPolicy,
    PlacementMode,
    TopologyMode,
)
from tests.hypothesis_budget import examples

from .builders import AllNodesPass, allocator_with, gpu, request


@dataclass
class TableView:
    """Native filters and fits from tables (a node missing from `fits` is rejected).

    The fit bound is the largest fit, or `bound` when given (a loose bound).
    """

    fits: dict[str, int]
    bound: int | None = None

    def rejection(self, node: str) -> tuple[str, str] | None:
        return None if node in self.fits else ("NodeAffinity", "no match")

    def admits(self, node: str) -> bool:
        return node in self.fits

    def fits_somewhere(self) -> bool:
        return bool(self.fits)

    def fit(self, node: str) -> int:
        return self.fits[node]

    def admitted_fit(self, node: str) -> int:
        return self.fits.get(node, -1)

    def fit_bound(self) -> int:
        if self.bound is not None:
            return self.bound
        return max(self.fits.values(), default=0)

    def cpu_request(self) -> int:
        return 0

    def cpu_free(self, node: str) -> int | None:
        return None


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


def check_rejections(fast: Decision, full: Decision, candidates: list[str]) -> None:
    """Every node the fast path names a stage for has the full path's message; a feasible
    node is never called rejected; without a winner every message is the full path's."""
    for name in candidates:
        if name == full.node:
            continue
        got, want = fast.rejection_message(name), full.rejection_message(name)
        if full.node is None or want == NOT_SELECTED:
            assert got == want, name
        else:
            assert got in (want, NOT_SELECTED) or got.startswith("fewer than "), (name, got)


@settings(max_examples=examples(250), deadline=None)
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
# Found by Hypothesis: a GPU that moves while a pod holds it is charged and released on its
# new node, whose bound must follow (the change feed marked only the record's node).
@example(
    shapes=[(1, ("312", "80Gi"), GPUPhase.RUNNING, "", -1)] * 2
    + [
        (2, ("312", "80Gi"), GPUPhase.RUNNING, "", -1),
        (3, ("312", "80Gi"), GPUPhase.RUNNING, "", -1),
    ]
    + [(1, ("312", "80Gi"), GPUPhase.RUNNING, "", -1)] * 2,
    sequence=[
        (0, 0, 1, IsolationMode.SOFT, "plain", "none"),
        (0, 1, 3, IsolationMode.SOFT, "plain", "move"),
        *[(0, 0, 1, IsolationMode.SOFT, "plain", "none")] * 4,
        (0, 1, 2, IsolationMode.SOFT, "plain", "move"),
        (0, 0, 2, IsolationMode.SOFT, "plain", "none"),
        (0, 0, 1, IsolationMode.SOFT, "plain", "none"),
    ],
    mode=PlacementMode.COMPACT_FIRST,
    policy=IsolationPolicy.STATIC,
    fits=[0] * 6,
    rejected=set(),
    excluded=set(),
    weight_pair=(1, 1),
    topology_mode=TopologyMode.SOFT,
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
    profile = SchedulingProfile(
        topology=TopologyArgs(mode=topology_mode, max_allowed_tier=1), weights=weights
    )
    index = NodeScoreIndex(allocator, profile.gpu_fit.weights)
    for i, (tflops, vram, count, isolation, kind, change) in enumerate(sequence):
        req = shaped_request(f"p{i}", tflops, vram, count, isolation, kind)
        full = decide(allocator, req, view, allowed, profile=profile)
        fast = decide_indexed(
            index,
            req,
            view,
            profile=profile,
            allowed=set(allowed),
            reasons=False,
        )
        assert (fast.node, fast.gpus, fast.combined) == (full.node, full.gpus, full.combined)
        # Over the whole pool, as the simulator and a large filter call decide.
        whole = decide_indexed(index, req, view, profile=profile,
                               reasons=False)  # fmt: skip
        everywhere = decide(allocator, req, view, names, profile=profile)
        assert (whole.node, whole.gpus, whole.combined) == (
            everywhere.node, everywhere.gpus, everywhere.combined,
        )  # fmt: skip
        explained = decide_indexed(index, req, view, profile=profile, allowed=set(allowed))
        assert (explained.node, explained.message) == (full.node, full.message)
        check_rejections(explained, full, allowed)
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

    def admits(self, node: str) -> bool:
        return True

    def fits_somewhere(self) -> bool:
        return True

    def fit(self, node: str) -> int:
        return 0

    def admitted_fit(self, node: str) -> int:
        return 0

    def fit_bound(self) -> int:
        return 0

    def cpu_request(self) -> int:
        return 0

    def cpu_free(self, node: str) -> int | None:
        return None


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
    profile = SchedulingProfile(weights=ScoreWeights(1, 1))
    index = NodeScoreIndex(allocator, profile.gpu_fit.weights)
    index.sync()
    allocator.upsert_gpu(replace(allocator.gpus["a1"], node="node-c", holders={}))
    req = request("r", ("1", "1Gi"))
    full = decide(
        allocator,
        req,
        AllPassView(),
        sorted(allocator.nodes),
        profile=profile,
    )
    fast = decide_indexed(index, req, AllPassView(), profile=profile)
    assert full.node == "node-a"  # a0 alone now: half used
    assert (fast.node, fast.gpus, fast.combined) == (full.node, full.gpus, full.combined)


def test_a_zero_vram_request_still_sees_gpus_over_committed_by_a_capacity_drop() -> None:
    allocator = compact_allocator(("a0", "node-a"), ("b0", "node-b"))
    allocator.assume(request("big", ("10", "60Gi")), "node-a", ["a0"], now=0)
    allocator.upsert_gpu(replace(allocator.gpus["a0"], capacity_vram=40 * 2**30, holders={}))
    assert allocator.gpus["a0"].effective_vram < 0
    profile = SchedulingProfile(weights=ScoreWeights(1, 1))
    req = request("zero", ("1", "0"))
    full = decide(
        allocator,
        req,
        AllPassView(),
        sorted(allocator.nodes),
        profile=profile,
    )
    index = NodeScoreIndex(allocator, profile.gpu_fit.weights)
    fast = decide_indexed(index, req, AllPassView(), profile=profile, reasons=False)
    assert full.node == "node-a"
    assert (fast.node, fast.combined) == (full.node, full.combined)


# --- ties (§7.6: highest combined, then higher node score, then node name ascending) ---------
#
# Every GPU has 100 TFLOPs and 100 GiB; a GPU loaded with `used` percent of both scores `used`
# at node level (compact: by what is used), so a node of such GPUs scores their mean. A GPU
# locked to hard isolation is incompatible with the soft pod: it counts in the node's bound
# (the best term, as the node's GPUs differ in isolation state) but not in its node score.

POD = request("pod", ("1", "1Gi"))
Loads = dict[str, list[tuple[int, str]]]
"""Per node, (used percent, isolation mode) of each GPU."""


def loaded_allocator(loads: Loads) -> Allocator:
    """An allocator with the GPUs of `loads`, each assumed as loaded as given."""
    allocator = Allocator()
    for node in sorted(loads, reverse=True):  # insertion order must not decide a tie
        for g, (used, isolation) in enumerate(loads[node]):
            name = f"{node}-{g}"
            state = gpu(name, node, capacity=("100", "100Gi"))
            state.isolation_mode = isolation
            allocator.upsert_gpu(state)
            if used:
                load = request(f"load-{name}", (str(used), f"{used}Gi"))
                allocator.assume(load, node, [name], now=0)
    return allocator


def buckets(allocator: Allocator) -> list[tuple[int, list[str]]]:
    """(bound, nodes) of the node index for the pod, highest bound first."""
    index = NodeScoreIndex(allocator, PlacementWeights())
    index.sync()
    return [
        (bound, sorted(names))
        for bound, names in index.ordered(POD.pool, 1, POD.request.vram_bytes)
    ]


def both_decisions(
    allocator: Allocator, view: TableView, weights: ScoreWeights
) -> tuple[tuple[str | None, int], tuple[str | None, int]]:
    """(node, combined) of the full decision (nodes given in reverse name order) and of the
    indexed one."""
    profile = SchedulingProfile(weights=weights)
    candidates = sorted(allocator.nodes, reverse=True)
    full = decide(allocator, POD, view, candidates, profile=profile)
    index = NodeScoreIndex(allocator, profile.gpu_fit.weights)
    fast = decide_indexed(index, POD, view, profile=profile)
    return (full.node, full.combined), (fast.node, fast.combined)


FIT_BOUNDS = (None, 100)  # the largest fit as the fit bound (exact), or a loose bound


@pytest.mark.parametrize("fit_bound", FIT_BOUNDS)
@pytest.mark.parametrize(("higher", "lower"), [("node-a", "node-b"), ("node-b", "node-a")])
def test_equal_combined_goes_to_the_higher_node_score(
    higher: str, lower: str, fit_bound: int | None
) -> None:
    # 60 + 40 = 40 + 60: with the exact fit bound the higher node's combined equals the upper
    # bound of the lower bucket (the lower node's fit is the fit bound).
    allocator = loaded_allocator({higher: [(60, "")], lower: [(40, "")]})
    assert buckets(allocator) == [(60, [higher]), (40, [lower])]
    view = TableView({higher: 40, lower: 60}, fit_bound)
    full, fast = both_decisions(allocator, view, ScoreWeights(1, 1))
    assert full == fast == (higher, 100)


@pytest.mark.parametrize("fit_bound", FIT_BOUNDS)
def test_equal_combined_weighted_goes_to_the_higher_node_score(fit_bound: int | None) -> None:
    # wFit 1, wGPU 2: 20 + 2 × 60 = 60 + 2 × 40 = 140, the upper bound of bucket 40.
    allocator = loaded_allocator({"node-a": [(40, "")], "node-b": [(60, "")]})
    view = TableView({"node-a": 60, "node-b": 20}, fit_bound)
    full, fast = both_decisions(allocator, view, ScoreWeights(1, 2))
    assert full == fast == ("node-b", 140)


@pytest.mark.parametrize("fit_bound", FIT_BOUNDS)
def test_a_weighted_fit_lifts_a_node_of_a_lower_bucket(fit_bound: int | None) -> None:
    # wFit 2, wGPU 1: node-a (score 20, fit 40) makes 100, node-b (score 60, fit 10) only 80;
    # bucket 20 may hold 20 + 2 × 40 = 100, so it must be opened.
    allocator = loaded_allocator({"node-a": [(20, "")], "node-b": [(60, "")]})
    view = TableView({"node-a": 40, "node-b": 10}, fit_bound)
    full, fast = both_decisions(allocator, view, ScoreWeights(2, 1))
    assert full == fast == ("node-a", 100)


@pytest.mark.parametrize("fit_bound", FIT_BOUNDS)
def test_full_tie_in_one_bucket_goes_to_the_smallest_name(fit_bound: int | None) -> None:
    allocator = loaded_allocator({"node-c": [(50, "")], "node-a": [(50, "")], "node-b": [(50, "")]})
    assert buckets(allocator) == [(50, ["node-a", "node-b", "node-c"])]
    view = TableView({"node-a": 30, "node-b": 30, "node-c": 30}, fit_bound)
    full, fast = both_decisions(allocator, view, ScoreWeights(1, 1))
    assert full == fast == ("node-a", 80)


@pytest.mark.parametrize("fit_bound", FIT_BOUNDS)
def test_full_tie_goes_to_the_smallest_name_even_in_a_lower_bucket(fit_bound: int | None) -> None:
    # node-b's bound is its best term (70), its node score the soft GPU's 50: once exact, its
    # combined equals the upper bound of bucket 50 and its score equals that bound, so bucket
    # 50 must still be opened, and node-a there ties fully and wins by name.
    allocator = loaded_allocator({"node-a": [(50, "")], "node-b": [(50, ""), (70, "hard")]})
    assert buckets(allocator) == [(70, ["node-b"]), (50, ["node-a"])]
    view = TableView({"node-a": 50, "node-b": 50}, fit_bound)
    full, fast = both_decisions(allocator, view, ScoreWeights(1, 1))
    assert full == fast == ("node-a", 100)


@pytest.mark.parametrize("fit_bound", FIT_BOUNDS)
def test_full_tie_goes_to_the_smallest_name_in_the_higher_bucket(fit_bound: int | None) -> None:
    # As above with the names swapped: the node whose bound is not exact wins by name.
    allocator = loaded_allocator({"node-b": [(50, "")], "node-a": [(50, ""), (70, "hard")]})
    assert buckets(allocator) == [(70, ["node-a"]), (50, ["node-b"])]
    view = TableView({"node-a": 50, "node-b": 50}, fit_bound)
    full, fast = both_decisions(allocator, view, ScoreWeights(1, 1))
    assert full == fast == ("node-a", 100)


@pytest.mark.parametrize("fit_bound", FIT_BOUNDS)
def test_an_inexact_bound_is_made_exact_before_the_node_is_chosen(fit_bound: int | None) -> None:
    # node-a's bound (90) promises 140, but its node score is 30 (the mean of its soft GPUs, 20
    # and 40): 80 in truth, so node-c (60 + 50) wins over node-b (55 + 50).
    allocator = loaded_allocator({
        "node-a": [(20, ""), (90, "hard"), (40, "")],
        "node-b": [(55, "")],
        "node-c": [(60, "")],
    })  # fmt: skip
    assert buckets(allocator) == [(90, ["node-a"]), (60, ["node-c"]), (55, ["node-b"])]
    view = TableView({"node-a": 50, "node-b": 50, "node-c": 50}, fit_bound)
    full, fast = both_decisions(allocator, view, ScoreWeights(1, 1))
    assert full == fast == ("node-c", 110)


@pytest.mark.parametrize("fit_bound", FIT_BOUNDS)
def test_an_inexact_bound_tying_an_exact_node_goes_to_the_higher_node_score(
    fit_bound: int | None,
) -> None:
    # node-a (bound 80, score 40, fit 70) and node-b (score 60, fit 50) both combine to 110.
    allocator = loaded_allocator({"node-a": [(40, ""), (80, "hard")], "node-b": [(60, "")]})
    assert buckets(allocator) == [(80, ["node-a"]), (60, ["node-b"])]
    view = TableView({"node-a": 70, "node-b": 50}, fit_bound)
    full, fast = both_decisions(allocator, view, ScoreWeights(1, 1))
    assert full == fast == ("node-b", 110)


def test_a_node_of_a_higher_bucket_short_of_vram_is_named_not_just_outscored() -> None:
    allocator = allocator_with(gpu("g1", "n1"), gpu("g2", "n2"), gpu("g3", "n3"))
    allocator.assume(request("big", ("100", "70Gi")), "n1", ["g1"], 0)
    allocator.commit("big", 0)
    allocator.assume(request("small", ("1", "1Gi")), "n3", ["g3"], 0)
    allocator.commit("small", 0)
    profile = SchedulingProfile()
    wanted = request("p", ("10", "40Gi"))
    fast = decide_indexed(
        NodeScoreIndex(allocator, profile.gpu_fit.weights),
        wanted,
        AllNodesPass(),
        profile=profile,
        allowed={"n1", "n2", "n3"},
    )
    assert fast.node == "n3"
    assert fast.rejection_message("n1") == (
        "fewer than 1 GPUs of pool tensor-fusion-shared with 40Gi VRAM free"
    )
    assert fast.rejection_message("n2") == NOT_SELECTED


def test_a_node_short_of_the_compute_asked_is_left_out_of_the_buckets_with_compute() -> None:
    allocator = compact_allocator(("a0", "node-a"), ("b0", "node-b"))
    allocator.assume(request("load", ("300", "1Gi")), "node-a", ["a0"], now=0)
    index = NodeScoreIndex(allocator, PlacementWeights())
    index.sync()
    need = request("r", ("20", "1Gi")).request
    with_compute = [n for _, names in index.ordered(POD.pool, 1, 0, compute=need) for n in names]
    without = [n for _, names in index.ordered(POD.pool, 1, 0) for n in names]
    among = index.ordered_among(POD.pool, ["node-a", "node-b"], 1, 0, need)
    assert with_compute == ["node-b"]
    assert sorted(without) == ["node-a", "node-b"]
    assert [n for _, names in among for n in names] == ["node-b"]
