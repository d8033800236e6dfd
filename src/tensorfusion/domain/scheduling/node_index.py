"""Nodes of each pool ordered by an upper bound of their GPU placement score.

The fast decision walks a pool's nodes from the highest bound down and stops once no remaining
node can beat the best combined score found, so a decision touches a handful of nodes instead
of all of them while choosing exactly what a full evaluation would choose. Each bucket also
knows, for every GPU count k, the largest "k-th most free VRAM" among its nodes, so a bucket
where no node has k GPUs with enough free memory is skipped whole, and each pool knows the
same for TFLOPs and compute percent over all its nodes, so a request that fits nowhere is
turned down without opening a bucket (`top_holding`).
"""

from __future__ import annotations

from collections.abc import Collection, Container, Iterator
from dataclasses import dataclass, field

from tensorfusion.domain.allocation_request import ResourceAmount
from tensorfusion.domain.allocator.allocator import Allocator
from tensorfusion.domain.allocator.change_feed import ChangeCursor
from tensorfusion.domain.allocator.records import NodeState
from tensorfusion.domain.scheduling.free_ranks import (
    FreeGPUs,
    PoolCapacity,
    RankedFree,
    free_gpus,
    holds_compute,
)
from tensorfusion.domain.scheduling.placement import (
    NodeTerms,
    PlacementWeights,
)
from tensorfusion.domain.scheduling.placement_modes import plugin_of

__all__ = ["NodeScoreIndex", "node_score_bound"]

_SCORES = 101
_MEMO_LIMIT = 512
"""Entries of one node's memo table before it is emptied."""
_CONSUMER = "node-index"


def node_score_bound(node: NodeState, terms: NodeTerms) -> tuple[int, bool]:
    """An upper bound of the node score (§7.3) of the node for any request, and whether it is
    the exact score for every request the node can take.

    When every GPU of the node has the same isolation state, isolation compatibility is all or
    nothing, so the node score is exactly the mean over all GPUs; otherwise the best GPU term
    bounds the mean over any subset.
    """
    gpus = node.gpus
    if not gpus:
        return 0, False
    scores = [terms.of(gpu) for gpu in gpus]
    first = gpus[0].isolation_state()
    if all(gpu.isolation_state() == first for gpu in gpus):
        return sum(scores) // len(scores), True
    return max(scores), False


@dataclass(slots=True)
class NodeEntry:
    """A node's bound, whether it is exact, and its free GPU amounts in the pool."""

    bound: int
    exact: bool
    free: FreeGPUs


@dataclass(slots=True)
class _Bucket:
    size: int = 0
    members: set[str] = field(default_factory=set)
    vram: RankedFree = field(default_factory=RankedFree)

    def add(self, name: str, free: tuple[int, ...]) -> None:
        self.size += 1
        self.members.add(name)
        self.vram.add(name, free)

    def remove(self, name: str, free: tuple[int, ...]) -> None:
        self.size -= 1
        self.members.discard(name)
        self.vram.remove(name, free)


@dataclass(slots=True)
class _PoolBuckets:
    use_available: bool
    terms: NodeTerms
    entries: dict[str, NodeEntry] = field(default_factory=dict)
    exact: set[str] = field(default_factory=set)
    buckets: list[_Bucket] = field(default_factory=lambda: [_Bucket() for _ in range(_SCORES)])
    capacity: PoolCapacity = field(default_factory=PoolCapacity)
    top: int = -1
    """The highest bound whose bucket holds a node (-1: none)."""

    def place(self, name: str, entry: NodeEntry | None) -> None:
        old = self.entries.pop(name, None)
        self.exact.discard(name)
        self.capacity.place(name, entry.free if entry else None)
        if old is not None and entry is not None and old.bound == entry.bound:
            # Same bucket: move only the ranks whose free VRAM changed.
            self.buckets[entry.bound].vram.update(name, old.free.vram, entry.free.vram)
        else:
            if old is not None:
                self.buckets[old.bound].remove(name, old.free.vram)
            if entry is not None:
                self.buckets[entry.bound].add(name, entry.free.vram)
                self.top = max(self.top, entry.bound)
            while self.top >= 0 and not self.buckets[self.top].size:
                self.top -= 1
        if entry is not None:
            self.entries[name] = entry
            if entry.exact:
                self.exact.add(name)


