"""GPUNode and GPUPool status figures from the allocator's memory."""

from __future__ import annotations

from tensorfusion.domain.allocator.allocator import PoolSettings
from tensorfusion.domain.allocator.capacity_figures import node_capacity, pool_capacities
from tensorfusion.domain.allocator.oversubscription import OversubscriptionSettings
from tensorfusion.domain.model import to_wire

from .builders import POOL, allocator_with, gpu, request, tflops, vram


def test_node_figures_count_committed_requests_and_skip_missing_gpus() -> None:
    allocator = allocator_with(
        gpu("a1", "node-a"),
        gpu("a2", "node-a"),
        gpu("b1", "node-b"),
        pools=(PoolSettings(POOL, oversubscription=OversubscriptionSettings(200, 0, 0)),),
    )
    allocator.assume(request("p", ("100", "10Gi"), limit=("150", "20Gi")), "node-a", ["a1"], 0)
    allocator.commit("p", 0)
    allocator.assume(request("q", ("50", "5Gi")), "node-a", ["a2"], 0)  # assumed only
    node = node_capacity(allocator, allocator.nodes["node-a"], allocated_pods=True)
    assert (node.pool, node.gpus, node.pods) == (POOL, ("a1", "a2"), ("p",))
    totals = node.totals
    assert (totals.total_tflops, totals.available_tflops) == (tflops("624"), tflops("524"))
    assert (totals.total_vram, totals.available_vram) == (vram("160Gi"), vram("150Gi"))
    assert (totals.virtual_tflops, totals.virtual_available_tflops) == (
        tflops("1248"),
        tflops("1098"),
    )
    assert totals.virtual_available_vram == vram("140Gi")
    assert [info.uid for info in node.allocated_pods["a1"]] == ["p"]
    status = to_wire(totals.to_status())
    assert status["totalTFlops"] == "624" and status["availableVRAM"] == "150Gi"
    missing = gpu("a2", "node-a")
    missing.missing_since = "2026-12-01T00:00:00Z"
    allocator.upsert_gpu(missing)
    assert node_capacity(allocator, allocator.nodes["node-a"]).totals.total_tflops == tflops("312")


def test_pool_figures_sum_their_nodes() -> None:
    allocator = allocator_with(gpu("a1", "node-a"), gpu("b1", "node-b"), gpu("c1", "node-c"))
    allocator.assume(request("p", ("100", "10Gi")), "node-b", ["b1"], 0)
    allocator.commit("p", 0)
    pools = pool_capacities(allocator)
    pool = pools[POOL]
    assert (pool.nodes, pool.gpus, pool.running_apps) == (3, 3, 1)
    assert pool.totals.total_tflops == 3 * tflops("312")
    assert pool.totals.available_tflops == 3 * tflops("312") - tflops("100")


def test_without_allocated_pods_only_the_pod_uids_are_listed() -> None:
    allocator = allocator_with(gpu("a1", "node-a"))
    allocator.assume(request("p", ("100", "10Gi")), "node-a", ["a1"], 0)
    allocator.commit("p", 0)
    node = node_capacity(allocator, allocator.nodes["node-a"])
    assert node.pods == ("p",) and node.allocated_pods == {}
