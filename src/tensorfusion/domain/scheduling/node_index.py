"""Nodes of each pool ordered by an upper bound of their GPU placement score.

The fast decision walks a pool's nodes from the highest bound down and stops once no remaining
node can beat the best combined score found, so a decision touches a handful of nodes instead
of all of them while choosing exactly what a full evaluation would choose. Each bucket also
knows, for every GPU count k, the largest "k-th most free VRAM" among its nodes, so a bucket
where no node has k GPUs with enough free memory is skipped whole.
"""

from __future__ import annotations

import bisect
from collections.abc import Container, Iterator, Mapping
from dataclasses import dataclass, field

from tensorfusion.domain.allocator.allocator import Allocator
from tensorfusion.domain.allocator.placement import (
    PlacementWeights,
    node_level_uses_available,
    score_gpu,
)
from tensorfusion.domain.allocator.records import NodeState
from tensorfusion.domain.vocabulary import GPUPhase

__all__ = ["NodeScoreIndex", "node_score_bound"]

_SCORES = 101


def node_score_bound(
    node: NodeState, use_available: bool, weights: PlacementWeights
) -> tuple[int, bool]:
    """An upper bound of the node score (§7.3) of the node for any request, and whether it is
    the exact score for every request the node can take.

    When every GPU of the node has the same isolation state, isolation compatibility is all or
    nothing, so the node score is exactly the mean over all GPUs; otherwise the best GPU term
    bounds the mean over any subset.
    """
    if not node.gpus:
        return 0, False
    terms = []
    states = set()
    for gpu in node.gpus:
        s = score_gpu(
            gpu.available_tflops - gpu.assumed_tflops,
            gpu.capacity_tflops,
            gpu.available_vram - gpu.assumed_vram,
            gpu.capacity_vram,
            use_available,
            weights,
        )
        terms.append(s // 4 if gpu.phase is GPUPhase.PENDING else s)
        states.add(
            (
                gpu.isolation_policy,
                gpu.isolation_mode,
                gpu.active_isolation_mode,
                gpu.dynamic_isolation_conflict,
            )
        )
    if len(states) == 1:
        return sum(terms) // len(terms), True
    return max(terms), False


def free_vram_by_rank(node: NodeState, pool: str) -> tuple[int, ...]:
    """Effective free VRAM of the node's GPUs of the pool, largest first."""
    return tuple(
        sorted(
            (g.available_vram - g.assumed_vram for g in node.gpus if g.pool == pool),
            reverse=True,
        )
    )


@dataclass(slots=True)
class NodeEntry:
    bound: int
    exact: bool
    free: tuple[int, ...]


@dataclass(slots=True)
class _Bucket:
    names: list[str] = field(default_factory=list)
    # free_by_rank[k] = sorted k-th-largest free VRAM of every node with more than k GPUs.
    free_by_rank: list[list[int]] = field(default_factory=list)

    def add(self, name: str, free: tuple[int, ...]) -> None:
        bisect.insort(self.names, name)
        while len(self.free_by_rank) < len(free):
            self.free_by_rank.append([])
        for rank, value in enumerate(free):
            bisect.insort(self.free_by_rank[rank], value)

    def remove(self, name: str, free: tuple[int, ...]) -> None:
        del self.names[bisect.bisect_left(self.names, name)]
        for rank, value in enumerate(free):
            values = self.free_by_rank[rank]
            del values[bisect.bisect_left(values, value)]

    def may_hold(self, count: int, vram: int) -> bool:
        """Whether some node here has `count` GPUs with at least `vram` free each."""
        if count > len(self.free_by_rank):
            return False
        values = self.free_by_rank[count - 1]
        return bool(values) and values[-1] >= vram


@dataclass(slots=True)
class _PoolBuckets:
    use_available: bool
    entries: dict[str, NodeEntry] = field(default_factory=dict)
    exact: set[str] = field(default_factory=set)
    buckets: list[_Bucket] = field(default_factory=lambda: [_Bucket() for _ in range(_SCORES)])

    def place(self, name: str, entry: NodeEntry | None) -> None:
        old = self.entries.pop(name, None)
        self.exact.discard(name)
        if old is not None:
            self.buckets[old.bound].remove(name, old.free)
        if entry is not None:
            self.entries[name] = entry
            if entry.exact:
                self.exact.add(name)
            self.buckets[entry.bound].add(name, entry.free)


@dataclass(slots=True)
class NodeScoreIndex:
    """Per pool, node names bucketed by `node_score_bound`, kept in step with the allocator."""

    allocator: Allocator
    weights: PlacementWeights = field(default_factory=PlacementWeights)
    _pools: dict[str, _PoolBuckets] = field(default_factory=dict)
    _pool_of_node: dict[str, set[str]] = field(default_factory=dict)

    def sync(self) -> None:
        """Re-bucket the nodes the allocator touched since the last call."""
        allocator = self.allocator
        for pool, buckets in list(self._pools.items()):
            mode = allocator.pool(pool).placement_mode
            if buckets.use_available != node_level_uses_available(mode):
                del self._pools[pool]
                self._pool_of_node.clear()
        if not self._pool_of_node:
            allocator.touched_nodes.update(allocator.nodes)
        touched = allocator.touched_nodes
        if not touched:
            return
        for name in touched:
            self._refresh(name)
        touched.clear()

    def ordered(self, pool: str, count: int, vram: int) -> Iterator[tuple[int, list[str]]]:
        """(bound, node names sorted), highest bound first, skipping buckets where no node has
        `count` GPUs of the pool with `vram` bytes free each."""
        buckets = self._pools.get(pool)
        if buckets is None:
            return
        for bound in range(_SCORES - 1, -1, -1):
            bucket = buckets.buckets[bound]
            if bucket.names and bucket.may_hold(count, vram):
                yield bound, bucket.names

    def entries(self, pool: str) -> Mapping[str, NodeEntry]:
        """Each node's bound and free VRAM per GPU of the pool."""
        buckets = self._pools.get(pool)
        return {} if buckets is None else buckets.entries

    def exact_nodes(self, pool: str) -> Container[str]:
        """Nodes whose bound is their exact node score."""
        buckets = self._pools.get(pool)
        return set() if buckets is None else buckets.exact

    def free_vram(self, pool: str, name: str) -> tuple[int, ...]:
        """The node's free VRAM per GPU of the pool, largest first."""
        buckets = self._pools.get(pool)
        entry = None if buckets is None else buckets.entries.get(name)
        return () if entry is None else entry.free

    def exact_score(self, pool: str, name: str) -> int | None:
        """The node's score when the bound is exact, else None."""
        buckets = self._pools.get(pool)
        entry = None if buckets is None else buckets.entries.get(name)
        return entry.bound if entry is not None and entry.exact else None

    def _buckets_for(self, pool: str) -> _PoolBuckets:
        buckets = self._pools.get(pool)
        if buckets is None:
            mode = self.allocator.pool(pool).placement_mode
            buckets = self._pools[pool] = _PoolBuckets(node_level_uses_available(mode))
        return buckets

    def _refresh(self, name: str) -> None:
        node = self.allocator.nodes.get(name)
        pools = {g.pool for g in node.gpus} if node is not None else set()
        for stale in self._pool_of_node.get(name, set()) - pools:
            self._buckets_for(stale).place(name, None)
        self._pool_of_node[name] = pools
        if node is None:
            return
        for pool in pools:
            buckets = self._buckets_for(pool)
            bound, exact = node_score_bound(node, buckets.use_available, self.weights)
            buckets.place(name, NodeEntry(bound, exact, free_vram_by_rank(node, pool)))