@dataclass(slots=True)
class NodeScoreIndex:
    """Per pool, node names bucketed by `node_score_bound`, kept in step with the allocator."""

    allocator: Allocator
    weights: PlacementWeights = field(default_factory=PlacementWeights)
    _pools: dict[str, _PoolBuckets] = field(default_factory=dict)
    _pool_of_node: dict[str, set[str]] = field(default_factory=dict)
    _cursor: ChangeCursor | None = None
    _memos: dict[str, dict[object, object]] = field(default_factory=dict)

    def sync(self) -> None:
        """Re-bucket the nodes the allocator changed since the last call."""
        allocator = self.allocator
        if self._cursor is None:
            self._cursor = allocator.changes(_CONSUMER, unique=True)
        cursor = self._cursor
        for pool, buckets in list(self._pools.items()):
            mode = allocator.pool(pool).placement_mode
            if buckets.use_available != plugin_of(mode).node_by_available:
                # The placement mode flipped the score direction: rebuild the pool's buckets.
                del self._pools[pool]
                for name, pools in self._pool_of_node.items():
                    if pool in pools:
                        pools.discard(pool)
                        self._refresh(name)
        for name in cursor.take_nodes():
            self._refresh(name)

    def ordered(
        self,
        pool: str,
        count: int,
        vram: int,
        every_bucket: bool = False,
        compute: ResourceAmount | None = None,
    ) -> Iterator[tuple[int, list[str]]]:
        """(bound, names) from the highest bound down: per bucket, the nodes that have `count`
        GPUs of the pool with at least `vram` bytes free each (a necessary condition), and
        with `compute` also the TFLOPs or compute percent it asks free on each.

        `every_bucket` also yields the non-empty buckets where no node qualifies (with no
        names), so a caller can name their nodes' reason.
        """
        buckets = self._pools.get(pool)
        if buckets is None:
            return
        entries = buckets.entries
        # `holds_compute` spelled out for the nodes already known to have `count` GPUs.
        percent = compute is not None and compute.percent_milli > 0
        amount = 0 if compute is None else compute.percent_milli or compute.tflops_milli
        rank = count - 1
        for bound in range(buckets.top, -1, -1):
            bucket = buckets.buckets[bound]
            if bucket.size:
                holding = bucket.vram.holding(count, vram)
                if amount <= 0:
                    names = [name for _, name in holding]
                elif percent:
                    names = [n for _, n in holding if entries[n].free.percent[rank] >= amount]
                else:
                    names = [n for _, n in holding if entries[n].free.tflops[rank] >= amount]
                if names or every_bucket:
                    yield bound, names

    def next_bound(self, pool: str, below: int, count: int, vram: int) -> int | None:
        """The highest bound under `below` of a bucket where some node has `count` GPUs of the
        pool with `vram` bytes free each (an upper bound of what `ordered` yields next)."""
        buckets = self._pools.get(pool)
        if buckets is None:
            return None
        if count < 1:
            return None
        rank = count - 1
        for bound in range(min(below - 1, buckets.top), -1, -1):
            bucket = buckets.buckets[bound]
            if bucket.size:
                entries = bucket.vram.ranked(rank)
                if entries and (vram <= 0 or entries[-1][0] >= vram):
                    return bound
        return None

    def ordered_among(
        self,
        pool: str,
        names: Collection[str],
        count: int,
        vram: int,
        compute: ResourceAmount | None = None,
    ) -> Iterator[tuple[int, list[str]]]:
        """`ordered` restricted to `names` (for a few names: no walk over the buckets)."""
        buckets = self._pools.get(pool)
        if buckets is None:
            return
        by_bound: dict[int, list[str]] = {}
        for name in sorted(names):
            entry = buckets.entries.get(name)
            if entry is None or len(entry.free.vram) < count or count < 1:
                continue
            if compute is not None and not holds_compute(entry.free, count, compute):
                continue
            if vram <= 0 or entry.free.vram[count - 1] >= vram:
                by_bound.setdefault(entry.bound, []).append(name)
        for bound in sorted(by_bound, reverse=True):
            yield bound, by_bound[bound]

    def top_holding(self, pool: str, count: int, need: ResourceAmount) -> int | None:
        """The highest bound of a bucket where some node has `count` GPUs with the VRAM asked
        free each, or None when no node of the pool may have `count` GPUs with the VRAM and
        the compute asked (the request fits nowhere, whatever else is checked)."""
        buckets = self._pools.get(pool)
        if buckets is None or not buckets.capacity.may_hold_compute(count, need):
            return None
        return self.next_bound(pool, _SCORES, count, need.vram_bytes)

    def members(self, pool: str) -> Container[str]:
        """Every node that has GPUs of the pool."""
        buckets = self._pools.get(pool)
        return {} if buckets is None else buckets.entries

    def bucket_members(self, pool: str, bound: int) -> set[str]:
        """The nodes of the pool whose bound is `bound`."""
        buckets = self._pools.get(pool)
        return set() if buckets is None else buckets.buckets[bound].members

    def exact_nodes(self, pool: str) -> Container[str]:
        """Nodes whose bound is their exact node score."""
        buckets = self._pools.get(pool)
        return set() if buckets is None else buckets.exact

    def node_memo(self, name: str) -> dict[object, object]:
        """A memo table for results that depend only on the node's allocator state (and on
        what the caller puts in the key): emptied when the node changes, as of `sync`."""
        memo = self._memos.get(name)
        if memo is None or len(memo) > _MEMO_LIMIT:
            memo = self._memos[name] = {}
        return memo

    def _buckets_for(self, pool: str) -> _PoolBuckets:
        buckets = self._pools.get(pool)
        if buckets is None:
            mode = self.allocator.pool(pool).placement_mode
            use_available = plugin_of(mode).node_by_available
            buckets = self._pools[pool] = _PoolBuckets(
                use_available, NodeTerms(use_available, self.weights)
            )
        return buckets

    def _refresh(self, name: str) -> None:
        self._memos.pop(name, None)
        node = self.allocator.nodes.get(name)
        pools = {g.pool for g in node.gpus} if node is not None else set()
        for stale in self._pool_of_node.get(name, set()) - pools:
            self._buckets_for(stale).place(name, None)
        self._pool_of_node[name] = pools
        if node is None:
            return
        for pool in pools:
            buckets = self._buckets_for(pool)
            bound, exact = node_score_bound(node, buckets.terms)
            entry = NodeEntry(bound, exact, free_gpus([g for g in node.gpus if g.pool == pool]))
            if buckets.entries.get(name) != entry:
                buckets.place(name, entry)
