"""The most free CPU, memory and pod slots of any node: a pod that asks for more than the most
free of one of them passes NodeResourcesFit nowhere, and is turned down without a node scan."""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

from tensorfusion.domain.scheduling.native.node import NodeFacts
from tensorfusion.domain.scheduling.native.resources import NodeUsage, PodResources

__all__ = ["FreeBounds"]

_CPU, _MEMORY, _PODS = range(3)


def _free(facts: NodeFacts, usage: NodeUsage) -> tuple[int, int, int]:
    allocatable = facts.allocatable
    return (
        allocatable.cpu_milli - usage.cpu_milli,
        allocatable.memory - usage.memory,
        facts.allowed_pods - usage.pods,
    )


@dataclass(slots=True)
class FreeBounds:
    """Per resource, a max-heap of each node's free amount (stale entries dropped lazily)."""

    _heaps: tuple[list[tuple[int, int, str]], ...] = field(default_factory=lambda: ([], [], []))
    _current: dict[str, tuple[int, tuple[int, int, int]]] = field(default_factory=dict)
    _serial: int = 0

    def update(self, name: str, facts: NodeFacts, usage: NodeUsage) -> None:
        """Take the node's current free amounts."""
        free = _free(facts, usage)
        old = self._current.get(name)
        if old is not None and old[1] == free:
            return
        self._serial += 1
        self._current[name] = (self._serial, free)
        for heap, amount in zip(self._heaps, free, strict=True):
            heapq.heappush(heap, (-amount, self._serial, name))
        if len(self._heaps[0]) > 4 * len(self._current) + 64:
            self._compact()

    def copy(self) -> FreeBounds:
        """An independent copy (reading pops stale entries, so a second reader needs one)."""
        return FreeBounds(tuple(list(heap) for heap in self._heaps), dict(self._current),
                          self._serial)  # fmt: skip

    def remove(self, name: str) -> None:
        """Forget a node."""
        self._current.pop(name, None)

    def admits_somewhere(self, pod: PodResources) -> bool:
        """False when no node has the CPU, the memory or a pod slot the pod asks for."""
        requests = pod.requests
        if self._most(_PODS) < 1:
            return False
        if requests.cpu_milli > 0 and self._most(_CPU) < requests.cpu_milli:
            return False
        return not (requests.memory > 0 and self._most(_MEMORY) < requests.memory)

    def _most(self, resource: int) -> int:
        heap = self._heaps[resource]
        current = self._current
        while heap:
            negative, serial, name = heap[0]
            known = current.get(name)
            if known is not None and known[0] == serial:
                return -negative
            heapq.heappop(heap)
        return -1  # no node at all

    def _compact(self) -> None:
        for resource, heap in enumerate(self._heaps):
            heap[:] = [(-free[resource], serial, n) for n, (serial, free) in self._current.items()]
            heapq.heapify(heap)
