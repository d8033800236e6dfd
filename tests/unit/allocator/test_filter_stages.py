"""Every stage of the filter chain (scheduling.md §4), the accounting of §5 / §5.1 and the
assumption lifecycle of §12, one keep and one remove case per stage."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

from tensorfusion.domain.allocation_request import (
    AllocationRequest,
    TopologyOverrides,
    percent_to_tflops_milli,
)
from tensorfusion.domain.allocator.allocator import AllocationError, Allocator, PoolSettings
from tensorfusion.domain.allocator.gpu_state import GPUCapabilities, GPUState
from tensorfusion.domain.allocator.oversubscription import OversubscriptionSettings
from tensorfusion.domain.allocator.quota import QuotaCaps, QuotaSpec
from tensorfusion.domain.allocator.records import RecordState
from tensorfusion.domain.scheduling.decision import ScoreWeights, decide, decide_indexed, explain
from tensorfusion.domain.scheduling.filter_chain import NodeEvaluation, evaluate_node
from tensorfusion.domain.scheduling.gpu_filters import GPU_STAGES, NODE_STAGES
from tensorfusion.domain.scheduling.node_index import NodeScoreIndex
from tensorfusion.domain.scheduling.request_context import RequestContext
from tensorfusion.domain.scheduling.scheduler_config import GPUResourcesFitArgs, SchedulingProfile
from tensorfusion.domain.topology import TopologyArgs
from tensorfusion.domain.vocabulary import (
    GPUPhase,
    IsolationMode,
    IsolationPolicy,
    QoSLevel,
    TopologyMode,
)

from .builders import POOL, AllNodesPass, allocator_with, gpu, request, tflops, vram

NODE = "node"


def evaluate(
    allocator: Allocator,
    req: AllocationRequest,
    args: SchedulingProfile | None = None,
    node: str = NODE,
) -> NodeEvaluation:
    """The explained evaluation of one node."""
    ctx = RequestContext.build(allocator, req, args or SchedulingProfile())
    return evaluate_node(ctx, allocator.nodes[node], explain=True)


def removed_at(ev: NodeEvaluation, name: str) -> str | None:
    """The stage that removed the GPU, None when it survived."""
    failure = ev.failures.get(name)
    return None if failure is None else GPU_STAGES[failure[0]]


def reason(ev: NodeEvaluation, name: str) -> str:
    """The reason text the stage gave for the GPU."""
    return ev.failures[name][1]


def active(allocator: Allocator, req: AllocationRequest, stage: str) -> bool:
    """Whether a GPU stage runs for the request."""
    ctx = RequestContext.build(allocator, req, SchedulingProfile())
    return ctx.active[GPU_STAGES.index(stage)]


def hold(allocator: Allocator, uid: str, gpu_name: str, amount: tuple[str, str]) -> None:
    """Commit an allocation of `amount` on one GPU of NODE."""
    allocator.assume(request(uid, amount), NODE, [gpu_name], now=0)
    allocator.commit(uid, now=0)


def test_stage_names_are_reported_verbatim_in_spec_order() -> None:
    assert GPU_STAGES == (
        "QuotaCheck", "IsolationPolicy", "PhaseFilter", "GPUIndexFilter",
        "GPUIsolationModeFilter", "SharedWholeGPUFilter", "GPUResourceFilter",
        "QuotaPercentCheck", "GPUModelFilter", "GPUVendorFilter", "SameNodeFilter",
        "MaxWorkerPerNode",
    )  # fmt: skip
    assert NODE_STAGES == (
        "NodeNotInPool", "InsufficientGPUs", "HypervisorHealth", "PodIndexBusy",
        "VirtualCapacity", "Topology",
    )  # fmt: skip


# ---- stage 0: QuotaCheck ---------------------------------------------------------------------


def test_quota_check_inactive_without_a_quota() -> None:
    allocator = allocator_with(gpu("g", NODE))
    assert not active(allocator, request("p", ("10", "1Gi")), "QuotaCheck")


def test_quota_check_keeps_when_the_quota_holds() -> None:
    allocator = allocator_with(gpu("g", NODE))
    allocator.set_quota(QuotaSpec("default", "q", total_requests=QuotaCaps(tflops("1000"))))
    req = request("p", ("100", "1Gi"))
    assert active(allocator, req, "QuotaCheck")
    ev = evaluate(allocator, req)
    assert ev.feasible
    assert removed_at(ev, "g") is None


def test_quota_check_failure_removes_every_gpu() -> None:
    allocator = allocator_with(gpu("g1", NODE), gpu("g2", NODE))
    allocator.set_quota(QuotaSpec("default", "q", single_max_requests=QuotaCaps(tflops("50"))))
    ev = evaluate(allocator, request("p", ("100", "1Gi")))
    message = (
        "GPU quota exceeded in namespace default: single.maxRequests.tflops requested 100, limit 50"
    )
    assert {removed_at(ev, g) for g in ("g1", "g2")} == {"QuotaCheck"}
    assert reason(ev, "g1") == reason(ev, "g2") == message
    assert ev.rejected_at == "QuotaCheck"
    assert not ev.valid


# ---- stage 1: IsolationPolicy --------------------------------------------------------------


def _isolated(name: str, mode: str = "", policy: IsolationPolicy | None = None) -> GPUState:
    state = gpu(name, NODE)
    state.isolation_mode = mode
    state.isolation_policy = policy
    return state


def _lock(allocator: Allocator, name: str, active_mode: str = "", conflict: bool = False) -> None:
    """Set the allocator-owned Dynamic lock of a GPU (what pods holding it would leave)."""
    state = allocator.gpus[name]
    state.active_isolation_mode = active_mode
    state.dynamic_isolation_conflict = conflict


def test_static_policy_keeps_matching_or_unset_mode_and_shared_everywhere() -> None:
    allocator = allocator_with(
        _isolated("unset"), _isolated("soft", "soft"), _isolated("hard", "hard"),
        _isolated("static", "soft", IsolationPolicy.STATIC),
    )  # fmt: skip
    soft = evaluate(allocator, request("p", ("1", "1Gi")))
    assert [removed_at(soft, g) for g in ("unset", "soft", "static")] == [None, None, None]
    shared = evaluate(allocator, request("s", isolation=IsolationMode.SHARED))
    assert removed_at(shared, "hard") is None


def test_static_policy_removes_other_mode_and_dynamic_gpus() -> None:
    allocator = allocator_with(
        _isolated("hard", "hard"), _isolated("dyn", "", IsolationPolicy.DYNAMIC)
    )
    ev = evaluate(allocator, request("p", ("1", "1Gi")))
    assert removed_at(ev, "hard") == "IsolationPolicy"
    assert removed_at(ev, "dyn") == "IsolationPolicy"
    assert ev.rejected_at == "IsolationPolicy"


def test_dynamic_policy_keeps_unlocked_or_same_mode_and_inherits_controller_policy() -> None:
    allocator = allocator_with(
        _isolated("inherits"), _isolated("dyn", "hard", IsolationPolicy.DYNAMIC),
        _isolated("locked-soft"),
    )  # fmt: skip
    _lock(allocator, "locked-soft", "soft")
    allocator.isolation_policy = IsolationPolicy.DYNAMIC
    ev = evaluate(allocator, request("p", ("1", "1Gi")))
    assert [removed_at(ev, g) for g in ("inherits", "dyn", "locked-soft")] == [None] * 3


def test_dynamic_policy_removes_locked_conflicting_static_and_partitioned() -> None:
    allocator = allocator_with(
        _isolated("locked-hard"), _isolated("conflict"),
        _isolated("static", policy=IsolationPolicy.STATIC), _isolated("free"),
    )  # fmt: skip
    _lock(allocator, "locked-hard", "hard")
    _lock(allocator, "conflict", conflict=True)
    allocator.isolation_policy = IsolationPolicy.DYNAMIC
    ev = evaluate(allocator, request("p", ("1", "1Gi")))
    for name in ("locked-hard", "conflict", "static"):
        assert removed_at(ev, name) == "IsolationPolicy", name
    assert removed_at(ev, "free") is None
    partitioned = evaluate(
        allocator, request("q", ("1", "1Gi"), isolation=IsolationMode.PARTITIONED)
    )
    assert removed_at(partitioned, "free") == "IsolationPolicy"


# ---- stage 2: PhaseFilter ------------------------------------------------------------------


def test_phase_filter_keeps_running_gpus_used_by_nobody_or_tensor_fusion() -> None:
    unset = gpu("unset", NODE)
    unset.used_by = ""
    allocator = allocator_with(unset, gpu("tf", NODE))
    ev = evaluate(allocator, request("p", ("1", "1Gi")))
    assert removed_at(ev, "unset") is None
    assert removed_at(ev, "tf") is None


@pytest.mark.parametrize(
    ("phase", "used_by", "text"),
    [
        (GPUPhase.PENDING, "tensor-fusion", "phase is Pending"),
        (GPUPhase.UNKNOWN, "tensor-fusion", "phase is Unknown"),
        (GPUPhase.RUNNING, "nvidia-device-plugin", "usedBy is nvidia-device-plugin"),
        (GPUPhase.RUNNING, "3rd-party-device-plugin", "usedBy is 3rd-party-device-plugin"),
    ],
)
def test_phase_filter_removes_non_running_and_foreign_gpus(
    phase: GPUPhase, used_by: str, text: str
) -> None:
    state = gpu("g", NODE, phase=phase)
    state.used_by = used_by
    ev = evaluate(allocator_with(state), request("p", ("1", "1Gi")))
    assert removed_at(ev, "g") == "PhaseFilter"
    assert reason(ev, "g") == text
    assert ev.rejected_at == "PhaseFilter"
    assert ev.message == "0 of 1 required GPUs left after PhaseFilter"


@pytest.mark.parametrize("capacity", [("0", "80Gi"), ("312", "0")])
def test_phase_filter_removes_zero_capacity_gpus(capacity: tuple[str, str]) -> None:
    allocator = allocator_with(gpu("zero", NODE, capacity=capacity))
    ev = evaluate(allocator, request("p"))
    assert removed_at(ev, "zero") == "PhaseFilter"


# ---- stage 3: GPUIndexFilter ---------------------------------------------------------------


def test_gpu_index_filter_keeps_listed_indices_only() -> None:
    allocator = allocator_with(
        gpu("i0", NODE, index=0), gpu("i1", NODE, index=1), gpu("none", NODE, index=None)
    )
    req = request("p", ("1", "1Gi"), gpu_indices=(1,))
    assert active(allocator, req, "GPUIndexFilter")
    assert not active(allocator, request("q", ("1", "1Gi")), "GPUIndexFilter")
    ev = evaluate(allocator, req)
    assert removed_at(ev, "i1") is None
    assert removed_at(ev, "i0") == "GPUIndexFilter"
    assert removed_at(ev, "none") == "GPUIndexFilter"
    assert [g.name for g in ev.valid] == ["i1"]


# ---- stage 4: GPUIsolationModeFilter -------------------------------------------------------


@pytest.mark.parametrize(
    ("capabilities", "mode", "kept"),
    [
        (None, IsolationMode.SOFT, True),
        (GPUCapabilities(supports_soft=False), IsolationMode.SOFT, False),
        (GPUCapabilities(supports_soft=False), IsolationMode.HARD, True),
        (GPUCapabilities(supports_hard=False), IsolationMode.HARD, False),
        (GPUCapabilities(supports_partitioning=False), IsolationMode.PARTITIONED, False),
        (GPUCapabilities(False, False, False), IsolationMode.SHARED, True),
    ],
)
def test_isolation_mode_filter_follows_the_capabilities_annotation(
    capabilities: GPUCapabilities | None, mode: IsolationMode, kept: bool
) -> None:
    state = gpu("g", NODE)
    state.capabilities = capabilities
    amount = ("0", "0") if mode is IsolationMode.SHARED else ("1", "1Gi")
    ev = evaluate(allocator_with(state), request("p", amount, isolation=mode))
    assert removed_at(ev, "g") == (None if kept else "GPUIsolationModeFilter")


# ---- stage 5: SharedWholeGPUFilter ---------------------------------------------------------


def test_shared_whole_gpu_filter_keeps_idle_and_removes_partly_used_gpus() -> None:
    allocator = allocator_with(gpu("idle", NODE), gpu("used", NODE), gpu("assumed", NODE))
    hold(allocator, "h1", "used", ("1", "0"))
    allocator.assume(request("h2", ("0", "1Mi")), NODE, ["assumed"], now=0)
    shared = request("s", isolation=IsolationMode.SHARED)
    assert active(allocator, shared, "SharedWholeGPUFilter")
    assert not active(allocator, request("q", ("1", "1Gi")), "SharedWholeGPUFilter")
    ev = evaluate(allocator, shared)
    assert removed_at(ev, "idle") is None
    assert removed_at(ev, "used") == "SharedWholeGPUFilter"
    assert removed_at(ev, "assumed") == "SharedWholeGPUFilter"


# ---- stage 6: GPUResourceFilter ------------------------------------------------------------


def test_resource_filter_compares_effective_available_with_the_request() -> None:
    allocator = allocator_with(gpu("gpu-a1", NODE), gpu("gpu-a2", NODE))
    hold(allocator, "holder", "gpu-a1", ("100", "20Gi"))
    ev = evaluate(allocator, request("p", ("250", "40Gi")))
    assert removed_at(ev, "gpu-a1") == "GPUResourceFilter"
    assert reason(ev, "gpu-a1") == "available tflops 212 < request 250"
    assert removed_at(ev, "gpu-a2") is None
    exact = evaluate(allocator, request("q", ("212", "60Gi")))
    assert removed_at(exact, "gpu-a1") is None


def test_resource_filter_reports_vram_and_counts_assumptions() -> None:
    allocator = allocator_with(gpu("g", NODE))
    allocator.assume(request("holder", ("10", "20Gi")), NODE, ["g"], now=0)
    ev = evaluate(allocator, request("p", ("1", "61Gi")))
    assert removed_at(ev, "g") == "GPUResourceFilter"
    assert reason(ev, "g") == "available vram 60Gi < request 61Gi"


def test_resource_filter_zero_requests_always_fit() -> None:
    allocator = allocator_with(gpu("g", NODE))
    hold(allocator, "holder", "g", ("312", "80Gi"))
    assert allocator.gpus["g"].effective_tflops == 0
    ev = evaluate(allocator, request("p", ("0", "0")))
    assert removed_at(ev, "g") is None


def test_resource_filter_zero_requests_fit_even_when_effective_available_is_negative() -> None:
    allocator = allocator_with(gpu("g", NODE))
    allocator.assume(request("holder", ("300", "10Gi")), NODE, ["g"], now=0)
    allocator.upsert_gpu(gpu("g", NODE, capacity=("100", "80Gi")))  # the capacity shrinks
    assert allocator.gpus["g"].available_tflops == tflops("100")  # clamped to [0, capacity]
    assert allocator.gpus["g"].effective_tflops == tflops("-200")  # available − assumed
    ev = evaluate(allocator, request("p", ("0", "0")))
    assert removed_at(ev, "g") is None


def test_percent_conversion_rounds_up_to_a_thousandth() -> None:
    # 33 % of 312.001 TFLOPs = 102.96033 → 102.961
    assert percent_to_tflops_milli(tflops("33"), tflops("312.001")) == tflops("102.961")
    assert percent_to_tflops_milli(tflops("50"), tflops("312")) == tflops("156")


@pytest.mark.parametrize(("held", "kept"), [("209.04", True), ("209.041", False)])
def test_resource_filter_converts_percent_with_this_gpu(held: str, kept: bool) -> None:
    allocator = allocator_with(gpu("g", NODE, capacity=("312.001", "80Gi")))
    hold(allocator, "holder", "g", (held, "0"))
    ev = evaluate(allocator, request("p", percent="33"))
    if kept:
        assert removed_at(ev, "g") is None
    else:
        assert removed_at(ev, "g") == "GPUResourceFilter"
        assert reason(ev, "g") == "available tflops 102960m < request 102961m"


# ---- stage 7: QuotaPercentCheck ------------------------------------------------------------


def test_quota_percent_check_converts_with_each_gpu() -> None:
    allocator = allocator_with(
        gpu("big", NODE, capacity=("312", "80Gi")), gpu("small", NODE, capacity=("200", "80Gi"))
    )
    allocator.set_quota(QuotaSpec("default", "q", total_requests=QuotaCaps(tflops("100"))))
    req = request("p", ("0", "1Gi"), percent="40")
    assert active(allocator, req, "QuotaPercentCheck")
    ev = evaluate(allocator, req)
    # 40 % of 312 = 124.8 > 100; 40 % of 200 = 80 fits. Stage 0 left the TFLOPs part alone.
    assert removed_at(ev, "big") == "QuotaPercentCheck"
    assert reason(ev, "big") == (
        "GPU quota exceeded in namespace default: total.requests.tflops requested 124800m, "
        "limit 100"
    )
    assert removed_at(ev, "small") is None


def test_quota_percent_check_multiplies_totals_by_count_and_checks_single_caps() -> None:
    allocator = allocator_with(gpu("g1", NODE), gpu("g2", NODE))
    allocator.set_quota(QuotaSpec("default", "q", total_requests=QuotaCaps(tflops("100"))))
    one = evaluate(allocator, request("a", ("0", "1Gi"), percent="20"))
    assert removed_at(one, "g1") is None  # 62.4
    two = evaluate(allocator, request("b", ("0", "1Gi"), percent="20", count=2))
    assert removed_at(two, "g1") == "QuotaPercentCheck"  # 2 × 62.4 = 124.8
    allocator.set_quota(QuotaSpec("default", "q", single_max_requests=QuotaCaps(tflops("50"))))
    single = evaluate(allocator, request("c", ("0", "1Gi"), percent="20"))
    assert removed_at(single, "g1") == "QuotaPercentCheck"
    assert reason(single, "g1") == (
        "GPU quota exceeded in namespace default: single.maxRequests.tflops requested 62400m, "
        "limit 50"
    )


def test_quota_percent_check_inactive_without_percent_or_tflops_cap() -> None:
    allocator = allocator_with(gpu("g", NODE))
    allocator.set_quota(QuotaSpec("default", "q", total_requests=QuotaCaps(vram=vram("100Gi"))))
    assert not active(allocator, request("p", ("0", "1Gi"), percent="40"), "QuotaPercentCheck")
    allocator.set_quota(QuotaSpec("default", "q", total_requests=QuotaCaps(tflops("100"))))
    assert not active(allocator, request("q", ("40", "1Gi")), "QuotaPercentCheck")


# ---- stages 8, 9: GPUModelFilter, GPUVendorFilter ------------------------------------------


def test_model_filter_is_exact_and_case_sensitive() -> None:
    allocator = allocator_with(
        gpu("a100", NODE, model="NVIDIA A100"), gpu("l40", NODE, model="L40S")
    )
    ev = evaluate(allocator, request("p", ("1", "1Gi"), gpu_model="NVIDIA A100"))
    assert removed_at(ev, "a100") is None
    assert removed_at(ev, "l40") == "GPUModelFilter"
    lower = evaluate(allocator, request("q", ("1", "1Gi"), gpu_model="nvidia a100"))
    assert removed_at(lower, "a100") == "GPUModelFilter"
    assert not active(allocator, request("r", ("1", "1Gi")), "GPUModelFilter")


def test_vendor_filter_is_exact_and_case_sensitive() -> None:
    amd = gpu("amd", NODE)
    amd.vendor = "AMD"
    allocator = allocator_with(gpu("nv", NODE), amd)
    ev = evaluate(allocator, request("p", ("1", "1Gi"), vendor="NVIDIA"))
    assert removed_at(ev, "nv") is None
    assert removed_at(ev, "amd") == "GPUVendorFilter"
    lower = evaluate(allocator, request("q", ("1", "1Gi"), vendor="nvidia"))
    assert removed_at(lower, "nv") == "GPUVendorFilter"
    assert not active(allocator, request("r", ("1", "1Gi")), "GPUVendorFilter")


# ---- stage 10: SameNodeFilter --------------------------------------------------------------


def test_same_node_filter_removes_gpus_of_a_node_that_keeps_too_few() -> None:
    allocator = allocator_with(gpu("gpu-a1", NODE), gpu("gpu-a2", NODE))
    hold(allocator, "holder", "gpu-a1", ("100", "20Gi"))
    ev = evaluate(allocator, request("p", ("250", "40Gi"), count=2))
    assert removed_at(ev, "gpu-a1") == "GPUResourceFilter"
    assert removed_at(ev, "gpu-a2") == "SameNodeFilter"
    assert reason(ev, "gpu-a2") == "node keeps 1 of 2 required GPUs"
    assert ev.rejected_at == "GPUResourceFilter"
    assert ev.message == "1 of 2 required GPUs left after GPUResourceFilter"


def test_same_node_filter_keeps_a_node_with_enough_gpus() -> None:
    allocator = allocator_with(gpu("g1", NODE), gpu("g2", NODE), gpu("g3", NODE))
    hold(allocator, "holder", "g1", ("300", "0"))
    req = request("p", ("250", "40Gi"), count=2)
    assert active(allocator, req, "SameNodeFilter")
    assert not active(allocator, request("q", ("1", "1Gi")), "SameNodeFilter")
    ev = evaluate(allocator, req)
    assert ev.feasible
    assert [g.name for g in ev.valid] == ["g2", "g3"]


# ---- stage 11: MaxWorkerPerNode ------------------------------------------------------------


def test_max_worker_per_node_counts_committed_and_assumed_workers() -> None:
    allocator = allocator_with(gpu("g1", NODE), gpu("g2", NODE))
    hold(allocator, "committed", "g1", ("1", "1Gi"))
    allocator.assume(request("assumed", ("1", "1Gi")), NODE, ["g2"], now=0)
    req = request("p", ("1", "1Gi"))
    kept = evaluate(allocator, req, SchedulingProfile(GPUResourcesFitArgs(max_worker_per_node=3)))
    assert kept.feasible
    full = evaluate(allocator, req, SchedulingProfile(GPUResourcesFitArgs(max_worker_per_node=2)))
    assert {removed_at(full, "g1"), removed_at(full, "g2")} == {"MaxWorkerPerNode"}
    assert full.rejected_at == "MaxWorkerPerNode"


def test_max_worker_per_node_zero_is_unlimited() -> None:
    allocator = allocator_with(gpu("g", NODE))
    for i in range(3):
        hold(allocator, f"w{i}", "g", ("1", "1Gi"))
    args = SchedulingProfile(GPUResourcesFitArgs(max_worker_per_node=0))
    ctx = RequestContext.build(allocator, request("p", ("1", "1Gi")), args)
    assert not ctx.active[GPU_STAGES.index("MaxWorkerPerNode")]
    assert evaluate_node(ctx, allocator.nodes[NODE]).feasible


# ---- node stages ---------------------------------------------------------------------------


def test_node_not_in_pool() -> None:
    allocator = allocator_with(gpu("g", NODE, pool="other"), gpu("h", "mine"))
    assert evaluate(allocator, request("p", ("1", "1Gi"))).rejected_at == "NodeNotInPool"
    assert evaluate(allocator, request("p", ("1", "1Gi")), node="mine").feasible


def test_insufficient_gpus_when_the_node_never_had_count_gpus_of_the_pool() -> None:
    allocator = allocator_with(gpu("g1", NODE), gpu("other", NODE, pool="other"))
    ev = evaluate(allocator, request("p", ("1", "1Gi"), count=2))
    assert ev.rejected_at == "InsufficientGPUs"
    allocator.upsert_gpu(gpu("g2", NODE))
    assert evaluate(allocator, request("p", ("1", "1Gi"), count=2)).feasible


@pytest.mark.parametrize(("index0", "healthy"), [(None, True), (36, True), (0, False), (-1, False)])
def test_hypervisor_health(index0: int | None, healthy: bool) -> None:
    allocator = allocator_with(gpu("g", NODE))
    allocator.set_node_facts(NODE, ram_bytes=0, disk_bytes=0, hypervisor_index0=index0)
    ev = evaluate(allocator, request("p", ("1", "1Gi")))
    assert ev.rejected_at == (None if healthy else "HypervisorHealth")


def test_pod_index_busy_while_another_pending_worker_holds_the_index() -> None:
    allocator = allocator_with(gpu("g1", NODE), gpu("g2", NODE))
    allocator.assume(request("other", ("1", "1Gi"), pod_index=7), NODE, ["g1"], now=0)
    busy = evaluate(allocator, request("p", ("1", "1Gi"), pod_index=7))
    assert busy.rejected_at == "PodIndexBusy"
    assert evaluate(allocator, request("p", ("1", "1Gi"), pod_index=8)).feasible
    # The same pod re-evaluated is not blocked by itself.
    assert evaluate(allocator, request("other", ("1", "1Gi"), pod_index=7)).feasible
    allocator.commit("other", now=1)  # bound, still Pending: still busy
    assert evaluate(allocator, request("p", ("1", "1Gi"), pod_index=7)).rejected_at == (
        "PodIndexBusy"
    )
    allocator.mark_running("other")
    assert evaluate(allocator, request("p", ("1", "1Gi"), pod_index=7)).feasible


def test_hypervisor_health_is_checked_before_pod_index_busy() -> None:
    allocator = allocator_with(gpu("g", NODE))
    allocator.assume(request("other", ("1", "1Gi"), pod_index=3), NODE, ["g"], now=0)
    allocator.set_node_facts(NODE, ram_bytes=0, disk_bytes=0, hypervisor_index0=0)
    assert evaluate(allocator, request("p", ("1", "1Gi"), pod_index=3)).rejected_at == (
        "HypervisorHealth"
    )


def test_virtual_capacity_rejects_limits_over_the_virtual_capacity() -> None:
    settings = PoolSettings(POOL, oversubscription=OversubscriptionSettings(100, 0, 0))
    allocator = allocator_with(gpu("g", NODE), pools=(settings,))
    assert evaluate(allocator, request("p", ("10", "1Gi"), limit=("312", "80Gi"))).feasible
    ev = evaluate(allocator, request("q", ("10", "1Gi"), limit=("400", "0")))
    assert ev.rejected_at == "VirtualCapacity"
    assert ev.valid  # every GPU stage passed: the node stage rejects
    # Without oversubscription limits stay unchecked.
    plain = allocator_with(gpu("g", NODE))
    assert evaluate(plain, request("q", ("10", "1Gi"), limit=("400", "0"))).feasible


def _numa_allocator(numas: tuple[int, int]) -> Allocator:
    return allocator_with(gpu("g0", NODE, numa=numas[0]), gpu("g1", NODE, numa=numas[1]))


def test_topology_hard_mode_rejects_an_unsatisfied_node() -> None:
    args = SchedulingProfile(topology=TopologyArgs(mode=TopologyMode.HARD))
    ev = evaluate(_numa_allocator((0, 1)), request("p", ("1", "1Gi"), count=2), args)
    assert ev.rejected_at == "Topology"
    assert ev.message is not None
    assert ev.message.startswith("GPU topology constraint not satisfied: ")
    assert ev.message.endswith("(tier=2, maxAllowed=1)")


def test_topology_hard_mode_keeps_a_satisfied_node_and_soft_mode_never_rejects() -> None:
    hard = SchedulingProfile(topology=TopologyArgs(mode=TopologyMode.HARD))
    assert evaluate(_numa_allocator((0, 0)), request("p", ("1", "1Gi"), count=2), hard).feasible
    assert evaluate(_numa_allocator((0, 1)), request("p", ("1", "1Gi"), count=2)).feasible


def test_topology_per_pod_override_turns_hard_mode_on() -> None:
    req = request(
        "p", ("1", "1Gi"), count=2, topology=TopologyOverrides(mode=TopologyMode.HARD, max_tier=2)
    )
    assert evaluate(_numa_allocator((0, 1)), req).feasible  # tier 2 ≤ 2
    strict = replace(req, topology=TopologyOverrides(mode=TopologyMode.HARD, max_tier=0))
    ev = evaluate(_numa_allocator((0, 0)), strict)  # tier 1 > 0: an explicit 0 means 0
    assert ev.rejected_at == "Topology"
    assert ev.message is not None
    assert ev.message.endswith("(tier=1, maxAllowed=0)")


# ---- chain reporting -----------------------------------------------------------------------


def test_a_stage_that_leaves_no_gpu_ends_the_chain() -> None:
    allocator = allocator_with(gpu("g1", NODE, phase=GPUPhase.PENDING), gpu("g2", NODE))
    allocator.gpus["g2"].used_by = "nvidia-device-plugin"
    body = explain(
        allocator,
        request("p", ("1", "1Gi")),
        AllNodesPass(),
        [NODE],
        profile=SchedulingProfile(weights=ScoreWeights(1, 5)),
    )
    assert [s["stage"] for s in body["stages"]] == ["IsolationPolicy", "PhaseFilter"]
    assert body["stages"][1]["in"] == 2
    assert body["stages"][1]["out"] == 0
    assert body["skippedStages"] == [s for s in GPU_STAGES if s not in ("IsolationPolicy",
                                                                        "PhaseFilter")]  # fmt: skip
    assert body["result"]["message"] == "0/1 nodes are available: 1 PhaseFilter."


# ---- §5 accounting -------------------------------------------------------------------------


def test_shared_takes_the_whole_card_and_release_restores_capacity() -> None:
    allocator = allocator_with(gpu("g", NODE))
    allocator.assume(request("s", isolation=IsolationMode.SHARED), NODE, ["g"], now=0)
    assert allocator.gpus["g"].effective_tflops == 0
    assert allocator.gpus["g"].effective_vram == 0
    allocator.commit("s", now=0)
    state = allocator.gpus["g"]
    assert (state.available_tflops, state.available_vram) == (0, 0)
    allocator.release("s")
    assert (state.available_tflops, state.available_vram) == (tflops("312"), vram("80Gi"))
    assert (state.assumed_tflops, state.assumed_vram) == (0, 0)


def test_limits_never_change_available() -> None:
    allocator = allocator_with(gpu("g", NODE))
    hold_req = request("p", ("50", "10Gi"), limit=("300", "70Gi"))
    allocator.assume(hold_req, NODE, ["g"], now=0)
    allocator.commit("p", now=0)
    state = allocator.gpus["g"]
    assert state.available_tflops == tflops("262")
    assert state.available_vram == vram("70Gi")
    allocator.release("p")
    assert (state.available_tflops, state.available_vram) == (tflops("312"), vram("80Gi"))


def test_soft_commit_subtracts_request_per_gpu_and_release_adds_it_back() -> None:
    allocator = allocator_with(gpu("g1", NODE), gpu("g2", NODE))
    allocator.assume(request("p", ("100", "20Gi"), count=2), NODE, ["g1", "g2"], now=0)
    allocator.commit("p", now=0)
    for name in ("g1", "g2"):
        assert allocator.gpus[name].available_tflops == tflops("212")
        assert allocator.gpus[name].available_vram == vram("60Gi")
    allocator.release("p")
    assert allocator.release("p") is None  # idempotent
    for name in ("g1", "g2"):
        assert allocator.gpus[name].available_tflops == tflops("312")


def test_dynamic_policy_locks_the_mode_and_unlocks_on_release() -> None:
    allocator = allocator_with(gpu("g", NODE))
    allocator.isolation_policy = IsolationPolicy.DYNAMIC
    allocator.assume(request("soft", ("1", "1Gi")), NODE, ["g"], now=0)
    state = allocator.gpus["g"]
    assert state.active_isolation_mode == "soft"
    hard = evaluate(allocator, request("hard", ("1", "1Gi"), isolation=IsolationMode.HARD))
    assert removed_at(hard, "g") == "IsolationPolicy"
    assert evaluate(allocator, request("soft2", ("1", "1Gi"))).feasible
    allocator.commit("soft", now=0)
    assert state.active_isolation_mode == "soft"
    allocator.release("soft")
    assert state.active_isolation_mode == ""
    assert evaluate(allocator, request("hard", ("1", "1Gi"), isolation=IsolationMode.HARD)).feasible


def test_dynamic_policy_mixed_modes_set_conflict_and_fail_closed() -> None:
    allocator = allocator_with(gpu("g", NODE))
    allocator.isolation_policy = IsolationPolicy.DYNAMIC
    allocator.restore(request("a", ("1", "1Gi")), NODE, ["g"], now=0)
    allocator.restore(request("b", ("1", "1Gi"), isolation=IsolationMode.HARD), NODE, ["g"], now=0)
    state = allocator.gpus["g"]
    assert state.dynamic_isolation_conflict is True
    assert state.active_isolation_mode == ""
    ev = evaluate(allocator, request("p", ("1", "1Gi")))
    assert removed_at(ev, "g") == "IsolationPolicy"
    allocator.release("b")
    assert state.dynamic_isolation_conflict is False
    assert state.active_isolation_mode == "soft"


# ---- §5.1 runningApps ----------------------------------------------------------------------


def _app_pod(uid: str, namespace: str, workload: str, qos: QoSLevel) -> AllocationRequest:
    return replace(request(uid, ("1", "1Gi"), namespace=namespace), workload=workload, qos=qos)


def test_running_apps_release_removes_exactly_that_pod() -> None:
    allocator = allocator_with(gpu("g", NODE))
    pods = [
        _app_pod("a1", "team-a", "app", QoSLevel.HIGH),
        _app_pod("a2", "team-a", "app", QoSLevel.CRITICAL),
        _app_pod("b1", "team-b", "app", QoSLevel.LOW),
    ]
    for pod in pods:
        allocator.assume(pod, NODE, ["g"], now=0)
        allocator.commit(pod.pod_uid, now=0)
    apps = allocator.gpus["g"].running_apps
    assert apps[("app", "team-a")].count == 2
    assert apps[("app", "team-b")].count == 1
    allocator.release("a1")
    assert apps[("app", "team-a")].count == 1
    remaining = apps[("app", "team-a")].pods["a2"].to_json()
    assert remaining["uid"] == "a2"
    assert remaining["qos"] == "critical"
    assert apps[("app", "team-b")].count == 1
    assert apps[("app", "team-b")].pods["b1"].to_json()["qos"] == "low"
    allocator.release("a2")
    assert ("app", "team-a") not in apps
    assert list(apps) == [("app", "team-b")]


def test_running_apps_hold_committed_pods_only() -> None:
    allocator = allocator_with(gpu("g", NODE))
    allocator.assume(_app_pod("p", "ns", "w", QoSLevel.MEDIUM), NODE, ["g"], now=0)
    assert allocator.gpus["g"].running_apps == {}
    allocator.commit("p", now=0)
    entry = allocator.gpus["g"].running_apps[("w", "ns")].pods["p"].to_json()
    assert entry == {
        "name": "p", "namespace": "ns", "uid": "p", "requests": {"tflops": "1", "vram": "1Gi"},
        "limits": {}, "qos": "medium", "isolation": "soft",
    }  # fmt: skip


# ---- §12 assumption lifecycle --------------------------------------------------------------


def test_assumptions_expire_after_their_ttl_and_committed_records_do_not() -> None:
    allocator = allocator_with(gpu("g1", NODE), gpu("g2", NODE))
    allocator.assume(request("old", ("100", "10Gi")), NODE, ["g1"], now=0)
    allocator.assume(request("bound", ("100", "10Gi")), NODE, ["g2"], now=0)
    allocator.commit("bound", now=1)
    assert allocator.records["old"].expires_at == 60
    assert allocator.expire_assumptions(now=59) == []
    assert allocator.expire_assumptions(now=61) == ["old"]
    assert "old" not in allocator.records
    assert allocator.gpus["g1"].effective_tflops == tflops("312")
    assert allocator.records["bound"].state is RecordState.COMMITTED
    assert allocator.nodes[NODE].assumed_workers == set()
    assert allocator.nodes[NODE].committed_workers == {"bound"}


def test_reassuming_the_same_uid_releases_the_earlier_assumption() -> None:
    allocator = allocator_with(gpu("g1", NODE), gpu("g2", NODE), gpu("h1", "other"))
    allocator.assume(request("p", ("100", "10Gi"), pod_index=4), NODE, ["g1"], now=0)
    allocator.assume(request("p", ("50", "5Gi"), pod_index=4), "other", ["h1"], now=5)
    assert allocator.gpus["g1"].effective_tflops == tflops("312")
    assert allocator.gpus["g1"].holders == {}
    assert allocator.gpus["h1"].effective_tflops == tflops("262")
    assert allocator.nodes[NODE].assumed_workers == set()
    assert allocator.nodes[NODE].pending_indices == {}
    assert allocator.nodes["other"].assumed_workers == {"p"}
    assert allocator.records["p"].node == "other"
    assert allocator.records["p"].expires_at == 65
    assert allocator.expire_assumptions(now=61) == []


# ---- node stages in the indexed decision -----------------------------------------------------


def _node_stage_cluster() -> Allocator:
    """Six nodes; the fullest ones fail a node stage, n4 is the best feasible node."""
    settings = PoolSettings(POOL, oversubscription=OversubscriptionSettings(100, 0, 0))
    allocator = allocator_with(
        *(gpu(f"g{n}-{i}", f"n{n}") for n in range(6) for i in range(2)), pools=(settings,)
    )

    def hold_on(uid: str, node: str, amount: tuple[str, str], limit: tuple[str, str],
                index: int | None = None) -> None:  # fmt: skip
        req = request(uid, amount, limit=limit, pod_index=index)
        allocator.assume(req, node, [f"g{node[1:]}-0"], now=0)
        allocator.commit(uid, now=0)
        if index is None:
            allocator.mark_running(uid)

    hold_on("h0", "n0", ("200", "60Gi"), ("200", "60Gi"))
    allocator.set_node_facts("n0", ram_bytes=0, disk_bytes=0, hypervisor_index0=0)
    hold_on("h1", "n1", ("200", "60Gi"), ("200", "60Gi"), index=5)
    hold_on("h2", "n2", ("200", "60Gi"), ("600", "60Gi"))
    for i in range(3):
        hold_on(f"h3-{i}", "n3", ("60", "20Gi"), ("60", "20Gi"))
    hold_on("h4", "n4", ("100", "20Gi"), ("100", "20Gi"))
    return allocator


@pytest.mark.parametrize(
    ("req", "expected"),
    [
        (request("p", ("10", "1Gi"), limit=("30", "1Gi"), pod_index=5), "n4"),
        (request("p", ("10", "1Gi"), limit=("30", "1Gi"), pod_index=6), "n1"),
        (request("p", ("10", "1Gi"), limit=("30", "1Gi"), pod_index=5, count=2), "n4"),
    ],
)
def test_indexed_decision_applies_every_node_stage(req: AllocationRequest, expected: str) -> None:
    allocator = _node_stage_cluster()
    profile = SchedulingProfile(
        GPUResourcesFitArgs(max_worker_per_node=3), weights=ScoreWeights(1, 5)
    )
    names = sorted(allocator.nodes)
    full = decide(allocator, req, AllNodesPass(), names, profile=profile)
    fast = decide_indexed(
        NodeScoreIndex(allocator, profile.gpu_fit.weights),
        req,
        AllNodesPass(),
        profile=profile,
    )
    assert full.node == expected
    assert (fast.node, fast.gpus, fast.combined) == (full.node, full.gpus, full.combined)


def test_indexed_decision_reports_the_same_message_when_nothing_fits() -> None:
    allocator = _node_stage_cluster()
    profile = SchedulingProfile(
        GPUResourcesFitArgs(max_worker_per_node=3), weights=ScoreWeights(1, 5)
    )
    req = request("p", ("10", "1Gi"), limit=("320", "1Gi"), pod_index=5, count=2)
    full = decide(
        allocator,
        req,
        AllNodesPass(),
        sorted(allocator.nodes),
        profile=profile,
    )
    fast = decide_indexed(
        NodeScoreIndex(allocator, profile.gpu_fit.weights),
        req,
        AllNodesPass(),
        profile=profile,
        reasons=False,
    )
    assert full.node is None
    assert fast.node is None
    assert full.message == (
        "0/6 nodes are available: 1 HypervisorHealth, 1 MaxWorkerPerNode, 1 PodIndexBusy, "
        "3 VirtualCapacity."
    )


def test_indexed_decision_honours_hard_topology_and_quota() -> None:
    allocator = allocator_with(
        gpu("a0", "split", numa=0), gpu("a1", "split", numa=1),
        gpu("b0", "same", numa=0), gpu("b1", "same", numa=0),
    )  # fmt: skip
    allocator.assume(request("h", ("100", "40Gi")), "split", ["a0"], now=0)
    hard = SchedulingProfile(
        topology=TopologyArgs(mode=TopologyMode.HARD), weights=ScoreWeights(1, 5)
    )
    req = request("p", ("10", "1Gi"), count=2)
    index = NodeScoreIndex(allocator, hard.gpu_fit.weights)
    full = decide(
        allocator,
        req,
        AllNodesPass(),
        sorted(allocator.nodes),
        profile=hard,
    )
    fast = decide_indexed(index, req, AllNodesPass(), profile=hard)
    assert full.node == fast.node == "same"
    allocator.set_quota(QuotaSpec("default", "q", single_max_gpu_count=1))
    full = decide(
        allocator,
        req,
        AllNodesPass(),
        sorted(allocator.nodes),
        profile=hard,
    )
    fast = decide_indexed(index, req, AllNodesPass(), profile=hard)
    assert full.node is None
    assert fast.node is None
    assert full.message == "0/2 nodes are available: 2 QuotaCheck."
    quick = decide_indexed(index, req, AllNodesPass(), profile=hard, reasons=False)
    assert quick.node is None
    assert quick.message is not None and quick.message.startswith("GPU quota exceeded")


@pytest.mark.parametrize(
    ("gpus", "problem"),
    [
        (["a", "a"], "duplicate GPU names"),
        (["a", "nope"], "unknown GPUs ['nope']"),
        (["a", "elsewhere"], "are not on node"),
        (["a"], "1 GPUs given for gpu-count 2"),
    ],
)
def test_an_invalid_assumption_is_refused_and_keeps_the_earlier_one(
    gpus: list[str], problem: str
) -> None:
    allocator = allocator_with(gpu("a", NODE), gpu("b", NODE), gpu("elsewhere", "other"))
    req = request("p", ("10", "1Gi"), count=2)
    allocator.assume(req, NODE, ["a", "b"], now=0)
    with pytest.raises(AllocationError, match=re.escape(problem)):
        allocator.assume(req, NODE, gpus, now=1)
    assert allocator.records["p"].gpus == ("a", "b")
    assert allocator.gpus["a"].whole_holders == 0
