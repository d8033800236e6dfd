"""Oversubscription: virtual capacity, effective limits and the VirtualCapacity stage (§6)."""

from __future__ import annotations

from dataclasses import replace

from tensorfusion.domain.allocation_request import AllocationRequest, ResourceAmount
from tensorfusion.domain.allocator.allocator import Allocator, PoolSettings
from tensorfusion.domain.allocator.capacity_figures import node_capacity
from tensorfusion.domain.allocator.oversubscription import (
    OversubscriptionSettings,
    effective_limit,
    virtual_capacity,
)
from tensorfusion.domain.scheduling.decision import ScoreWeights, decide
from tensorfusion.domain.scheduling.filter_chain import NodeEvaluation, evaluate_node
from tensorfusion.domain.scheduling.request_context import RequestContext
from tensorfusion.domain.scheduling.scheduler_config import SchedulingProfile
from tensorfusion.domain.vocabulary import IsolationMode

from .builders import POOL, AllNodesPass, allocator_with, gpu, request, tflops, vram

NODE = "node"


def evaluate(allocator: Allocator, req: AllocationRequest, node: str = NODE) -> NodeEvaluation:
    ctx = RequestContext.build(allocator, req, SchedulingProfile())
    return evaluate_node(ctx, allocator.nodes[node], explain=True)


def oversubscribed(*gpus: tuple[str, str], ratio: int = 100, mem: int = 0, disk: int = 0,
                   ram: str = "0", data_disk: str = "0") -> Allocator:  # fmt: skip
    settings = PoolSettings(POOL, oversubscription=OversubscriptionSettings(ratio, mem, disk))
    allocator = allocator_with(
        *(gpu(f"g{i}", NODE, capacity=c) for i, c in enumerate(gpus)), pools=(settings,)
    )
    allocator.set_node_facts(
        NODE, ram_bytes=vram(ram), disk_bytes=vram(data_disk), hypervisor_index0=None
    )
    return allocator


def commit(allocator: Allocator, req: AllocationRequest, gpus: list[str]) -> None:
    allocator.assume(req, NODE, gpus, now=0)
    allocator.commit(req.pod_uid, now=0)


# ---- virtual capacity --------------------------------------------------------------------------


def test_spec_example_8_x_312_tflops_ratio_2000() -> None:
    settings = OversubscriptionSettings(2000, 0, 0)
    total = 8 * tflops("312")
    assert virtual_capacity(total, vram("640Gi"), 0, 0, settings) == (
        tflops("49920"), vram("640Gi"),
    )  # fmt: skip


def test_no_oversubscription_keeps_physical_totals() -> None:
    assert virtual_capacity(tflops("312"), vram("80Gi"), vram("1Ti"), vram("1Ti"), None) == (
        tflops("312"), vram("80Gi"),
    )  # fmt: skip


def test_virtual_tflops_rounds_down_to_a_thousandth() -> None:
    # 312.001 × 333 / 100 = 1038.96333 → 1038.963
    got, _ = virtual_capacity(tflops("312.001"), 0, 0, 0, OversubscriptionSettings(333, 0, 0))
    assert got == tflops("1038.963")


def test_virtual_vram_adds_floored_host_ram_and_disk_shares() -> None:
    # floor(999 × 70 / 100) = 699 and floor(1001 × 50 / 100) = 500, whole bytes
    _, got = virtual_capacity(0, vram("80Gi"), 1001, 999, OversubscriptionSettings(500, 50, 70))
    assert got == vram("80Gi") + 699 + 500
    _, node = virtual_capacity(
        0, 8 * vram("80Gi"), vram("512Gi"), vram("1Ti"), OversubscriptionSettings(500, 50, 70)
    )
    assert node == 8 * vram("80Gi") + vram("1Ti") * 70 // 100 + vram("256Gi")


def _virtual(allocator: Allocator) -> tuple[int, int, int, int]:
    totals = node_capacity(allocator, allocator.nodes[NODE]).totals
    return (
        totals.virtual_tflops,
        totals.virtual_vram,
        totals.virtual_available_tflops,
        totals.virtual_available_vram,
    )


