"""Free GPU amounts of a set of nodes ranked per GPU count: which nodes have k GPUs with at
least x free each.

For every rank k, the (k+1)-th largest free amount of each node with more than k GPUs is kept
sorted, so "some node has `count` GPUs with `x` free" is one comparison with the largest entry.
"""

from __future__ import annotations

import bisect
import heapq
from dataclasses import dataclass, field

from tensorfusion.domain.allocation_request import ResourceAmount
from tensorfusion.domain.allocator.gpu_state import GPUState

__all__ = ["FreeGPUs", "PoolCapacity", "RankedFree", "RankedMax", "free_gpus", "holds_compute"]

PERCENT_SCALE = 100_000  # milli-percent of a whole GPU


@dataclass(frozen=True, slots=True)
class FreeGPUs:
    """A node's GPUs of one pool, each dimension sorted largest first.

    `vram` and `tflops` are the effective free amounts; `percent` is the largest compute
    percent (milli) each GPU can still take: `p` passes on a GPU iff `p <= percent`.
    """

    vram: tuple[int, ...]
    tflops: tuple[int, ...]
    percent: tuple[int, ...]


def _percent_free(gpu: GPUState, free_tflops: int) -> int:
    capacity = gpu.capacity_tflops
    if capacity <= 0:
        return -1  # a zero-capacity GPU fails the phase filter: it takes nothing
    return free_tflops * PERCENT_SCALE // capacity


def free_gpus(gpus: list[GPUState]) -> FreeGPUs:
    """The ranked free amounts of the given GPUs."""
    vram, tflops, percent = [], [], []
    for gpu in gpus:
        free_tflops = gpu.available_tflops - gpu.assumed_tflops
        vram.append(gpu.available_vram - gpu.assumed_vram)
        tflops.append(free_tflops)
        percent.append(_percent_free(gpu, free_tflops))
    return FreeGPUs(
        tuple(sorted(vram, reverse=True)),
        tuple(sorted(tflops, reverse=True)),
        tuple(sorted(percent, reverse=True)),
    )


def holds_compute(free: FreeGPUs, count: int, need: ResourceAmount) -> bool:
    """Whether `count` of the GPUs have the compute percent (or TFLOPs) asked free each."""
    if need.percent_milli:
        ranks, amount = free.percent, need.percent_milli
    elif need.tflops_milli:
        ranks, amount = free.tflops, need.tflops_milli
    else:
        return True
    return 0 < count <= len(ranks) and ranks[count - 1] >= amount


@dataclass(slots=True)
class RankedFree:
    """Per rank k asked about so far, (k+1-th largest free amount, node) of every node with
    more than k GPUs, sorted. A rank is built on its first question and kept from then on, so
    the ranks no request asks about cost nothing on a change."""

    by_rank: dict[int, list[tuple[int, str]]] = field(default_factory=dict)
    _free: dict[str, tuple[int, ...]] = field(default_factory=dict)

    def add(self, name: str, free: tuple[int, ...]) -> None:
        """Count a node's ranked free amounts."""
        self._free[name] = free
        size = len(free)
        for rank, entries in self.by_rank.items():
            if rank < size:
                bisect.insort(entries, (free[rank], name))

    def remove(self, name: str, free: tuple[int, ...]) -> None:
        """Forget a node (with the amounts it was added with)."""
        del self._free[name]
        size = len(free)
        for rank, entries in self.by_rank.items():
            if rank < size:
                del entries[bisect.bisect_left(entries, (free[rank], name))]

    def update(self, name: str, old: tuple[int, ...], new: tuple[int, ...]) -> None:
        """Move a node's ranks from `old` to `new`, whatever their lengths."""
        if len(old) != len(new):
            self.remove(name, old)
            self.add(name, new)
            return
        self._free[name] = new
        for rank, entries in self.by_rank.items():
            if rank < len(new) and old[rank] != new[rank]:
                del entries[bisect.bisect_left(entries, (old[rank], name))]
                bisect.insort(entries, (new[rank], name))

    def holding(self, count: int, amount: int) -> list[tuple[int, str]]:
        """(free, node) of the nodes with `count` GPUs of at least `amount` free each."""
        if count < 1:
            return []
        entries = self.ranked(count - 1)
        if amount <= 0:
            # Nothing to check: even GPUs over-committed by a capacity drop can take the pod.
            return entries
        if not entries or entries[-1][0] < amount:
            return []
        return entries[bisect.bisect_left(entries, (amount, "")) :]

    def ranked(self, rank: int) -> list[tuple[int, str]]:
        """(free, node) at `rank` of every node with more than `rank` GPUs, ascending (kept
        from its first question on; do not change it)."""
        entries = self.by_rank.get(rank)
        if entries is None:
            entries = self.by_rank[rank] = sorted(
                (free[rank], name) for name, free in self._free.items() if rank < len(free)
            )
        return entries


