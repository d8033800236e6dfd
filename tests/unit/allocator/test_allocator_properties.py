"""Hypothesis properties of the allocator: no over-commit, exact release, exact rebuild."""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from tensorfusion.domain.allocation_request import AllocationRequest
from tensorfusion.domain.allocator.allocator import Allocator
from tensorfusion.domain.allocator.filter_chain import GPUSchedulingArgs
from tensorfusion.domain.allocator.quota import QuotaCaps, QuotaSpec
from tensorfusion.domain.allocator.records import RecordState
from tensorfusion.domain.scheduling.decision import ScoreWeights, decide
from tensorfusion.domain.vocabulary import IsolationMode

from .builders import gpu, request


class AllNodesPass:
    """A native view under which every node passes with fit 0."""

    def rejection(self, node: str) -> tuple[str, str] | None:
        return None

    def fit(self, node: str) -> int:
        return 0

    def fit_bound(self) -> int:
        return 0


@dataclass(frozen=True)
class Op:
    kind: str
    index: int
    tflops: int
    vram: int
    count: int
    isolation: IsolationMode
    percent: bool


capacities = st.sampled_from([("312", "80Gi"), ("362", "48Gi"), ("100", "16Gi")])
clusters = st.lists(st.lists(capacities, min_size=1, max_size=4), min_size=1, max_size=4)
ops = st.lists(
    st.builds(
        Op,
        kind=st.sampled_from(["alloc", "alloc", "alloc", "release", "assume-only"]),
        index=st.integers(0, 50),
        tflops=st.integers(0, 400),
        vram=st.integers(0, 90),
        count=st.integers(1, 3),
        isolation=st.sampled_from([IsolationMode.SOFT, IsolationMode.SOFT, IsolationMode.SHARED]),
        percent=st.booleans(),
    ),
    max_size=40,
)


def build(cluster: list[list[tuple[str, str]]]) -> Allocator:
    allocator = Allocator()
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
    )


def check_invariants(allocator: Allocator) -> None:
    for g in allocator.gpus.values():
        assert 0 <= g.available_tflops <= g.capacity_tflops, g
        assert 0 <= g.available_vram <= g.capacity_vram, g
        assert g.effective_tflops >= 0 and g.effective_vram >= 0, g
        committed = [
            r for r in allocator.records.values()
            if g.name in r.gpus and r.state is RecordState.COMMITTED
        ]  # fmt: skip
        charged_t = sum(r.charged[r.gpus.index(g.name)][0] for r in committed)
        charged_v = sum(r.charged[r.gpus.index(g.name)][1] for r in committed)
        assert g.available_tflops == g.capacity_tflops - charged_t
        assert g.available_vram == g.capacity_vram - charged_v
        if any(r.request.isolation is IsolationMode.SHARED for r in committed):
            assert len(committed) == 1
            assert g.available_tflops == 0 and g.available_vram == 0
    for ns, quota in allocator.quotas.items():
        workers = sum(1 for r in allocator.records.values() if r.request.namespace == ns)
        assert quota.committed.workers + quota.assumed.workers == workers
        assert workers <= quota.spec.max_workers


def run_ops(allocator: Allocator, sequence: list[Op]) -> None:
    live: list[str] = []
    for i, op in enumerate(sequence):
        if op.kind == "release" and live:
            allocator.release(live.pop(op.index % len(live)))
        elif op.kind != "release":
            uid = f"pod-{i}"
            req = make_request(op, uid)
            decision = decide(
                allocator, req, AllNodesPass(), sorted(allocator.nodes),
                GPUSchedulingArgs(), ScoreWeights(),
            )  # fmt: skip
            if decision.node is not None:
                allocator.assume(req, decision.node, decision.gpus, now=float(i))
                if op.kind == "alloc":
                    allocator.commit(uid, now=float(i))
                live.append(uid)
        check_invariants(allocator)


def snapshot(allocator: Allocator) -> dict[str, object]:
    return {
        "gpus": {
            n: (g.available_tflops, g.available_vram, g.assumed_tflops, g.assumed_vram,
                sorted((k, sorted(a.pods)) for k, a in g.running_apps.items()),
                g.active_isolation_mode, g.dynamic_isolation_conflict)
            for n, g in allocator.gpus.items()
        },
        "nodes": {
            n: (sorted(s.committed_workers), sorted(s.assumed_workers), s.limit_tflops,
                s.limit_vram, dict(s.pending_indices))
            for n, s in allocator.nodes.items()
        },
        "quotas": {ns: (q.committed, q.assumed) for ns, q in allocator.quotas.items()},
    }  # fmt: skip


@settings(max_examples=150, deadline=None)
@given(clusters, ops)
def test_no_gpu_is_ever_over_committed(cluster: list[list[tuple[str, str]]], seq: list[Op]) -> None:
    run_ops(build(cluster), seq)


@settings(max_examples=150, deadline=None)
@given(clusters, ops)
def test_releasing_everything_restores_the_initial_state(
    cluster: list[list[tuple[str, str]]], seq: list[Op]
) -> None:
    allocator = build(cluster)
    initial = snapshot(allocator)
    run_ops(allocator, seq)
    for uid in list(allocator.records):
        allocator.release(uid)
    assert snapshot(allocator) == initial


@settings(max_examples=150, deadline=None)
@given(clusters, ops)
def test_rebuild_from_gpu_ids_equals_live_state(
    cluster: list[list[tuple[str, str]]], seq: list[Op]
) -> None:
    live = build(cluster)
    run_ops(live, seq)
    for uid in [u for u, r in live.records.items() if r.state is RecordState.ASSUMED]:
        live.release(uid)
    rebuilt = build(cluster)
    for record in list(live.records.values()):
        rebuilt.restore(record.request, record.node, record.gpus, now=record.since)
    assert snapshot(rebuilt) == snapshot(live)