def test_node_virtual_capacity_uses_host_facts_and_the_pool_settings() -> None:
    allocator = oversubscribed(
        ("312", "80Gi"), ("312", "80Gi"), ratio=500, mem=50, disk=70, ram="100Gi",
        data_disk="10Gi",
    )  # fmt: skip
    virtual = (tflops("3120"), vram("160Gi") + vram("57Gi"))  # 50 % of 100Gi + 70 % of 10Gi
    assert _virtual(allocator) == virtual + virtual
    plain = allocator_with(gpu("g", NODE))
    assert _virtual(plain) == (tflops("312"), vram("80Gi"), tflops("312"), vram("80Gi"))


# ---- effective limits ----------------------------------------------------------------------


def test_effective_limit_is_limit_else_request_per_component_times_count() -> None:
    req = request("p", ("100", "10Gi"), limit=("150", "0"), count=3)
    assert effective_limit(req, [tflops("312")] * 3) == (tflops("450"), vram("30Gi"))
    only_request = request("q", ("100", "10Gi"), count=2)
    assert effective_limit(only_request, [tflops("312")] * 2) == (tflops("200"), vram("20Gi"))


def test_percent_limit_is_converted_with_the_first_allocated_gpu() -> None:
    req = replace(
        request("p", ("1", "1Gi"), count=2), limit=ResourceAmount(percent_milli=tflops("50"))
    )
    assert effective_limit(req, [tflops("200"), tflops("312")]) == (tflops("200"), vram("2Gi"))
    percent_request = request("q", ("0", "1Gi"), percent="25")
    assert effective_limit(percent_request, [tflops("312")]) == (tflops("78"), vram("1Gi"))


def test_multi_gpu_limits_are_subtracted_count_times() -> None:
    # Regression: the reference subtracted a multi-GPU pod's limits once.
    allocator = oversubscribed(*[("312", "80Gi")] * 4, ratio=200)
    commit(allocator, request("p", ("10", "1Gi"), limit=("100", "10Gi"), count=4),
           ["g0", "g1", "g2", "g3"])  # fmt: skip
    virtual_t, virtual_v, avail_t, avail_v = _virtual(allocator)
    assert (virtual_t, virtual_v) == (tflops("2496"), vram("320Gi"))
    assert (avail_t, avail_v) == (tflops("2096"), vram("280Gi"))
    allocator.release("p")
    assert _virtual(allocator)[2:] == (tflops("2496"), vram("320Gi"))


def test_shared_allocation_counts_the_capacities_of_its_gpus() -> None:
    allocator = oversubscribed(("312", "80Gi"), ("200", "48Gi"), ratio=300)
    commit(allocator, request("s", isolation=IsolationMode.SHARED, count=2), ["g0", "g1"])
    assert allocator.records["s"].effective_limit == (tflops("512"), vram("128Gi"))
    _, _, avail_t, avail_v = _virtual(allocator)
    assert (avail_t, avail_v) == (tflops("1536") - tflops("512"), vram("128Gi") - vram("128Gi"))


def test_virtual_available_counts_committed_allocations_only() -> None:
    allocator = oversubscribed(("312", "80Gi"), ratio=500)
    allocator.assume(request("p", ("10", "1Gi"), limit=("100", "2Gi")), NODE, ["g0"], now=0)
    assert _virtual(allocator)[2] == tflops("1560")
    allocator.commit("p", now=0)
    assert _virtual(allocator)[2] == tflops("1460")


# ---- VirtualCapacity -----------------------------------------------------------------------


def test_virtual_capacity_accepts_up_to_the_virtual_capacity_and_rejects_above() -> None:
    allocator = oversubscribed(("312", "80Gi"), ratio=100)
    commit(allocator, request("held", ("10", "1Gi"), limit=("300", "1Gi")), ["g0"])
    assert evaluate(allocator, request("p", ("1", "1Gi"), limit=("12", "1Gi"))).feasible
    ev = evaluate(allocator, request("q", ("1", "1Gi"), limit=("13", "1Gi")))
    assert ev.rejected_at == "VirtualCapacity"
    assert ev.message == "limits tflops 313 would exceed virtual capacity 312"


