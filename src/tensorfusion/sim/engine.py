"""The trace runner: arrivals, scheduling, allocation, departures and periodic samples."""

from __future__ import annotations

import heapq
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import IntEnum, StrEnum
from typing import Any

from tensorfusion.domain.admission.dry_run import PodPreparer, PreparationError
from tensorfusion.domain.allocation_request import AllocationRequest
from tensorfusion.domain.allocator.request_context import GPUSchedulingArgs
from tensorfusion.domain.scheduling.decision import Decision, decide, decide_indexed
from tensorfusion.domain.scheduling.native.cluster_view import NativeCluster
from tensorfusion.domain.scheduling.node_index import NodeScoreIndex
from tensorfusion.domain.scheduling.scheduler_config import ScoreWeights
from tensorfusion.sim.samples import Sample, take_sample
from tensorfusion.sim.virtual_cluster import VirtualCluster
from tensorfusion.sim.workload_file import WorkloadFile

__all__ = [
    "FastPathCheck",
    "FastPathMismatch",
    "PodOutcome",
    "SimPod",
    "Simulation",
    "SimulationResult",
]

MAX_MISMATCHES_KEPT = 5


class PodOutcome(StrEnum):
    """Where a pod of the trace ended up."""

    WAITING = "waiting"
    RUNNING = "running"
    COMPLETED = "completed"
    REJECTED = "rejected"


class _Event(IntEnum):
    DEPARTURE = 0
    ARRIVAL = 1
    SAMPLE = 2


@dataclass(slots=True)
class SimPod:
    """One pod of the trace and what happened to it."""

    name: str
    namespace: str
    uid: str
    entry: str
    arrival: float
    duration: float
    manifest: dict[str, Any]
    request: AllocationRequest | None = None
    outcome: PodOutcome = PodOutcome.WAITING
    node: str | None = None
    gpus: tuple[str, ...] = ()
    placed_at: float | None = None
    message: str | None = None
    warnings: list[str] = field(default_factory=list)
    attempts: int = 0

    @property
    def key(self) -> str:
        """`namespace/name`."""
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class FastPathMismatch:
    """One decision where the indexed search and the full evaluation disagreed."""

    pod: str
    fast: Decision
    full: Decision


@dataclass(slots=True)
class FastPathCheck:
    """`--verify-fast-path`: every decision shadowed by a full evaluation of every node."""

    decisions: int = 0
    mismatches: int = 0
    examples: list[FastPathMismatch] = field(default_factory=list)

    def record(self, pod: str, fast: Decision, full: Decision) -> None:
        """Compare one pair of decisions (node, GPUs and combined score)."""
        self.decisions += 1
        if (fast.node, fast.gpus, fast.combined) != (full.node, full.gpus, full.combined):
            self.mismatches += 1
            if len(self.examples) < MAX_MISMATCHES_KEPT:
                self.examples.append(FastPathMismatch(pod, fast, full))


@dataclass(slots=True)
class SimulationResult:
    """Everything the report is made from."""

    pods: list[SimPod]
    samples: list[Sample]
    decisions: int
    decision_seconds: float
    end_time: float
    fast_path: FastPathCheck | None = None


