"""Recovery of inconsistent and partitioned records, missing GPUs and per-consumer change sets."""

from __future__ import annotations

import gc

from tensorfusion.domain.allocator.allocator import Allocator
from tensorfusion.domain.allocator.capacity_figures import node_capacity
from tensorfusion.domain.allocator.progressive_migration import wants_progressive_taint
from tensorfusion.domain.allocator.quota import QuotaCaps, QuotaSpec
from tensorfusion.domain.allocator.records import RecordState
from tensorfusion.domain.model.gpu import GPUStatus
from tensorfusion.domain.scheduling.decision import decide_indexed
from tensorfusion.domain.scheduling.filter_chain import evaluate_node
from tensorfusion.domain.scheduling.node_index import NodeScoreIndex
from tensorfusion.domain.scheduling.request_context import RequestContext
from tensorfusion.domain.scheduling.scheduler_config import SchedulingProfile
from tensorfusion.domain.vocabulary import GPUPhase, IsolationMode, IsolationPolicy

from .builders import AllNodesPass, allocator_with, gpu, request, tflops, vram

NODE = "node-a"


def _quota(namespace: str = "default") -> QuotaSpec:
    return QuotaSpec(namespace=namespace, name="q", total_requests=QuotaCaps(tflops("1000"), 0))


# ---- recovery ------------------------------------------------------------------------------


def test_a_gpu_on_another_node_stays_charged_and_is_reported() -> None:
    allocator = allocator_with(gpu("a1", NODE), gpu("b1", "node-b"))
    allocator.set_quota(_quota())
    outcome = allocator.restore(
        request("p", ("100", "10Gi"), count=3), NODE, ["a1", "b1", "gone"], 0
    )
    assert outcome.record.gpus == ("a1", "b1")
    assert (outcome.elsewhere_gpus, outcome.unknown_gpus) == (("b1",), ("gone",))
    assert not outcome.consistent
    message = outcome.message()
    assert message is not None and "b1 (kept charged)" in message and "2 of 3 GPUs" in message
    # As a GPU that moves while held: charged where it is, so it is never handed out twice.
    assert allocator.gpus["a1"].available_tflops == tflops("212")
    assert allocator.gpus["b1"].available_tflops == tflops("212")
    usage = allocator.quotas["default"].committed
    assert (usage.request_tflops, usage.request_vram, usage.workers) == (
        tflops("300"),
        3 * vram("10Gi"),
        1,
    )
    assert "p" in allocator.nodes[NODE].committed_workers


def test_a_pod_whose_gpus_are_all_unknown_keeps_its_worker_and_quota_charge() -> None:
    allocator = allocator_with(gpu("a1", NODE))
    allocator.set_quota(_quota())
    outcome = allocator.restore(request("p", ("50", "1Gi")), NODE, ["gone"], 0)
    assert outcome.unknown_gpus == ("gone",)
    assert outcome.record.gpus == ()
    assert allocator.quotas["default"].committed.request_tflops == tflops("50")
    assert allocator.nodes[NODE].committed_workers == {"p"}
    allocator.release("p")
    assert allocator.quotas["default"].committed.workers == 0


def test_a_partitioned_allocation_found_at_recovery_takes_the_whole_gpu() -> None:
    allocator = allocator_with(gpu("a1", NODE), gpu("a2", NODE))
    allocator.isolation_policy = IsolationPolicy.DYNAMIC
    part = request(
        "p", ("10", "1Gi"), isolation=IsolationMode.PARTITIONED, partition_template_id="1g.10gb"
    )
    allocator.restore(part, NODE, ["a1"], 0)
    held = allocator.gpus["a1"]
    assert (held.available_tflops, held.available_vram) == (0, 0)
    assert held.partitions == {"p": "1g.10gb"}
    assert held.active_isolation_mode == ""
    # Whatever the isolation state, the lock never holds a value the status model rejects.
    GPUStatus.model_validate({"activeIsolationMode": held.active_isolation_mode or None})
    ctx = RequestContext.build(allocator, request("z", ("0", "0")), SchedulingProfile())
    ev = evaluate_node(ctx, allocator.nodes[NODE], explain=True)
    assert [g.name for g in ev.valid] == ["a2"]
    allocator.release("p")
    assert allocator.gpus["a1"].is_idle()