def test_virtual_capacity_counts_assumed_allocations_too() -> None:
    allocator = oversubscribed(("312", "80Gi"), ratio=100)
    allocator.assume(request("held", ("10", "1Gi"), limit=("300", "1Gi")), NODE, ["g0"], now=0)
    assert evaluate(allocator, request("q", ("1", "1Gi"), limit=("13", "1Gi"))).rejected_at == (
        "VirtualCapacity"
    )


def test_virtual_capacity_checks_vram_with_host_memory() -> None:
    allocator = oversubscribed(("312", "80Gi"), ratio=100, mem=50, ram="10Gi")
    assert evaluate(allocator, request("p", ("1", "1Gi"), limit=("1", "85Gi"))).feasible
    ev = evaluate(allocator, request("q", ("1", "1Gi"), limit=("1", "86Gi")))
    assert ev.rejected_at == "VirtualCapacity"
    assert ev.message == "limits vram 86Gi would exceed virtual capacity 85Gi"


def test_virtual_capacity_multiplies_the_candidate_limit_by_count() -> None:
    allocator = oversubscribed(("312", "80Gi"), ("312", "80Gi"), ratio=100)
    assert evaluate(allocator, request("p", ("1", "1Gi"), limit=("312", "1Gi"), count=2)).feasible
    ev = evaluate(allocator, request("q", ("1", "1Gi"), limit=("313", "1Gi"), count=2))
    assert ev.rejected_at == "VirtualCapacity"


def test_candidate_percent_limit_uses_the_largest_valid_gpu() -> None:
    allocator = oversubscribed(("312", "80Gi"), ("100", "80Gi"), ratio=100)  # virtual 412
    commit(allocator, request("held", ("1", "1Gi"), limit=("101", "1Gi")), ["g1"])
    req = replace(request("p", ("1", "1Gi")), limit=ResourceAmount(percent_milli=tflops("100")))
    ev = evaluate(allocator, req)  # 101 + 312 = 413 > 412 (with the small GPU: 201)
    assert ev.rejected_at == "VirtualCapacity"


def test_shared_candidate_counts_whole_cards() -> None:
    allocator = oversubscribed(("312", "80Gi"), ("312", "80Gi"), ratio=100)  # virtual 624
    commit(allocator, request("held", ("10", "1Gi"), limit=("313", "1Gi")), ["g0"])
    ev = evaluate(allocator, request("s", isolation=IsolationMode.SHARED))
    assert ev.rejected_at == "VirtualCapacity"  # 313 + 312 > 624
    allocator.release("held")
    commit(allocator, request("held", ("10", "1Gi"), limit=("312", "1Gi")), ["g0"])
    assert evaluate(allocator, request("s", isolation=IsolationMode.SHARED)).feasible


def test_without_oversubscription_limits_are_unchecked() -> None:
    allocator = allocator_with(gpu("g", NODE))
    commit(allocator, request("held", ("10", "1Gi"), limit=("10000", "1Ti")), ["g"])
    assert evaluate(allocator, request("p", ("1", "1Gi"), limit=("10000", "1Ti"))).feasible


def test_placement_is_not_blind_to_oversubscription() -> None:
    # Regression: the reference placed pods whose limits exceed the virtual capacity.
    settings = PoolSettings(POOL, oversubscription=OversubscriptionSettings(100, 0, 0))
    allocator = allocator_with(gpu("a1", "node-a"), gpu("b1", "node-b"), pools=(settings,))
    allocator.assume(request("held", ("10", "1Gi"), limit=("300", "1Gi")), "node-a", ["a1"], now=0)
    allocator.commit("held", now=0)
    req = request("p", ("1", "1Gi"), limit=("100", "1Gi"))
    decision = decide(
        allocator,
        req,
        AllNodesPass(),
        ["node-a", "node-b"],
        profile=SchedulingProfile(weights=ScoreWeights(1, 5)),
    )
    # node-a is fuller (CompactFirst-like node score) but its virtual capacity is exhausted
    assert decision.node == "node-b"