@dataclass(slots=True)
class Simulation:
    """Runs a workload trace through admission, scheduling and allocation."""

    cluster: VirtualCluster
    workload: WorkloadFile
    args: GPUSchedulingArgs
    weights: ScoreWeights
    native: NativeCluster
    preparer: PodPreparer
    sample_interval: float = 60.0
    on_sample: Callable[[float, VirtualCluster, list[SimPod]], None] | None = None
    verify_fast_path: bool = False
    pods: list[SimPod] = field(default_factory=list)
    _queue: list[tuple[float, int, int, int]] = field(default_factory=list)
    _seq: int = 0
    _waiting: list[int] = field(default_factory=list)
    _decisions: int = 0
    _decision_seconds: float = 0.0
    _running: int = 0
    _pending_events: int = 0
    _samples: list[Sample] = field(default_factory=list)
    _index: NodeScoreIndex | None = None
    _check: FastPathCheck | None = None

    def run(self, progress: Callable[[int, int], None] | None = None) -> SimulationResult:
        """Run the whole trace; `progress(done, total)` is called as pods arrive."""
        self._load_trace()
        self._check = FastPathCheck() if self.verify_fast_path else None
        total = len(self.pods)
        arrived = 0
        last_event = 0.0
        self._push(0.0, _Event.SAMPLE, -1)
        while self._queue:
            now, kind, _, index = heapq.heappop(self._queue)
            if kind == _Event.SAMPLE:
                self._sample(now)
                if self._pending_events or self._running:
                    self._push(now + self.sample_interval, _Event.SAMPLE, -1)
                continue
            self._pending_events -= 1
            last_event = now
            pod = self.pods[index]
            if kind == _Event.ARRIVAL:
                arrived += 1
                self._arrive(index, now)
                if progress is not None:
                    progress(arrived, total)
            else:
                self._depart(pod, now)
        self._explain_waiting()
        return SimulationResult(
            self.pods, self._samples, self._decisions, self._decision_seconds, last_event,
            self._check,
        )  # fmt: skip

    def _explain_waiting(self) -> None:
        """Per-stage reasons for the pods still waiting at the end (full evaluation)."""
        allocator = self.cluster.allocator
        for index in self._waiting:
            pod = self.pods[index]
            assert pod.request is not None
            decision = decide(allocator, pod.request, self.native.view(pod.uid),
                              self.native.node_names(), self.args, self.weights)  # fmt: skip
            pod.message = decision.message

    # ---- trace -------------------------------------------------------------------------------

    def _load_trace(self) -> None:
        for entry in self.workload.workloads:
            namespace = entry.namespace
            for i, name in enumerate(entry.pod_names()):
                pod = SimPod(
                    name=name,
                    namespace=namespace,
                    uid=f"uid-{namespace}-{name}",
                    entry=entry.name,
                    arrival=entry.arrival + i * entry.interval,
                    duration=entry.duration,
                    manifest=entry.pod,
                )
                self.pods.append(pod)
                self._push(pod.arrival, _Event.ARRIVAL, len(self.pods) - 1)

    def _push(self, at: float, kind: _Event, index: int) -> None:
        self._seq += 1
        if kind != _Event.SAMPLE:
            self._pending_events += 1
        # Equal times: departures first (they free capacity), then arrivals, then samples.
        heapq.heappush(self._queue, (at, int(kind), self._seq, index))

    # ---- pod lifecycle -------------------------------------------------------------------------

    def _arrive(self, index: int, now: float) -> None:
        pod = self.pods[index]
        try:
            prepared = self.preparer.prepare(pod.manifest, pod.name, pod.namespace, pod.uid)
        except PreparationError as exc:
            pod.outcome = PodOutcome.REJECTED
            pod.message = str(exc)
            return
        pod.request = prepared.request
        pod.warnings = prepared.warnings
        self.native.add_pod(pod.uid, prepared.pod)
        if not self._try_place(index, now):
            self._waiting.append(index)

    def _try_place(self, index: int, now: float) -> bool:
        pod = self.pods[index]
        request = pod.request
        assert request is not None
        allocator = self.cluster.allocator
        view = self.native.view(pod.uid)
        if self._index is None:
            self._index = NodeScoreIndex(allocator, self.args.weights)
        started = time.perf_counter()
        decision = decide_indexed(self._index, request, view, self.args, self.weights,
                                  reasons=False)  # fmt: skip
        if self._check is not None:
            elapsed = time.perf_counter() - started
            full = decide(allocator, request, view, sorted(allocator.nodes), self.args,
                          self.weights)  # fmt: skip
            self._check.record(pod.key, decision, full)
            started = time.perf_counter() - elapsed
        if decision.node is not None:
            allocator.assume(request, decision.node, decision.gpus, now)
            allocator.commit(request.pod_uid, now)
            allocator.mark_running(request.pod_uid)
        self._decision_seconds += time.perf_counter() - started
        self._decisions += 1
        pod.attempts += 1
        if decision.node is None:
            pod.message = decision.message
            return False
        self.native.bind(pod.uid, decision.node)
        self._running += 1
        pod.outcome = PodOutcome.RUNNING
        pod.node, pod.gpus, pod.placed_at, pod.message = decision.node, decision.gpus, now, None
        self._push(now + pod.duration, _Event.DEPARTURE, index)
        return True

    def _depart(self, pod: SimPod, now: float) -> None:
        self.cluster.allocator.release(pod.uid)
        self.native.unbind(pod.uid)
        self._running -= 1
        pod.outcome = PodOutcome.COMPLETED
        self._waiting = [i for i in self._waiting if not self._try_place(i, now)]

    def _sample(self, now: float) -> None:
        self._samples.append(take_sample(now, self.cluster, len(self._waiting), self._running))
        if self.on_sample is not None:
            self.on_sample(now, self.cluster, self.pods)
