"""GPUResourceQuota checks and usage (scheduling.md §9, api.md §2.7)."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

from tensorfusion.domain.allocation_request import AllocationRequest, ResourceAmount
from tensorfusion.domain.allocator.allocator import Allocator
from tensorfusion.domain.allocator.quota import (
    NamespaceQuota,
    QuotaAmounts,
    QuotaCaps,
    QuotaSpec,
    charge_for,
    check_single,
    check_total,
    quota_message,
)
from tensorfusion.domain.scheduling.filter_chain import evaluate_node
from tensorfusion.domain.scheduling.gpu_filters import GPU_STAGES
from tensorfusion.domain.scheduling.request_context import RequestContext
from tensorfusion.domain.scheduling.scheduler_config import SchedulingProfile
from tensorfusion.domain.vocabulary import IsolationMode

from .builders import allocator_with, gpu, request, tflops, vram

NS = "ml"
NODE = "node"


def ml_request(uid: str, req: tuple[str, str] = ("0", "0"), **extra: object) -> AllocationRequest:
    return request(uid, req, namespace=NS, **extra)  # type: ignore[arg-type]


def quota_rejection(allocator: Allocator, req: AllocationRequest) -> str | None:
    """What stage 0 (QuotaCheck) says about the request."""
    return RequestContext.build(allocator, req, SchedulingProfile()).quota_rejection


def allocate(allocator: Allocator, req: AllocationRequest, gpus: list[str]) -> None:
    allocator.assume(req, NODE, gpus, now=0)
    allocator.commit(req.pod_uid, now=0)


def test_message_format() -> None:
    assert quota_message(NS, "total.requests.tflops", "300", "200") == (
        "GPU quota exceeded in namespace ml: total.requests.tflops requested 300, limit 200"
    )


# ---- single checks ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "req", "message"),
    [
        (
            QuotaSpec(NS, "q", single_max_requests=QuotaCaps(tflops=tflops("50"))),
            ml_request("p", ("100", "1Gi")),
            "single.maxRequests.tflops requested 100, limit 50",
        ),
        (
            QuotaSpec(NS, "q", single_max_requests=QuotaCaps(vram=vram("20Gi"))),
            ml_request("p", ("1", "40Gi")),
            "single.maxRequests.vram requested 40Gi, limit 20Gi",
        ),
        (
            QuotaSpec(NS, "q", single_max_limits=QuotaCaps(tflops=tflops("150"))),
            ml_request("p", ("100", "1Gi"), limit=("200", "1Gi")),
            "single.maxLimits.tflops requested 200, limit 150",
        ),
        (
            # The limit is compared, not the request (the reference compared the request).
            QuotaSpec(NS, "q", single_max_limits=QuotaCaps(vram=vram("20Gi"))),
            ml_request("p", ("1", "10Gi"), limit=("1", "30Gi")),
            "single.maxLimits.vram requested 30Gi, limit 20Gi",
        ),
        (
            QuotaSpec(NS, "q", single_max_gpu_count=2),
            ml_request("p", ("1", "1Gi"), count=4),
            "single.maxGPUCount requested 4, limit 2",
        ),
    ],
)
def test_single_checks_name_the_resource_value_and_cap(
    spec: QuotaSpec, req: AllocationRequest, message: str
) -> None:
    expected = f"GPU quota exceeded in namespace ml: {message}"
    assert check_single(spec, req) == expected
    allocator = allocator_with(gpu("g", NODE))
    allocator.set_quota(spec)
    assert quota_rejection(allocator, req) == expected


def test_single_caps_are_per_gpu_and_inclusive() -> None:
    spec = QuotaSpec(
        NS, "q",
        single_max_requests=QuotaCaps(tflops("100"), vram("40Gi")),
        single_max_limits=QuotaCaps(tflops("200"), vram("40Gi")),
        single_max_gpu_count=4,
    )  # fmt: skip
    at_cap = ml_request("p", ("100", "40Gi"), limit=("200", "40Gi"), count=4)
    assert check_single(spec, at_cap) is None


def test_zero_single_caps_are_unchecked() -> None:
    spec = QuotaSpec(NS, "q", single_max_requests=QuotaCaps(tflops=tflops("10")))
    # vram cap is zero: a huge vram request is not limited by it
    assert check_single(spec, ml_request("p", ("10", "1Ti"), limit=("5000", "1Ti"))) is None


# ---- total checks ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "req", "message"),
    [
        (
            QuotaSpec(NS, "q", total_requests=QuotaCaps(tflops=tflops("200"))),
            ml_request("p", ("150", "1Gi"), count=2),
            "total.requests.tflops requested 300, limit 200",
        ),
        (
            QuotaSpec(NS, "q", total_requests=QuotaCaps(vram=vram("64Gi"))),
            ml_request("p", ("1", "40Gi"), count=2),
            "total.requests.vram requested 80Gi, limit 64Gi",
        ),
        (
            QuotaSpec(NS, "q", total_limits=QuotaCaps(tflops=tflops("200"))),
            ml_request("p", ("1", "1Gi"), limit=("101", "1Gi"), count=2),
            "total.limits.tflops requested 202, limit 200",
        ),
        (
            QuotaSpec(NS, "q", total_limits=QuotaCaps(vram=vram("10Gi"))),
            ml_request("p", ("1", "1Gi"), limit=("1", "6Gi"), count=2),
            "total.limits.vram requested 12Gi, limit 10Gi",
        ),
        (
            QuotaSpec(NS, "q", max_workers=0),
            ml_request("p", ("1", "1Gi")),
            "total.maxWorkers requested 1, limit 0",
        ),
    ],
)
def test_total_checks_on_an_unused_quota(
    spec: QuotaSpec, req: AllocationRequest, message: str
) -> None:
    # With nothing used yet the value is unambiguous: the pod's value × count.
    expected = f"GPU quota exceeded in namespace ml: {message}"
    quota = NamespaceQuota(spec)
    assert check_total(quota, charge_for(req, [tflops("312")] * req.count)) == expected


def test_total_check_counts_committed_and_assumed_usage() -> None:
    allocator = allocator_with(gpu("g1", NODE), gpu("g2", NODE), gpu("g3", NODE))
    allocator.set_quota(QuotaSpec(NS, "q", total_requests=QuotaCaps(tflops=tflops("300"))))
    allocate(allocator, ml_request("a", ("100", "1Gi")), ["g1"])
    allocator.assume(ml_request("b", ("100", "1Gi")), NODE, ["g2"], now=0)
    assert quota_rejection(allocator, ml_request("c", ("100", "1Gi"))) is None  # 300 ≤ 300
    message = quota_rejection(allocator, ml_request("d", ("101", "1Gi")))
    assert message is not None
    # `requested <v>` is ambiguous in §9: the pod's value × count (the reference) or the sum
    # used + value × count (what this code reports). Both readings are accepted.
    match = re.fullmatch(
        r"GPU quota exceeded in namespace ml: total\.requests\.tflops requested (\S+), limit 300",
        message,
    )
    assert match is not None, message
    assert match.group(1) in {"101", "301"}
    allocator.release("b")
    assert quota_rejection(allocator, ml_request("d", ("101", "1Gi"))) is None


def test_a_zero_total_component_is_not_enforced() -> None:
    # Regression: a quota that caps only request TFLOPs must not reject on VRAM (or limits).
    allocator = allocator_with(gpu("g", NODE))
    allocator.set_quota(QuotaSpec(NS, "q", total_requests=QuotaCaps(tflops=tflops("100"))))
    req = ml_request("p", ("50", "80Gi"), limit=("300", "80Gi"))
    assert quota_rejection(allocator, req) is None
    allocator.set_quota(QuotaSpec(NS, "q", total_requests=QuotaCaps(vram=vram("10Gi"))))
    assert quota_rejection(allocator, ml_request("p", ("300", "10Gi"))) is None
    ctx = RequestContext.build(allocator, ml_request("p", ("300", "10Gi")), SchedulingProfile())
    assert evaluate_node(ctx, allocator.nodes[NODE]).feasible


def test_sums_are_exact_decimals() -> None:
    # 0.1 + 0.2 = 0.3 exactly (a float sum exceeds 0.3); 0.5 + 0.5 = 1 (an integer sum is 0).
    allocator = allocator_with(gpu("g", NODE))
    allocator.set_quota(QuotaSpec(NS, "q", total_requests=QuotaCaps(tflops=tflops("0.3"))))
    allocate(allocator, ml_request("a", ("0.1", "1Mi")), ["g"])
    allocate(allocator, ml_request("b", ("0.1", "1Mi")), ["g"])
    assert quota_rejection(allocator, ml_request("c", ("0.1", "1Mi"))) is None
    allocate(allocator, ml_request("c", ("0.1", "1Mi")), ["g"])
    assert allocator.quotas[NS].committed.request_tflops == tflops("0.3")
    assert quota_rejection(allocator, ml_request("d", ("0.001", "1Mi"))) is not None

    other = allocator_with(gpu("g", NODE))
    other.set_quota(QuotaSpec(NS, "q", total_requests=QuotaCaps(tflops=tflops("1"))))
    allocate(other, ml_request("a", ("0.5", "1Mi")), ["g"])
    allocate(other, ml_request("b", ("0.5", "1Mi")), ["g"])
    assert quota_rejection(other, ml_request("c", ("0.5", "1Mi"))) is not None


def test_max_workers_counts_assumed_and_committed_workers() -> None:
    allocator = allocator_with(gpu("g", NODE))
    allocator.set_quota(QuotaSpec(NS, "q", max_workers=2))
    allocate(allocator, ml_request("a", ("1", "1Gi")), ["g"])
    allocator.assume(ml_request("b", ("1", "1Gi")), NODE, ["g"], now=0)
    message = quota_rejection(allocator, ml_request("c", ("1", "1Gi")))
    assert message is not None
    assert message.startswith("GPU quota exceeded in namespace ml: total.maxWorkers requested ")
    assert message.endswith(", limit 2")
    allocator.release("a")
    assert quota_rejection(allocator, ml_request("c", ("1", "1Gi"))) is None


def test_default_max_workers_is_32768() -> None:
    assert QuotaSpec(NS, "q").max_workers == 32768


def test_other_namespaces_are_not_charged() -> None:
    allocator = allocator_with(gpu("g", NODE))
    allocator.set_quota(QuotaSpec(NS, "q", max_workers=1))
    allocate(allocator, request("elsewhere", ("1", "1Gi"), namespace="default"), ["g"])
    assert allocator.quotas[NS].committed == QuotaAmounts()
    assert quota_rejection(allocator, ml_request("p", ("1", "1Gi"))) is None


# ---- usage -----------------------------------------------------------------------------------


def test_usage_moves_from_assumed_to_committed_and_back_to_zero() -> None:
    allocator = allocator_with(gpu("g1", NODE), gpu("g2", NODE))
    allocator.set_quota(QuotaSpec(NS, "q"))
    req = ml_request("p", ("100", "10Gi"), limit=("150", "20Gi"), count=2)
    allocator.assume(req, NODE, ["g1", "g2"], now=0)
    quota = allocator.quotas[NS]
    expected = QuotaAmounts(tflops("200"), vram("20Gi"), tflops("300"), vram("40Gi"), 1)
    assert quota.assumed == expected
    assert quota.committed == QuotaAmounts()
    allocator.commit("p", now=1)
    assert quota.assumed == QuotaAmounts()
    assert quota.committed == expected
    allocator.release("p")
    assert quota.committed == QuotaAmounts()


def test_percent_requests_are_converted_per_gpu_and_counted() -> None:
    # Regression: percent requests were outside quotas in the reference.
    allocator = allocator_with(
        gpu("big", NODE, capacity=("312", "80Gi")), gpu("small", NODE, capacity=("200", "80Gi"))
    )
    allocator.set_quota(QuotaSpec(NS, "q", total_requests=QuotaCaps(tflops=tflops("256"))))
    req = ml_request("p", ("0", "1Gi"), percent="50", count=2)
    allocate(allocator, req, ["big", "small"])
    assert allocator.quotas[NS].committed.request_tflops == tflops("156") + tflops("100")
    # the quota is now full: even 1 TFLOPs more is rejected at QuotaCheck
    assert quota_rejection(allocator, ml_request("q", ("1", "1Gi"))) is not None
    allocator.release("p")
    assert allocator.quotas[NS].committed == QuotaAmounts()


def test_percent_limits_are_converted_per_gpu() -> None:
    allocator = allocator_with(gpu("g", NODE))
    allocator.set_quota(QuotaSpec(NS, "q"))
    req = replace(ml_request("p", ("10", "1Gi")), limit=ResourceAmount(percent_milli=tflops("25")))
    allocate(allocator, req, ["g"])
    assert allocator.quotas[NS].committed.limit_tflops == tflops("78")


def test_quota_check_leaves_percent_tflops_to_stage_7_but_checks_vram() -> None:
    allocator = allocator_with(gpu("g", NODE))
    allocator.set_quota(
        QuotaSpec(NS, "q", total_requests=QuotaCaps(tflops=tflops("10"), vram=vram("10Gi")))
    )
    ctx = RequestContext.build(allocator, ml_request("p", ("0", "1Gi"), percent="50"),
                               SchedulingProfile())  # fmt: skip
    assert ctx.quota_rejection is None
    ev = evaluate_node(ctx, allocator.nodes[NODE])
    assert GPU_STAGES[ev.failures["g"][0]] == "QuotaPercentCheck"
    vram_message = quota_rejection(allocator, ml_request("q", ("0", "20Gi"), percent="1"))
    assert vram_message == (
        "GPU quota exceeded in namespace ml: total.requests.vram requested 20Gi, limit 10Gi"
    )


def test_shared_pods_are_charged_declared_values_and_one_worker() -> None:
    allocator = allocator_with(gpu("g", NODE))
    allocator.set_quota(QuotaSpec(NS, "q"))
    allocate(allocator, ml_request("s", isolation=IsolationMode.SHARED), ["g"])
    assert allocator.quotas[NS].committed == QuotaAmounts(workers=1)


def test_installing_a_quota_counts_existing_allocations() -> None:
    allocator = allocator_with(gpu("g", NODE))
    allocate(allocator, ml_request("a", ("10", "1Gi")), ["g"])
    allocator.assume(ml_request("b", ("20", "2Gi")), NODE, ["g"], now=0)
    allocator.set_quota(QuotaSpec(NS, "q"))
    quota = allocator.quotas[NS]
    assert quota.committed == QuotaAmounts(tflops("10"), vram("1Gi"), 0, 0, 1)
    assert quota.assumed == QuotaAmounts(tflops("20"), vram("2Gi"), 0, 0, 1)
    # replacing the spec keeps the usage
    allocator.set_quota(QuotaSpec(NS, "q2", max_workers=2))
    assert allocator.quotas[NS].committed.workers == 1
    assert quota_rejection(allocator, ml_request("c", ("1", "1Gi"))) is not None


def test_removing_a_quota_stops_its_checks() -> None:
    allocator = allocator_with(gpu("g", "node"))
    allocator.set_quota(QuotaSpec("ns", "q", total_requests=QuotaCaps(tflops=tflops("1"))))
    req = request("p", ("10", "1Gi"), namespace="ns")
    assert RequestContext.build(allocator, req, SchedulingProfile()).quota_rejection is not None
    allocator.remove_quota("ns")
    assert RequestContext.build(allocator, req, SchedulingProfile()).quota_rejection is None