@dataclass(slots=True)
class RankedMax:
    """For every rank k asked about so far, the largest (k+1)-th free amount of any node:
    max-heaps whose stale entries are dropped when they reach the top (no sorted list to shift
    on every change). A rank is built on its first question."""

    _heaps: dict[int, list[tuple[int, str]]] = field(default_factory=dict)
    _current: dict[str, tuple[int, ...]] = field(default_factory=dict)

    def place(self, name: str, free: tuple[int, ...] | None) -> None:
        """Take a node's ranked amounts (None: forget the node)."""
        old = self._current.pop(name, ())
        if free is None:
            return
        self._current[name] = free
        size, known = len(free), len(old)
        grown = False
        for rank, heap in self._heaps.items():
            if rank < size and (rank >= known or old[rank] != free[rank]):
                heapq.heappush(heap, (-free[rank], name))
                grown = grown or len(heap) > 4 * len(self._current) + 64
        if grown:
            self._compact()

    def any_holding(self, count: int, amount: int) -> bool:
        """Whether some node has `count` GPUs with at least `amount` free each."""
        if count < 1:
            return False
        rank, current = count - 1, self._current
        heap = self._heaps.get(rank)
        if heap is None:
            heap = self._heaps[rank] = self._heap_of(rank)
        while heap:
            negative, name = heap[0]
            free = current.get(name)
            if free is not None and rank < len(free) and free[rank] == -negative:
                return amount <= 0 or -negative >= amount
            heapq.heappop(heap)
        return False

    def _heap_of(self, rank: int) -> list[tuple[int, str]]:
        heap = [(-free[rank], n) for n, free in self._current.items() if rank < len(free)]
        heapq.heapify(heap)
        return heap

    def _compact(self) -> None:
        for rank in self._heaps:
            self._heaps[rank] = self._heap_of(rank)


def _tflops(free: FreeGPUs) -> tuple[int, ...]:
    return free.tflops


def _percent(free: FreeGPUs) -> tuple[int, ...]:
    return free.percent


@dataclass(slots=True)
class PoolCapacity:
    """The largest ranked free TFLOPs and compute percent over every node of a pool (the VRAM
    is ranked per bucket by the node index).

    A change is only noted; each dimension takes the nodes' latest amounts when a request
    first asks about it, so a node that changes twice between requests is ranked once and a
    dimension no request asks about (compute percent, often) is never ranked.
    """

    tflops: RankedMax = field(default_factory=RankedMax)
    percent: RankedMax = field(default_factory=RankedMax)
    _pending: tuple[dict[str, FreeGPUs | None], ...] = field(default_factory=lambda: ({}, {}))

    def place(self, name: str, new: FreeGPUs | None) -> None:
        """Replace a node's amounts (None: the node is gone)."""
        for pending in self._pending:
            pending[name] = new

    def may_hold_compute(self, count: int, need: ResourceAmount) -> bool:
        """Whether some node may have `count` GPUs each with the compute asked free."""
        if need.percent_milli:
            return self._ranked(1).any_holding(count, need.percent_milli)
        return self._ranked(0).any_holding(count, need.tflops_milli)

    def _ranked(self, dimension: int) -> RankedMax:
        ranked = (self.tflops, self.percent)[dimension]
        pending = self._pending[dimension]
        if pending:
            pick = (_tflops, _percent)[dimension]
            for name, new in pending.items():
                ranked.place(name, pick(new) if new is not None else None)
            pending.clear()
        return ranked
