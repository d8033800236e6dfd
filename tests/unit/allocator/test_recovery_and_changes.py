"""Recovery of inconsistent and partitioned records, missing GPUs and per-consumer change sets."""

from __future__ import annotations

from tensorfusion.domain.allocator.allocator import Allocator
from tensorfusion.domain.allocator.filter_chain import evaluate_node
from tensorfusion.domain.allocator.quota import QuotaCaps, QuotaSpec
from tensorfusion.domain.allocator.records import RecordState
from tensorfusion.domain.allocator.request_context import GPUSchedulingArgs, RequestContext
from tensorfusion.domain.model.gpu import GPUStatus
from tensorfusion.domain.vocabulary import IsolationMode, IsolationPolicy

from .builders import allocator_with, gpu, request, tflops, vram

NODE = "node-a"


def _quota(namespace: str = "default") -> QuotaSpec:
    return QuotaSpec(namespace=namespace, name="q", total_requests=QuotaCaps(tflops("1000"), 0))


# ---- recovery ------------------------------------------------------------------------------


def test_a_gpu_on_another_node_is_skipped_and_the_quota_is_still_charged() -> None:
    allocator = allocator_with(gpu("a1", NODE), gpu("b1", "node-b"))
    allocator.set_quota(_quota())
    outcome = allocator.restore(request("p", ("100", "10Gi"), count=2), NODE, ["a1", "b1"], 0)
    assert outcome.record.gpus == ("a1",)
    assert outcome.elsewhere_gpus == ("b1",)
    assert not outcome.consistent
    message = outcome.message()
    assert message is not None and "b1" in message and "1 of 2 GPUs" in message
    assert allocator.gpus["a1"].available_tflops == tflops("212")
    assert allocator.gpus["b1"].available_tflops == tflops("312")
    usage = allocator.quotas["default"].committed
    assert (usage.request_tflops, usage.request_vram, usage.workers) == (
        tflops("200"),
        2 * vram("10Gi"),
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
    ctx = RequestContext.build(allocator, request("z", ("0", "0")), GPUSchedulingArgs())
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
    ctx = RequestContext.build(allocator, request("q", ("1", "1Gi")), GPUSchedulingArgs())
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
