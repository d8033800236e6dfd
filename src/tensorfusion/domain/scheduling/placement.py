"""Placement scores of GPUs and nodes (scheduling.md §7.2-§7.4)."""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field

from tensorfusion.domain.allocator.gpu_state import GPUState
from tensorfusion.domain.vocabulary import GPUPhase

__all__ = [
    "NodeTerms",
    "PlacementWeights",
    "gpu_score",
    "node_term",
    "normalised_score",
    "score_gpu",
]


@dataclass(frozen=True, slots=True)
class PlacementWeights:
    """GPUResourcesFit weights (not renormalised)."""

    vram: float = 0.7
    tflops: float = 0.3


def normalised_score(vram_pct: float, tflops_pct: float, weights: PlacementWeights) -> int:
    """`clamp(roundHalfAwayFromZero(v × vramWeight + t × tflopsWeight), 0, 100)`."""
    raw = vram_pct * weights.vram + tflops_pct * weights.tflops
    rounded = math.floor(abs(raw) + 0.5)
    if raw < 0:
        rounded = -rounded
    return min(max(rounded, 0), 100)


def score_gpu(
    effective_tflops: int,
    capacity_tflops: int,
    effective_vram: int,
    capacity_vram: int,
    use_available: bool,
    weights: PlacementWeights,
) -> int:
    """S(g) from a GPU's effective available and capacity; 0 for a zero-capacity GPU."""
    if capacity_tflops <= 0 or capacity_vram <= 0:
        return 0
    avail_tflops = effective_tflops / capacity_tflops * 100
    avail_vram = effective_vram / capacity_vram * 100
    if use_available:
        return normalised_score(avail_vram, avail_tflops, weights)
    return normalised_score(100 - avail_vram, 100 - avail_tflops, weights)


_REMEMBERED = 65536
_remembered_score = functools.lru_cache(maxsize=_REMEMBERED)(score_gpu)


def gpu_score(gpu: GPUState, use_available: bool, weights: PlacementWeights) -> int:
    """S(g) of a GPU from its effective available figures (remembered: values repeat)."""
    return _remembered_score(
        gpu.available_tflops - gpu.assumed_tflops,
        gpu.capacity_tflops,
        gpu.available_vram - gpu.assumed_vram,
        gpu.capacity_vram,
        use_available,
        weights,
    )


@dataclass(slots=True)
class NodeTerms:
    """`node_term` of GPUs under one score direction and weights, remembered by the GPU's
    effective and capacity figures (the node index asks it on every change of a node)."""

    use_available: bool
    weights: PlacementWeights
    _known: dict[tuple[int, int, int, int], int] = field(default_factory=dict)

    def of(self, gpu: GPUState) -> int:
        """S(g, node) of the GPU, a quarter for a Pending GPU (§7.3)."""
        key = (
            gpu.available_tflops - gpu.assumed_tflops,
            gpu.capacity_tflops,
            gpu.available_vram - gpu.assumed_vram,
            gpu.capacity_vram,
        )
        score = self._known.get(key)
        if score is None:
            if len(self._known) >= _REMEMBERED:
                self._known.clear()
            score = self._known[key] = score_gpu(*key, self.use_available, self.weights)
        return score // 4 if gpu.phase is GPUPhase.PENDING else score


def node_term(gpu: GPUState, use_available: bool, weights: PlacementWeights) -> int:
    """A GPU's term in its node's score: S(g, node), a quarter for a Pending GPU (§7.3)."""
    score = gpu_score(gpu, use_available, weights)
    return score // 4 if gpu.phase is GPUPhase.PENDING else score
