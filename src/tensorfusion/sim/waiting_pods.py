"""The pods waiting for capacity, and which of them a departure can help (queueing hints).

Waiting pods are grouped into classes of identical requirements (the same allocation request
and native requirements but for the pod's identity). A pod failed because no node fitted it,
and the nodes that did not fit a class stay unfit until capacity is freed on them, since
placements only take capacity away. So after a departure:

* a class is retried against the nodes freed since its last failure only, or against every
  node when a release in its namespace freed quota (the quota stages read the namespace);
* the classes' pods are retried in their FIFO order (the order they started waiting), and
  once a class fails in a round, its later pods would fail too and are not tried.

The placements are therefore exactly those of retrying every waiting pod against every node
in FIFO order (`Simulation(full_retry=True)`), at a cost that follows the departures and
placements instead of departures times waiting pods.
"""

from __future__ import annotations

import dataclasses
import heapq
from collections import deque
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, field
from types import MappingProxyType

from tensorfusion.domain.allocation_request import AllocationRequest
from tensorfusion.domain.scheduling.native import NativePlugins, PodRequirements

__all__ = ["Attempt", "WaitingPods"]

Attempt = Callable[[int, Collection[str] | None], bool]
"""Try to place pod `index` on the given nodes (None: every node); True when placed."""


def _anonymous(request: AllocationRequest) -> AllocationRequest:
    """What a decision reads of a request: all but the pod's identity and bookkeeping (the
    pod index only matters while a pod is assumed and not committed, never between two
    decisions of the simulator)."""
    return dataclasses.replace(request, pod_name="", pod_uid="", workload="", pod_index=None)


def _native(requirements: PodRequirements, plugins: NativePlugins) -> PodRequirements:
    """The native requirements a decision reads: no name, and no extended resource that the
    filter ignores and the score does not count (the pod index resource, by default)."""
    resources = requirements.resources
    scalar = resources.requests.scalar
    scored = {r.name for r in plugins.scorer.strategy.resources}
    kept = {n: v for n, v in scalar.items() if n in scored or not plugins.fit_args.is_ignored(n)}
    if len(kept) != len(scalar):
        requests = dataclasses.replace(resources.requests, scalar=MappingProxyType(kept))
        resources = dataclasses.replace(resources, requests=requests)
    return dataclasses.replace(requirements, name="", resources=resources)


@dataclass(slots=True)
class _Class:
    """Waiting pods with identical requirements, in FIFO order."""

    namespace: str
    requirements: PodRequirements
    pods: deque[tuple[int, int]] = field(default_factory=deque)  # (wait sequence, pod index)
    failed_at: int = 0  # the capacity epoch of the class's last failure


@dataclass(slots=True)
class WaitingPods:
    """Waiting pods by class, the log of freed nodes, and when each namespace freed quota."""

    plugins: NativePlugins
    _classes: dict[tuple[str, AllocationRequest], list[_Class]] = field(default_factory=dict)
    _freed: list[str] = field(default_factory=list)  # one node per departure; epoch = length
    _quota_freed: dict[str, int] = field(default_factory=dict)
    _sequence: int = 0
    _count: int = 0

    def __len__(self) -> int:
        return self._count

    def add(self, index: int, request: AllocationRequest, requirements: PodRequirements) -> None:
        """A pod that fitted on no node now starts waiting."""
        native = _native(requirements, self.plugins)
        same = self._classes.setdefault((request.namespace, _anonymous(request)), [])
        group = next((c for c in same if c.requirements == native), None)
        if group is None:
            group = _Class(request.namespace, native)
            same.append(group)
        self._sequence += 1
        group.pods.append((self._sequence, index))
        group.failed_at = len(self._freed)  # the class fits nowhere now
        self._count += 1

    def fifo(self) -> list[int]:
        """Every waiting pod in the order it started waiting."""
        return [i for _, i in sorted(p for c in self._groups() for p in c.pods)]

    def classes(self) -> Iterator[list[int]]:
        """The waiting pods, one FIFO list per class."""
        for group in self._groups():
            yield [i for _, i in group.pods]

    def freed(self, node: str | None, namespace: str, quota: bool) -> None:
        """A pod left `node` (None: it held no node), freeing quota when `quota`."""
        self._freed.append(node or "")
        if quota:
            self._quota_freed[namespace] = len(self._freed)

    def retry(self, attempt: Attempt) -> None:
        """Retry the pods this departure can help, FIFO; placed pods stop waiting."""
        epoch = len(self._freed)
        heap: list[tuple[int, int, _Class, Collection[str] | None]] = []
        for number, group in enumerate(self._groups()):
            nodes = self._candidates(group)
            if nodes is None or nodes:
                heap.append((group.pods[0][0], number, group, nodes))
        heapq.heapify(heap)
        while heap:
            _, number, group, nodes = heap[0]
            if not attempt(group.pods[0][1], nodes):
                group.failed_at = epoch
                heapq.heappop(heap)
                continue
            group.pods.popleft()
            self._count -= 1
            if group.pods:
                heapq.heapreplace(heap, (group.pods[0][0], number, group, nodes))
            else:
                heapq.heappop(heap)
        self._drop_empty()

    def remove_placed(self, placed: Callable[[int], bool]) -> None:
        """Drop the pods for which `placed(index)` holds (after a full retry)."""
        for group in self._groups():
            kept = deque(p for p in group.pods if not placed(p[1]))
            self._count -= len(group.pods) - len(kept)
            group.pods = kept
        self._drop_empty()

    def _candidates(self, group: _Class) -> Collection[str] | None:
        """The nodes that may fit the class now (None: every node)."""
        if self._quota_freed.get(group.namespace, 0) > group.failed_at:
            return None
        return {n for n in self._freed[group.failed_at :] if n}

    def _groups(self) -> Iterator[_Class]:
        for same in self._classes.values():
            yield from same

    def _drop_empty(self) -> None:
        for key in [k for k, same in self._classes.items() if not all(c.pods for c in same)]:
            kept = [c for c in self._classes[key] if c.pods]
            if kept:
                self._classes[key] = kept
            else:
                del self._classes[key]
