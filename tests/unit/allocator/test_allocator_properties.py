"""Hypothesis properties of the allocator: no over-commit, exact release, exact rebuild.

Random clusters under both isolation policies go through random sequences of assumptions,
commits, releases, GPU capacity changes and GPU removals and re-additions.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from tensorfusion.domain.allocation_request import AllocationRequest
from tensorfusion.domain.allocator.allocator import Allocator
from tensorfusion.domain.allocator.quota import QuotaCaps, QuotaSpec
from tensorfusion.domain.allocator.records import RecordState
from tensorfusion.domain.scheduling.decision import decide
from tensorfusion.domain.scheduling.scheduler_config import SchedulingProfile
from tensorfusion.domain.vocabulary import IsolationMode, IsolationPolicy
from tests.hypothesis_budget import examples

from .builders import AllNodesPass, gpu, request


@dataclass(frozen=True)
class Op:
    kind: str
    index: int
    tflops: int
    vram: int
    count: int
    isolation: IsolationMode
    percent: bool


ALLOCATING = ("alloc", "assume-only")
capacities = st.sampled_from([("312", "80Gi"), ("362", "48Gi"), ("100", "16Gi")])
clusters = st.lists(st.lists(capacities, min_size=1, max_size=4), min_size=1, max_size=4)
policies = st.sampled_from([IsolationPolicy.STATIC, IsolationPolicy.DYNAMIC])
isolations = st.sampled_from(
    [IsolationMode.SOFT, IsolationMode.SOFT, IsolationMode.HARD, IsolationMode.SHARED]
)


def op_lists(kinds: list[str]) -> st.SearchStrategy[list[Op]]:
    return st.lists(
        st.builds(
            Op,
            kind=st.sampled_from(kinds),
            index=st.integers(0, 50),
            tflops=st.integers(0, 400),
            vram=st.integers(0, 90),
            count=st.integers(1, 3),
            isolation=isolations,
            percent=st.booleans(),
        ),
        max_size=40,
    )


lifecycle_ops = op_lists(["alloc", "alloc", "alloc", "release", "assume-only"])
inventory_ops = op_lists(["alloc", "alloc", "release", "assume-only", "resize", "readd"])


def build(cluster: list[list[tuple[str, str]]], policy: IsolationPolicy) -> Allocator:
    allocator = Allocator(isolation_policy=policy)
    for n, node in enumerate(cluster):
        for g, capacity in enumerate(node):
            allocator.upsert_gpu(gpu(f"gpu-{n}-{g}", f"node-{n}", capacity=capacity))
    allocator.set_quota(
        QuotaSpec("quota-ns", "q", total_requests=QuotaCaps(tflops=900_000), max_workers=6)
    )
    return allocator


def make_request(op: Op, uid: str) -> AllocationRequest:
    return request(
        uid,
        (str(op.tflops), f"{op.vram}Gi"),
        limit=(str(op.tflops * 2), f"{op.vram}Gi"),
        count=op.count,
        isolation=op.isolation,
        percent=str(min(op.tflops, 100) or 1) if op.percent else None,
        namespace="quota-ns" if op.index % 3 == 0 else "default",
        pod_index=op.index % 4 + 1,
    )


def check_invariants(allocator: Allocator) -> None:
    """Every owned field of every GPU and node equals what the records say."""
    records = allocator.records.values()
    members = {name for names in allocator.pool_members.values() for name in names}
    assert members == set(allocator.gpus)
    for g in allocator.gpus.values():
        assert g.name in allocator.pool_members[g.pool]
        mine = [r for r in records if g.name in r.gpus]
        committed = [r for r in mine if r.state is RecordState.COMMITTED]
        charged_t = sum(r.charged[r.gpus.index(g.name)][0] for r in committed)
        charged_v = sum(r.charged[r.gpus.index(g.name)][1] for r in committed)
        assert (g.committed_tflops, g.committed_vram) == (charged_t, charged_v)
        assert g.available_tflops == min(max(g.capacity_tflops - charged_t, 0), g.capacity_tflops)
        assert g.available_vram == min(max(g.capacity_vram - charged_v, 0), g.capacity_vram)
        assert 0 <= g.available_tflops <= g.capacity_tflops
        assert 0 <= g.available_vram <= g.capacity_vram
        assumed = [r for r in mine if r.state is RecordState.ASSUMED]
        assert g.assumed_tflops == sum(r.charged[r.gpus.index(g.name)][0] for r in assumed)
        assert g.assumed_vram == sum(r.charged[r.gpus.index(g.name)][1] for r in assumed)
        assert g.holders == {r.uid: r.request.isolation for r in mine}
        shared = [r for r in mine if r.request.isolation is IsolationMode.SHARED]
        assert g.whole_holders == len(shared)
        if shared:
            # A whole card is held by nobody else.
            assert len(mine) == 1
        apps = {uid for app in g.running_apps.values() for uid in app.pods}
        assert apps == {r.uid for r in committed}
        if allocator.isolation_policy is IsolationPolicy.DYNAMIC:
            modes = {r.request.isolation for r in mine}
            assert g.dynamic_isolation_conflict == (len(modes) > 1)
            expected = next(iter(modes)).value if len(modes) == 1 else ""
            assert g.active_isolation_mode == expected
    for ns, quota in allocator.quotas.items():
        workers = sum(1 for r in records if r.request.namespace == ns)
        assert quota.committed.workers + quota.assumed.workers == workers
        assert workers <= quota.spec.max_workers
    for node in allocator.nodes.values():
        on_node = [r for r in records if r.node == node.name]
        assert node.committed_workers | node.assumed_workers == {r.uid for r in on_node}
        assert node.limit_tflops == sum(r.effective_limit[0] for r in on_node)
        assert node.committed_limit_tflops == sum(
            r.effective_limit[0] for r in on_node if r.state is RecordState.COMMITTED
        )


def check_within_capacity(allocator: Allocator) -> None:
    """What the records charge each GPU (committed plus assumed) fits in its capacity."""
    charged: dict[str, tuple[int, int]] = {}
    for r in allocator.records.values():
        for name, (tflops_milli, vram_bytes) in zip(r.gpus, r.charged, strict=True):
            t, v = charged.get(name, (0, 0))
            charged[name] = (t + tflops_milli, v + vram_bytes)
    for g in allocator.gpus.values():
        t, v = charged.get(g.name, (0, 0))
        assert t <= g.capacity_tflops, (
            f"{g.name}: {t} mTFLOPs charged, capacity {g.capacity_tflops}"
        )
        assert v <= g.capacity_vram, f"{g.name}: {v} bytes charged, capacity {g.capacity_vram}"


def run_ops(allocator: Allocator, sequence: list[Op]) -> None:
    """Apply the ops; after each, the invariants hold, and no GPU is over-committed unless a
    capacity shrink came first (pods keep what they hold when a card shrinks)."""
    live: list[str] = []
    shrunk = False
    for i, op in enumerate(sequence):
        names = sorted(allocator.gpus)
        if op.kind == "release" and live:
            allocator.release(live.pop(op.index % len(live)))
        elif op.kind == "resize" and names:
            known = allocator.gpus[names[op.index % len(names)]]
            fresh = gpu(known.name, known.node, capacity=(str(op.tflops), f"{op.vram}Gi"))
            shrunk = shrunk or (
                fresh.capacity_tflops < known.capacity_tflops
                or fresh.capacity_vram < known.capacity_vram
            )
            allocator.upsert_gpu(fresh)
        elif op.kind == "readd" and names:
            known = allocator.gpus[names[op.index % len(names)]]
            copy = dataclasses.replace(known, holders={}, running_apps={})
            allocator.remove_gpu(known.name)
            allocator.upsert_gpu(copy)
        elif op.kind in ALLOCATING:
            uid = f"pod-{i}"
            req = make_request(op, uid)
            decision = decide(
                allocator, req, AllNodesPass(), sorted(allocator.nodes), profile=SchedulingProfile()
            )
            if decision.node is not None:
                allocator.assume(req, decision.node, decision.gpus, now=float(i))
                if op.kind == "alloc":
                    allocator.commit(uid, now=float(i))
                live.append(uid)
        check_invariants(allocator)
        if not shrunk:
            check_within_capacity(allocator)


def snapshot(allocator: Allocator) -> dict[str, object]:
    return {
        "gpus": {
            n: (g.available_tflops, g.available_vram, g.assumed_tflops, g.assumed_vram,
                g.committed_tflops, g.committed_vram, dict(g.holders), g.whole_holders,
                sorted((k, sorted(a.pods)) for k, a in g.running_apps.items()),
                g.active_isolation_mode, g.dynamic_isolation_conflict)
            for n, g in allocator.gpus.items()
        },
        "nodes": {
            n: (sorted(s.committed_workers), sorted(s.assumed_workers), s.limit_tflops,
                s.limit_vram, s.committed_limit_tflops, s.committed_limit_vram,
                dict(s.pending_indices))
            for n, s in allocator.nodes.items()
        },
        "quotas": {ns: (q.committed, q.assumed) for ns, q in allocator.quotas.items()},
    }  # fmt: skip


@settings(max_examples=examples(150), deadline=None)
@given(clusters, policies, lifecycle_ops)
def test_no_gpu_is_ever_over_committed(
    cluster: list[list[tuple[str, str]]], policy: IsolationPolicy, seq: list[Op]
) -> None:
    """Committed plus assumed charges of every GPU stay within its capacity (`run_ops`)."""
    run_ops(build(cluster, policy), seq)


@settings(max_examples=examples(150), deadline=None)
@given(clusters, policies, inventory_ops)
def test_owned_fields_follow_the_records_through_capacity_changes_and_readds(
    cluster: list[list[tuple[str, str]]], policy: IsolationPolicy, seq: list[Op]
) -> None:
    run_ops(build(cluster, policy), seq)


@settings(max_examples=examples(150), deadline=None)
@given(clusters, policies, lifecycle_ops)
def test_releasing_everything_restores_the_initial_state(
    cluster: list[list[tuple[str, str]]], policy: IsolationPolicy, seq: list[Op]
) -> None:
    allocator = build(cluster, policy)
    initial = snapshot(allocator)
    run_ops(allocator, seq)
    for uid in list(allocator.records):
        allocator.release(uid)
    assert snapshot(allocator) == initial


@settings(max_examples=examples(150), deadline=None)
@given(clusters, policies, lifecycle_ops)
def test_rebuild_from_gpu_ids_equals_live_state(
    cluster: list[list[tuple[str, str]]], policy: IsolationPolicy, seq: list[Op]
) -> None:
    live = build(cluster, policy)
    run_ops(live, seq)
    for uid in [u for u, r in live.records.items() if r.state is RecordState.ASSUMED]:
        live.release(uid)
    rebuilt = build(cluster, policy)
    for record in list(live.records.values()):
        outcome = rebuilt.restore(record.request, record.node, record.gpus, now=record.since)
        assert outcome.consistent
        outcome.record.pending = record.pending
    assert snapshot(rebuilt) == snapshot(live)


def test_gpus_are_indexed_by_pool_through_moves_and_removals() -> None:
    allocator = Allocator()
    allocator.upsert_gpu(gpu("a", "n1", pool="p1"))
    allocator.upsert_gpu(gpu("b", "n1", pool="p1"))
    allocator.upsert_gpu(gpu("c", "n2", pool="p2"))
    allocator.upsert_gpu(gpu("b", "n1", pool="p2"))
    allocator.remove_gpu("c")
    assert [g.name for g in allocator.pool_gpus("p1")] == ["a"]
    assert [g.name for g in allocator.pool_gpus("p2")] == ["b"]
    assert allocator.pool_gpus("unknown") == []
