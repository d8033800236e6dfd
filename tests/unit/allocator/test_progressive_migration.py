"""Progressive migration: where native-GPU pods may go, and the node taint (scheduling.md §11)."""

from __future__ import annotations

from tensorfusion.domain.allocator.progressive_migration import (
    NODE_HOSTS_WORKERS,
    native_gpu_pod_rejection,
    progressive_taint,
    taints_with_progressive_taint,
    wants_progressive_taint,
)

from .builders import allocator_with, gpu, request

NODE = "node-a"
OURS = {"key": "tensor-fusion.ai/used-by", "value": "tensor-fusion", "effect": "PreferNoSchedule"}


def test_native_pods_avoid_nodes_with_assumed_or_committed_workers() -> None:
    allocator = allocator_with(gpu("a1", NODE), gpu("b1", "node-b"))
    assert native_gpu_pod_rejection(allocator, NODE) is None
    assert native_gpu_pod_rejection(allocator, "cpu-only") is None
    allocator.assume(request("p", ("1", "1Gi")), NODE, ["a1"], now=0)
    assert native_gpu_pod_rejection(allocator, NODE) == NODE_HOSTS_WORKERS
    allocator.commit("p", now=0)
    assert native_gpu_pod_rejection(allocator, NODE) == NODE_HOSTS_WORKERS
    assert native_gpu_pod_rejection(allocator, "node-b") is None
    allocator.release("p")
    assert native_gpu_pod_rejection(allocator, NODE) is None


def test_the_taint_follows_committed_allocations_only() -> None:
    allocator = allocator_with(gpu("a1", NODE))
    node = allocator.nodes[NODE]
    assert not wants_progressive_taint(node)
    allocator.assume(request("p", ("0", "1Gi")), NODE, ["a1"], now=0)
    assert not wants_progressive_taint(node)
    allocator.commit("p", now=0)
    assert wants_progressive_taint(node)
    allocator.release("p")
    assert not wants_progressive_taint(node)


def test_the_taint_list_is_changed_only_when_needed() -> None:
    other = {"key": "dedicated", "value": "x", "effect": "NoSchedule"}
    assert progressive_taint() == OURS
    assert taints_with_progressive_taint([other], wanted=True) == [other, OURS]
    assert taints_with_progressive_taint([other, OURS], wanted=True) is None
    assert taints_with_progressive_taint([other, OURS], wanted=False) == [other]
    assert taints_with_progressive_taint([other], wanted=False) is None
    stale = {**OURS, "value": "something-else"}
    assert taints_with_progressive_taint([stale], wanted=True) == [OURS]
