"""Placement modes (scheduling.md §7): how a pool ranks its nodes and GPUs, registered by name.

A mode says which way its node-level and GPU-level scores rank (the emptiest first, or the
fullest), and may bring its own algorithm (`PlacementAlgorithm`): it records each arrival
(`observe`) and picks among the feasible nodes itself (`choose`, and `decide_fast` for the
indexed path) instead of the best combined score. The built-in modes are registered in the
package's `__init__`.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from tensorfusion.domain.vocabulary import PlacementMode

if TYPE_CHECKING:
    from tensorfusion.domain.scheduling.filter_chain import NodeEvaluation
    from tensorfusion.domain.scheduling.node_index import NodeScoreIndex
    from tensorfusion.domain.scheduling.request_context import RequestContext
    from tensorfusion.domain.scheduling.scheduler_config import ScoreWeights

__all__ = [
    "SCORE_ORDERS",
    "CPURoom",
    "Choice",
    "NativeAdmits",
    "PlacementAlgorithm",
    "PlacementModePlugin",
    "plugin_of",
    "register",
]


@dataclass(frozen=True, slots=True)
class Choice:
    """A mode's own pick: the node, its GPUs, how they were chosen, the combined score and
    the mode's cost of the pick (lower is better)."""

    node: str
    gpus: tuple[str, ...]
    selection: str
    combined: int
    delta: int


class CPURoom(Protocol):
    """The pod's CPU request and the nodes' free CPU, from the native view."""

    def cpu_request(self) -> int:
        """The pod's CPU request in millicores."""

    def cpu_free(self, node: str) -> int | None:
        """The node's allocatable CPU less the requests bound to it (None: unknown node)."""


class NativeAdmits(CPURoom, Protocol):
    """The part of the native view a mode's own algorithm needs."""

    def admits(self, node: str) -> bool:
        """Whether every native filter passes on the node."""

    def fit(self, node: str) -> int:
        """NodeResourcesFit score 0..100 of the pod on the node."""


class PlacementAlgorithm(Protocol):
    """A mode's own way of choosing among the feasible nodes."""

    def observe(self, ctx: RequestContext, room: CPURoom | None) -> None:
        """Record a request's arrival (before it is decided)."""

    def choose(
        self,
        ctx: RequestContext,
        feasible: Sequence[tuple[NodeEvaluation, int]],
        weights: ScoreWeights,
        room: CPURoom | None,
    ) -> Choice | None:
        """The pick among feasible (evaluation, fit) pairs, or None when there are none."""

    def decide_fast(
        self,
        index: NodeScoreIndex,
        ctx: RequestContext,
        native: NativeAdmits,
        allowed: Collection[str] | None,
        weights: ScoreWeights,
    ) -> Choice | None:
        """The pick over the pool's indexed nodes (or `allowed`), without reasons."""


@dataclass(frozen=True, slots=True)
class PlacementModePlugin:
    """One placement mode: the direction of its two scores, and its own algorithm if any
    (without one, the best combined score wins)."""

    mode: PlacementMode
    node_by_available: bool
    """Whether the node-level score ranks by available (emptiest first)."""
    gpu_by_available: bool
    """Whether the GPU-level score ranks by available (emptiest first)."""
    algorithm: PlacementAlgorithm | None = None


SCORE_ORDERS: tuple[PlacementModePlugin, ...] = (
    PlacementModePlugin(
        PlacementMode.COMPACT_FIRST, node_by_available=False, gpu_by_available=False
    ),
    PlacementModePlugin(
        PlacementMode.LOW_LOAD_FIRST, node_by_available=True, gpu_by_available=True
    ),
    PlacementModePlugin(
        PlacementMode.NODE_COMPACT_GPU_LOW_LOAD, node_by_available=False, gpu_by_available=True
    ),
)
"""The modes of the reference (scheduling.md §7.2): score directions only."""

_PLUGINS: dict[PlacementMode, PlacementModePlugin] = {}


def register(plugin: PlacementModePlugin) -> None:
    """Make a mode available by its name (a second registration of a name is an error)."""
    if plugin.mode in _PLUGINS and _PLUGINS[plugin.mode] != plugin:
        raise ValueError(f"placement mode {plugin.mode} is registered twice")
    _PLUGINS[plugin.mode] = plugin


def plugin_of(mode: PlacementMode) -> PlacementModePlugin:
    """The registered mode of that name."""
    try:
        return _PLUGINS[mode]
    except KeyError:
        raise ValueError(f"placement mode {mode} is not registered") from None
