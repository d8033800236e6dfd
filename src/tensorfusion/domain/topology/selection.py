"""Helpers both evaluators share: candidate ranking, compact groups, intra scores, count vectors."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Final

from tensorfusion.domain.topology.vocabulary import TopologyGPU

__all__ = [
    "MAX_AFFINITY",
    "compact_intra",
    "count_vectors",
    "placement_rank",
    "sorted_names",
    "tightest",
]

MAX_AFFINITY: Final = 10
"""Affinity of one pair at the best tier; intra normalises pair affinities by it."""


def placement_rank(gpu: TopologyGPU) -> tuple[int, str]:
    """Best placement score first, then name."""
    return (-gpu.placement_score, gpu.name)


def compact_intra(size: int, count: int) -> int:
    """Intra of a plan inside one domain or cluster: 5 points per spare GPU, floor 50."""
    return max(50, 100 - 5 * (size - count))


def tightest(groups: Sequence[Sequence[TopologyGPU]], count: int) -> tuple[list[TopologyGPU], int]:
    """Top `count` GPUs of the smallest group that holds count, and that group's size.

    Ties between groups of that size: higher placement sum of the top GPUs, then their names.
    """
    smallest = min(len(g) for g in groups)
    best: list[TopologyGPU] = []
    best_key: tuple[int, tuple[str, ...]] | None = None
    for group in groups:
        if len(group) != smallest:
            continue
        chosen = sorted(group, key=placement_rank)[:count]
        key = (-sum(g.placement_score for g in chosen), sorted_names(chosen))
        if best_key is None or key < best_key:
            best, best_key = chosen, key
    return best, smallest


def sorted_names(gpus: Sequence[TopologyGPU]) -> tuple[str, ...]:
    """Names of the GPUs, sorted."""
    return tuple(sorted(g.name for g in gpus))


def count_vectors(sizes: Sequence[int], total: int) -> Iterator[list[int]]:
    """Every way to take `total` GPUs from groups of the given sizes (one reused list)."""
    last = len(sizes) - 1
    room = [0] * (last + 2)
    for i in range(last, -1, -1):
        room[i] = room[i + 1] + sizes[i]
    vector = [0] * (last + 1)

    def fill(i: int, left: int) -> Iterator[list[int]]:
        if i == last:
            vector[i] = left
            yield vector
            return
        for taken in range(max(0, left - room[i + 1]), min(sizes[i], left) + 1):
            vector[i] = taken
            yield from fill(i + 1, left - taken)

    if room[0] >= total:
        yield from fill(0, total)
