"""The trace runner: arrivals, scheduling, allocation, departures and periodic samples."""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from enum import IntEnum, StrEnum
from typing import Any

from tensorfusion.domain.admission.dry_run import PodPreparer, PreparationError, PreparedPod
from tensorfusion.domain.allocation_request import AllocationRequest
from tensorfusion.domain.scheduling.decision import decide, decide_indexed
from tensorfusion.domain.scheduling.native.cluster_view import NativeCluster
from tensorfusion.domain.scheduling.node_index import NodeScoreIndex
from tensorfusion.domain.scheduling.scheduler_config import SchedulingProfile
from tensorfusion.sim.fast_path_check import FastPathCheck, FastPathMismatch
from tensorfusion.sim.native_pods import NativePlacer, is_native
from tensorfusion.sim.samples import Sample, take_sample
from tensorfusion.sim.virtual_cluster import VirtualCluster
from tensorfusion.sim.waiting_pods import WaitingPods
from tensorfusion.sim.workload_file import WorkloadFile

__all__ = [
    "FastPathCheck",
    "FastPathMismatch",
    "PodOutcome",
    "SimPod",
    "Simulation",
    "SimulationResult",
]


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
    native: bool = False
    """A native pod (no TensorFusion label)."""
    entry_index: int = 0
    """Its entry's index in the workload file."""

    @property
    def key(self) -> str:
        """`namespace/name`."""
        return f"{self.namespace}/{self.name}"


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
    """Runs a workload trace through admission, scheduling and allocation.

    `until` ends the run at that simulated time (later arrivals are left out); `full_retry`
    retries every waiting pod against every node on each departure (the reference the
    queueing hints of `WaitingPods` must equal); `resize` gives the request an admitted pod
    is placed with (the right-sizing what-if), instead of the one admission gave.
    """

    cluster: VirtualCluster
    workload: WorkloadFile
    profile: SchedulingProfile
    native: NativeCluster
    preparer: PodPreparer
    sample_interval: float = 60.0
    on_sample: Callable[[float, VirtualCluster, list[SimPod]], None] | None = None
    verify_fast_path: bool = False
    until: float | None = None
    full_retry: bool = False
    resize: Callable[[SimPod, PreparedPod], AllocationRequest] | None = None
    pods: list[SimPod] = field(default_factory=list)
    _queue: list[tuple[float, int, int, int]] = field(default_factory=list)
    _seq: int = 0
    _waiting: WaitingPods = field(init=False)
    _placer: NativePlacer = field(init=False)
    _native_waiting: dict[int, None] = field(default_factory=dict)
    _decisions: int = 0
    _decision_seconds: float = 0.0
    _running: dict[int, None] = field(default_factory=dict)
    _pending_events: int = 0
    _samples: list[Sample] = field(default_factory=list)
    _changed: bool = True
    _index: NodeScoreIndex | None = None
    _check: FastPathCheck | None = None

    def run(self, progress: Callable[[int, int], None] | None = None) -> SimulationResult:
        """Run the trace; `progress(arrived, total)` is called after every arrival and departure."""
        self._waiting = WaitingPods(self.native.plugins)
        self._placer = NativePlacer(
            self.native, self.cluster.allocator, self.profile.gpu_fit.weights
        )
        self._load_trace()
        self._check = FastPathCheck() if self.verify_fast_path else None
        total = len(self.pods)
        arrived = 0
        last_event = 0.0
        horizon = math.inf if self.until is None else self.until
        self._push(0.0, _Event.SAMPLE, 0)
        while self._queue:
            now, kind, _, index = self._queue[0]
            if now > horizon:
                if self._pending_events:
                    last_event = horizon  # cut short: the report's clock stops there
                break
            heapq.heappop(self._queue)
            if kind == _Event.SAMPLE:
                self._sample(now, index)
                continue
            self._pending_events -= 1
            self._changed = True
            last_event = now
            if kind == _Event.ARRIVAL:
                arrived += 1
                self._arrive(index, now)
            else:
                self._depart(index, now)
            if progress is not None:
                progress(arrived, total)
        self._explain_waiting()
        return SimulationResult(
            self.pods, self._samples, self._decisions + self._placer.decisions,
            self._decision_seconds, last_event,
            self._check,
        )  # fmt: skip

    def _explain_waiting(self) -> None:
        """Per-stage reasons for the pods still waiting at the end (full evaluation), once
        per class of identical pods: the reasons do not name the pod."""
        allocator = self.cluster.allocator
        for members in self._waiting.classes():
            pod = self.pods[members[0]]
            assert pod.request is not None
            decision = decide(allocator, pod.request, self.native.view(pod.uid),
                              self.native.node_names(), profile=self.profile)  # fmt: skip
            for index in members:
                self.pods[index].message = decision.message
        for index in self._native_waiting:
            pod = self.pods[index]
            pod.message = self._placer.explain(pod.uid)

    # ---- trace -------------------------------------------------------------------------------

    def _load_trace(self) -> None:
        horizon = math.inf if self.until is None else self.until
        for number, entry in enumerate(self.workload.workloads):
            namespace = entry.namespace
            for i, name in enumerate(entry.pod_names()):
                arrival = entry.arrival + i * entry.interval
                if arrival > horizon:
                    break
                pod = SimPod(
                    name=name,
                    namespace=namespace,
                    uid=f"uid-{namespace}-{name}",
                    entry=entry.name,
                    arrival=arrival,
                    duration=entry.duration,
                    manifest=entry.pod,
                    native=is_native(entry.pod),
                    entry_index=number,
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
        if pod.native:
            self.native.add_pod(pod.uid, pod.manifest)
            if not self._place_native(index, now, None):
                self._native_waiting[index] = None
            return
        try:
            prepared = self.preparer.prepare(pod.manifest, pod.name, pod.namespace, pod.uid)
        except PreparationError as exc:
            pod.outcome = PodOutcome.REJECTED
            pod.message = str(exc)
            return
        request = prepared.request if self.resize is None else self.resize(pod, prepared)
        pod.request = request
        pod.warnings = prepared.warnings
        requirements = self.native.add_pod(pod.uid, prepared.pod)
        if not self._try_place(index, now, None):
            self._waiting.add(index, request, requirements)

    def _try_place(self, index: int, now: float, allowed: Collection[str] | None) -> bool:
        """Decide for one pod among `allowed` nodes (None: all) and place it if it fits."""
        pod = self.pods[index]
        request = pod.request
        assert request is not None
        allocator = self.cluster.allocator
        view = self.native.view(pod.uid)
        if self._index is None:
            self._index = NodeScoreIndex(allocator, self.profile.gpu_fit.weights)
        started = time.perf_counter()
        decision = decide_indexed(self._index, request, view, profile=self.profile,
                                  allowed=allowed, reasons=False)  # fmt: skip
        if self._check is not None:
            elapsed = time.perf_counter() - started
            full = decide(allocator, request, view, sorted(allocator.nodes),
                          profile=self.profile)  # fmt: skip
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
        self._running[index] = None
        pod.outcome = PodOutcome.RUNNING
        pod.node, pod.gpus, pod.placed_at, pod.message = decision.node, decision.gpus, now, None
        self._push(now + pod.duration, _Event.DEPARTURE, index)
        return True

    def _place_native(self, index: int, now: float, nodes: list[str] | None) -> bool:
        """Place a native pod among `nodes` (None: all) if it fits."""
        pod = self.pods[index]
        started = time.perf_counter()
        placement = self._placer.place(pod.uid, nodes)
        self._decision_seconds += time.perf_counter() - started
        pod.attempts += 1
        if placement is None:
            return False
        self._running[index] = None
        pod.outcome = PodOutcome.RUNNING
        pod.node, pod.gpus, pod.placed_at = placement.node, placement.gpus, now
        self._push(now + pod.duration, _Event.DEPARTURE, index)
        return True

    def _depart(self, index: int, now: float) -> None:
        pod = self.pods[index]
        allocator = self.cluster.allocator
        if pod.native:
            self._placer.release(pod.uid)
        else:
            allocator.release(pod.uid)
            self.native.unbind(pod.uid)
        del self._running[index]
        pod.outcome = PodOutcome.COMPLETED
        self._waiting.freed(pod.node, pod.namespace, pod.namespace in allocator.quotas)
        if self.full_retry:
            for waiting in self._waiting.fifo():
                self._try_place(waiting, now, None)
            self._waiting.remove_placed(lambda i: self.pods[i].outcome is PodOutcome.RUNNING)
        else:
            self._waiting.retry(lambda i, nodes: self._try_place(i, now, nodes))
        self._retry_native(pod.node, now)

    def _retry_native(self, freed: str | None, now: float) -> None:
        """Waiting native pods, FIFO, against the node a departure freed: the other nodes
        did not fit them and have only lost capacity since."""
        if freed is None:
            return
        for index in list(self._native_waiting):
            if self._place_native(index, now, [freed]):
                del self._native_waiting[index]

    # ---- samples -------------------------------------------------------------------------------

    def _sample(self, now: float, step: int) -> None:
        """Sample `step` (at `step` × interval): measured when something changed since the
        last one, else the last sample holds. Without a recorder, which needs every sample
        time, the times up to the next event are skipped the same way."""
        if self._changed or not self._samples:
            waiting = len(self._waiting) + len(self._native_waiting)
            self._samples.append(take_sample(now, self.cluster, waiting, len(self._running)))
            self._changed = False
        else:
            self._samples[-1] = self._samples[-1].held(now)
        if self.on_sample is not None:
            self.on_sample(now, self.cluster, [self.pods[i] for i in sorted(self._running)])
        if not (self._pending_events or self._running):
            return
        interval = self.sample_interval
        following = step + 1
        if self.on_sample is None and self._queue:
            following = max(following, math.ceil(self._queue[0][0] / interval))
            while following * interval < self._queue[0][0]:
                following += 1  # the sample comes after the event, whatever the rounding
            end = following if self.until is None else math.floor(self.until / interval) + 1
            skipped = min(following, end) - step - 1
            if skipped > 0:
                last = step + skipped
                self._samples[-1] = self._samples[-1].held(last * interval, skipped)
        self._push(following * interval, _Event.SAMPLE, following)
