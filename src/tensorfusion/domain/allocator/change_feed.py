"""Which nodes and GPUs the allocator changed, read by each consumer at its own pace.

Every consumer (the node index, the GPU status write-back, the node-taint reconciler, the
simulator) subscribes once and gets a cursor of its own; taking the changes from one cursor
never hides them from another. A new cursor starts with everything the allocator holds, so a
late subscriber sees the whole state once. The feed holds cursors weakly: a consumer that is
gone stops collecting changes.
"""

from __future__ import annotations

import itertools
import weakref
from collections.abc import Iterable
from dataclasses import dataclass, field

__all__ = ["ChangeCursor", "ChangeFeed"]


_UNIQUE = itertools.count(1)


@dataclass(slots=True, weakref_slot=True)
class ChangeCursor:
    """The nodes and GPUs changed since this consumer last took them."""

    consumer: str
    _nodes: set[str] = field(default_factory=set)
    _gpus: set[str] = field(default_factory=set)

    def take_nodes(self) -> set[str]:
        """Node names changed since the last call (each at most once)."""
        nodes, self._nodes = self._nodes, set()
        return nodes

    def take_gpus(self) -> set[str]:
        """GPU names changed since the last call; a removed GPU is not listed."""
        gpus, self._gpus = self._gpus, set()
        return gpus

    def pending(self) -> bool:
        """Whether anything changed since the last take."""
        return bool(self._nodes or self._gpus)


@dataclass(slots=True)
class ChangeFeed:
    """Fans the allocator's changes out to one cursor per consumer."""

    _cursors: weakref.WeakValueDictionary[str, ChangeCursor] = field(
        default_factory=weakref.WeakValueDictionary
    )
    _targets: tuple[weakref.ref[ChangeCursor], ...] = ()
    """Weak references to the cursors, walked on every change (cheaper than the dictionary)."""

    def subscribe(
        self, consumer: str, nodes: Iterable[str], gpus: Iterable[str], *, unique: bool = False
    ) -> ChangeCursor:
        """The consumer's cursor while it lives; a new one starts with the given nodes and GPUs
        marked. `unique` gives a fresh cursor named after the consumer (one per instance)."""
        name = f"{consumer}#{next(_UNIQUE)}" if unique else consumer
        cursor = self._cursors.get(name)
        if cursor is None:
            cursor = ChangeCursor(name, set(nodes), set(gpus))
            self._cursors[name] = cursor
            self._targets = (*self._live_targets(), weakref.ref(cursor, self._forget))
        return cursor

    def node_changed(self, name: str) -> None:
        """Mark a node for every consumer."""
        for target in self._targets:
            cursor = target()
            if cursor is not None:
                cursor._nodes.add(name)

    def nodes_changed(self, names: Iterable[str]) -> None:
        """Mark several nodes for every consumer."""
        names = tuple(names)
        for target in self._targets:
            cursor = target()
            if cursor is not None:
                cursor._nodes.update(names)

    def gpu_changed(self, name: str) -> None:
        """Mark a GPU for every consumer."""
        for target in self._targets:
            cursor = target()
            if cursor is not None:
                cursor._gpus.add(name)

    def gpu_removed(self, name: str) -> None:
        """Forget a removed GPU in every cursor."""
        for target in self._targets:
            cursor = target()
            if cursor is not None:
                cursor._gpus.discard(name)

    def _live_targets(self) -> tuple[weakref.ref[ChangeCursor], ...]:
        return tuple(t for t in self._targets if t() is not None)

    def _forget(self, _: weakref.ref[ChangeCursor]) -> None:
        self._targets = self._live_targets()