# ---- missing GPUs --------------------------------------------------------------------------


def test_a_missing_gpu_leaves_node_totals_and_placement_but_keeps_its_allocation() -> None:
    allocator = allocator_with(gpu("a1", NODE), gpu("a2", NODE))
    allocator.assume(request("p", ("100", "10Gi")), NODE, ["a1"], now=0)
    allocator.commit("p", now=0)
    gone = gpu("a1", NODE)
    gone.missing_since = "2026-12-01T00:00:00Z"
    allocator.upsert_gpu(gone)
    node = allocator.nodes[NODE]
    assert [g.name for g in node.gpus] == ["a2"]
    assert node.total_capacity() == (tflops("312"), vram("80Gi"))
    assert allocator.gpus["a1"].committed_tflops == tflops("100")
    ctx = RequestContext.build(allocator, request("q", ("1", "1Gi")), SchedulingProfile())
    assert [g.name for g in evaluate_node(ctx, node).valid] == ["a2"]
    back = gpu("a1", NODE)
    allocator.upsert_gpu(back)
    assert [g.name for g in node.gpus] == ["a1", "a2"]
    assert allocator.gpus["a1"].available_tflops == tflops("212")


# ---- change sets ---------------------------------------------------------------------------


def test_each_consumer_reads_every_change_once_without_hiding_it_from_others() -> None:
    allocator = allocator_with(gpu("a1", NODE), gpu("b1", "node-b"))
    status = allocator.changes("status-write-back")
    taint = allocator.changes("taint")
    assert status.take_gpus() == {"a1", "b1"}
    assert status.take_nodes() == {NODE, "node-b"}
    assert status.take_gpus() == set()
    allocator.assume(request("p", ("1", "1Gi")), NODE, ["a1"], now=0)
    assert status.take_gpus() == {"a1"}
    assert status.take_nodes() == {NODE}
    assert taint.take_nodes() == {NODE, "node-b"}
    assert taint.take_gpus() == {"a1", "b1"}
    allocator.remove_gpu("b1")
    assert status.take_gpus() == set()
    assert status.take_nodes() == {"node-b"}


def test_a_resize_recharges_the_same_gpus() -> None:
    allocator = allocator_with(gpu("a1", NODE))
    allocator.set_quota(_quota())
    allocator.assume(request("p", ("100", "10Gi")), NODE, ["a1"], now=0)
    allocator.commit("p", now=1)
    record = allocator.replace_request("p", request("p", ("150", "12Gi")))
    assert record.state is RecordState.COMMITTED and record.gpus == ("a1",)
    assert allocator.gpus["a1"].available_tflops == tflops("162")
    assert allocator.quotas["default"].committed.request_tflops == tflops("150")
    assert isinstance(allocator, Allocator)


def test_a_whole_card_holder_follows_a_capacity_change_of_its_gpu() -> None:
    allocator = allocator_with(gpu("a1", NODE))
    allocator.assume(request("s", isolation=IsolationMode.SHARED), NODE, ["a1"], now=0)
    allocator.commit("s", now=0)
    allocator.upsert_gpu(gpu("a1", NODE, capacity=("400", "96Gi")))
    held = allocator.gpus["a1"]
    assert (held.available_tflops, held.available_vram) == (0, 0)
    assert allocator.records["s"].charged == ((tflops("400"), vram("96Gi")),)
    node = allocator.nodes[NODE]
    assert (node.committed_limit_tflops, node.limit_vram) == (tflops("400"), vram("96Gi"))
    allocator.release("s")
    assert (node.limit_tflops, node.committed_limit_vram) == (0, 0)


