"""Resize of a live allocation: checked like a dry run, quota charged by the difference."""

from __future__ import annotations

from tensorfusion.domain.allocation_request import ResourceAmount
from tensorfusion.domain.allocator.allocator import Allocator, PoolSettings
from tensorfusion.domain.allocator.oversubscription import OversubscriptionSettings
from tensorfusion.domain.allocator.quota import QuotaCaps, QuotaSpec
from tensorfusion.domain.allocator.resize import resize_allocation
from tensorfusion.domain.vocabulary import IsolationMode

from .builders import POOL, allocator_with, gpu, request, tflops, vram

NODE = "node-a"


def amount(tf: str, memory: str) -> ResourceAmount:
    return ResourceAmount(tflops_milli=tflops(tf), vram_bytes=vram(memory))


def two_gpu_pod(quota: QuotaSpec | None = None, pools: tuple[PoolSettings, ...] = ()) -> Allocator:
    allocator = allocator_with(gpu("a1", NODE), gpu("a2", NODE), pools=pools)
    if quota is not None:
        allocator.set_quota(quota)
    allocator.assume(request("p", ("100", "10Gi"), count=2), NODE, ["a1", "a2"], now=0)
    allocator.commit("p", now=0)
    return allocator


def test_a_dry_run_reports_the_quota_difference_and_changes_nothing() -> None:
    allocator = two_gpu_pod(QuotaSpec("default", "q", total_requests=QuotaCaps(tflops("1000"))))
    outcome = resize_allocation(
        allocator, "p", amount("150", "12Gi"), ResourceAmount(), dry_run=True
    )
    assert outcome.allowed and not outcome.applied
    assert (outcome.quota_delta.request_tflops, outcome.quota_delta.request_vram) == (
        tflops("100"),
        vram("4Gi"),
    )
    assert outcome.quota_delta.workers == 0
    assert allocator.gpus["a1"].available_tflops == tflops("212")
    assert allocator.quotas["default"].committed.request_tflops == tflops("200")


def test_an_applied_resize_recharges_gpus_and_quota() -> None:
    allocator = two_gpu_pod(QuotaSpec("default", "q", total_requests=QuotaCaps(tflops("1000"))))
    outcome = resize_allocation(allocator, "p", amount("50", "8Gi"), ResourceAmount())
    assert outcome.applied and outcome.record is not None
    assert outcome.record.gpus == ("a1", "a2")
    assert allocator.gpus["a2"].available_tflops == tflops("262")
    assert allocator.quotas["default"].committed.request_tflops == tflops("100")
    assert allocator.quotas["default"].committed.workers == 1


def test_a_gpu_without_room_for_the_extra_request_refuses_the_resize() -> None:
    allocator = two_gpu_pod()
    allocator.assume(request("other", ("200", "1Gi")), NODE, ["a2"], now=0)
    outcome = resize_allocation(allocator, "p", amount("150", "10Gi"), ResourceAmount())
    assert not outcome.allowed
    assert outcome.message == ("pod default/p: GPU a2: available tflops 12 < additional request 50")
    assert allocator.records["p"].request.request.tflops_milli == tflops("100")


def test_the_quota_total_counts_the_difference_times_the_gpu_count() -> None:
    allocator = two_gpu_pod(QuotaSpec("default", "q", total_requests=QuotaCaps(tflops("250"))))
    refused = resize_allocation(allocator, "p", amount("126", "10Gi"), ResourceAmount())
    assert not refused.allowed
    assert refused.message == (
        "GPU quota exceeded in namespace default: total.requests.tflops requested 252, limit 250"
    )
    assert resize_allocation(allocator, "p", amount("125", "10Gi"), ResourceAmount()).allowed


def test_limits_beyond_virtual_capacity_are_refused_on_an_oversubscribed_pool() -> None:
    pools = (PoolSettings(POOL, oversubscription=OversubscriptionSettings(100, 0, 0)),)
    allocator = two_gpu_pod(pools=pools)
    outcome = resize_allocation(allocator, "p", amount("100", "10Gi"), amount("313", "10Gi"))
    assert not outcome.allowed
    assert outcome.message is not None and "would exceed virtual capacity 624" in outcome.message


def test_requests_above_limits_and_whole_card_pods_are_refused() -> None:
    allocator = two_gpu_pod()
    above = resize_allocation(allocator, "p", amount("100", "10Gi"), amount("50", "10Gi"))
    assert above.message == "pod default/p: tflops request 100 is above its limit 50"
    shared = allocator_with(gpu("s1", NODE))
    shared.assume(request("s", isolation=IsolationMode.SHARED), NODE, ["s1"], now=0)
    refused = resize_allocation(shared, "s", amount("1", "1Gi"), ResourceAmount())
    assert refused.message == (
        "pod default/s: a shared allocation takes whole GPUs and cannot be resized"
    )
    assert resize_allocation(shared, "nobody", amount("1", "1Gi"), ResourceAmount()).message == (
        "no allocation for pod UID nobody"
    )


def test_right_sizing_down_is_allowed_over_a_lowered_cap_and_virtual_capacity() -> None:
    pools = (PoolSettings(POOL, oversubscription=OversubscriptionSettings(100, 0, 0)),)
    allocator = two_gpu_pod(
        QuotaSpec("default", "q", total_requests=QuotaCaps(tflops("1000"))), pools=pools
    )
    # The cap is lowered below what the namespace uses and the node is over its virtual
    # capacity (limits of an assumed pod); shrinking must still be allowed.
    allocator.set_quota(QuotaSpec("default", "q", total_requests=QuotaCaps(tflops("50"))))
    allocator.assume(request("big", ("1", "1Gi"), limit=("600", "1Gi")), NODE, ["a1"], now=0)
    shrink = resize_allocation(allocator, "p", amount("60", "10Gi"), ResourceAmount())
    assert shrink.allowed, shrink.message
    grow = resize_allocation(allocator, "p", amount("61", "11Gi"), ResourceAmount())
    assert grow.message == (
        "GPU quota exceeded in namespace default: total.requests.tflops requested 123, limit 50"
    )


def test_a_resize_of_a_pod_whose_gpu_was_deleted_is_refused_and_changes_nothing() -> None:
    allocator = two_gpu_pod()
    allocator.remove_gpu("a1")
    outcome = resize_allocation(allocator, "p", amount("50", "8Gi"), ResourceAmount())
    assert outcome.message == "pod default/p: GPU a1 no longer exists"
    assert allocator.records["p"].gpus == ("a1", "a2")
    allocator.upsert_gpu(gpu("a1", NODE))
    assert allocator.gpus["a1"].available_tflops == tflops("212")
