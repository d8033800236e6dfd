"""Placement scores: the worked vectors of scheduling.md §7.5 and the score rules of §7.2."""

from __future__ import annotations

from tensorfusion.domain.scheduling.filter_chain import choose_gpus, evaluate_node
from tensorfusion.domain.scheduling.placement import (
    PlacementWeights,
    node_term,
    normalised_score,
    score_gpu,
)
from tensorfusion.domain.scheduling.request_context import RequestContext
from tensorfusion.domain.scheduling.scheduler_config import SchedulingProfile
from tensorfusion.domain.vocabulary import GPUPhase

from .builders import allocator_with, gpu, request, tflops, vram


def test_norm_rounds_half_away_from_zero_and_clamps() -> None:
    weights = PlacementWeights(vram=1.0, tflops=0.0)
    assert normalised_score(12.5, 0, weights) == 13
    assert normalised_score(-3, 0, weights) == 0
    assert normalised_score(250, 0, weights) == 100


def test_zero_capacity_scores_zero_not_nan() -> None:
    assert score_gpu(0, 0, 0, 0, True, PlacementWeights()) == 0


def test_vector_75_node_score_13_and_idle_gpu_chosen() -> None:
    allocator = allocator_with(gpu("gpu-a", "node"), gpu("gpu-b", "node"))
    holder = request("holder", ("100", "20Gi"))
    allocator.assume(holder, "node", ["gpu-a"], now=0)
    allocator.commit("holder", now=0)
    assert allocator.gpus["gpu-a"].available_tflops == tflops("212")
    assert allocator.gpus["gpu-a"].available_vram == vram("60Gi")
    ctx = RequestContext.build(allocator, request("p", ("50", "10Gi")), SchedulingProfile())
    ev = evaluate_node(ctx, allocator.nodes["node"], explain=True)
    assert ev.feasible
    assert ev.node_terms == {"gpu-a": 27, "gpu-b": 0}
    assert ev.node_score == 13
    assert ev.gpu_scores == {"gpu-a": 73, "gpu-b": 100}
    assert choose_gpus(ctx, ev)[0] == ("gpu-b",)


def test_second_vector_node_score_10() -> None:
    allocator = allocator_with(gpu("g", "node", capacity=("1000", "20Gi")))
    allocator.assume(request("h", ("100", "2Gi")), "node", ["g"], now=0)
    ctx = RequestContext.build(allocator, request("p", ("1", "1Gi")), SchedulingProfile())
    assert evaluate_node(ctx, allocator.nodes["node"]).node_score == 10


def test_pending_gpu_counts_a_quarter() -> None:
    weights = PlacementWeights(vram=1.0, tflops=0.0)
    pending = gpu("p", "node", capacity=("100", "100Gi"), phase=GPUPhase.PENDING)
    pending.available_vram = vram("20Gi")
    running = gpu("r", "node", capacity=("100", "100Gi"))
    running.available_vram = vram("60Gi")
    assert node_term(pending, False, weights) == 80 // 4
    assert node_term(running, False, weights) == 40


def test_score_ties_broken_by_gpu_name() -> None:
    allocator = allocator_with(gpu("gpu-z", "n"), gpu("gpu-a", "n"), gpu("gpu-m", "n"))
    ctx = RequestContext.build(allocator, request("p", ("1", "1Gi"), count=2), SchedulingProfile())
    ev = evaluate_node(ctx, allocator.nodes["n"])
    assert choose_gpus(ctx, ev)[0] == ("gpu-a", "gpu-m")