def test_an_identical_update_changes_nothing_a_real_one_marks_the_gpu() -> None:
    allocator = allocator_with(gpu("a1", NODE))
    cursor = allocator.changes("status-write-back")
    cursor.take_gpus(), cursor.take_nodes()
    allocator.upsert_gpu(gpu("a1", NODE))
    assert not cursor.pending()
    allocator.upsert_gpu(gpu("a1", NODE, phase=GPUPhase.UNKNOWN))
    assert cursor.take_nodes() == {NODE} and cursor.take_gpus() == set()
    allocator.upsert_gpu(gpu("a1", NODE, capacity=("100", "80Gi")))
    assert cursor.take_gpus() == {"a1"}


def test_a_gpu_that_falls_under_the_dynamic_policy_takes_the_lock_of_its_holders() -> None:
    allocator = allocator_with(gpu("a1", NODE))
    allocator.isolation_policy = IsolationPolicy.DYNAMIC
    static = gpu("a1", NODE)
    static.isolation_policy = IsolationPolicy.STATIC
    allocator.upsert_gpu(static)
    allocator.restore(request("p", ("1", "1Gi")), NODE, ["a1"], now=0)
    assert allocator.gpus["a1"].active_isolation_mode == ""
    allocator.upsert_gpu(gpu("a1", NODE))  # policy "" now: the controller's, Dynamic
    assert allocator.gpus["a1"].active_isolation_mode == "soft"
    hard = request("h", ("1", "1Gi"), isolation=IsolationMode.HARD)
    ctx = RequestContext.build(allocator, hard, SchedulingProfile())
    assert evaluate_node(ctx, allocator.nodes[NODE]).rejected_at == "IsolationPolicy"


def test_an_allocated_missing_gpu_keeps_the_node_tainted_and_its_pod_counted() -> None:
    allocator = allocator_with(gpu("a1", NODE), gpu("a2", NODE))
    allocator.assume(request("p", ("10", "1Gi")), NODE, ["a1"], now=0)
    allocator.commit("p", now=0)
    gone = gpu("a1", NODE)
    gone.missing_since = "2026-12-01T00:00:00Z"
    allocator.upsert_gpu(gone)
    node = allocator.nodes[NODE]
    assert wants_progressive_taint(node)
    assert node_capacity(allocator, node).pods == ("p",)
    assert node_capacity(allocator, node).totals.total_tflops == tflops("312")


def test_a_percent_pod_whose_gpus_are_all_unknown_is_charged_with_the_pools_capacity() -> None:
    allocator = allocator_with(gpu("a1", NODE, capacity=("200", "80Gi")))
    allocator.set_quota(_quota())
    allocator.restore(request("p", ("0", "1Gi"), percent="50", count=2), NODE, ["x", "y"], 0)
    assert allocator.quotas["default"].committed.request_tflops == tflops("200")


def test_every_node_index_sees_the_whole_state_even_after_an_earlier_one_is_gone() -> None:
    allocator = allocator_with(gpu("a1", NODE), gpu("b1", "node-b"))
    args = SchedulingProfile()
    for _ in range(5):
        index = NodeScoreIndex(allocator, args.gpu_fit.weights)
        decision = decide_indexed(
            index, request("p", ("1", "1Gi")), AllNodesPass(), profile=args, reasons=False
        )
        assert decision.node is not None
        del index
        gc.collect()


def test_a_cursor_nobody_holds_stops_collecting() -> None:
    allocator = allocator_with(gpu("a1", NODE))
    cursor = allocator.changes("short-lived")
    assert allocator.changes("short-lived") is cursor
    del cursor
    gc.collect()
    fresh = allocator.changes("short-lived")
    assert fresh.take_gpus() == {"a1"}  # a new cursor: the whole state again


def test_two_live_node_indexes_each_get_the_whole_state() -> None:
    allocator = allocator_with(gpu("a1", NODE), gpu("b1", "node-b"))
    args = SchedulingProfile()
    first = NodeScoreIndex(allocator, args.gpu_fit.weights)
    second = NodeScoreIndex(allocator, args.gpu_fit.weights)
    for index in (first, second):
        decision = decide_indexed(
            index, request("p", ("1", "1Gi")), AllNodesPass(), profile=args, reasons=False
        )
        assert decision.node is not None
