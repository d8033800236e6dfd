"""Expected GPU fragmentation of a node against a request mix (after Weng et al., ATC 2023).

The fragmentation of a node for one request class is the unallocated GPU capacity of the
node that a request of that class could not use: all of it when the class cannot be placed
on the node at all (fewer than `count` GPUs can take its per-GPU share), otherwise the free
capacity of the GPUs that cannot take the share. The expected fragmentation weights each class
by its arrival count. A class whose CPU request exceeds the node's free CPU cannot be placed
there either, so all the node's free GPU capacity counts for it. Free capacity of a GPU is one
number in micro-GPUs: the placement weights' mix of its free TFLOPs and free VRAM fractions,
so TFLOPs, compute-percent and VRAM requests are all measured on the same scale. Integers
throughout: equal states compare equal.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Final

from tensorfusion.domain.allocation_request import ResourceAmount
from tensorfusion.domain.allocator.gpu_state import GPUState
from tensorfusion.domain.allocator.workload_mix import MixSnapshot, NodeFragments
from tensorfusion.domain.scheduling.gpu_filters import phase_failure
from tensorfusion.domain.scheduling.placement import PlacementWeights

__all__ = [
    "CPUChange",
    "GPUKey",
    "after_placement",
    "gpu_key",
    "measure_weights",
    "node_fragmentation",
    "node_fragments",
    "placement_delta",
]

UNIT: Final = 1_000_000
"""Free capacity of one whole GPU."""
_MEMO_LIMIT: Final = 200_000

GPUKey = tuple[int, int, int, int, str, bool, bool]
"""(free TFLOPs milli, free VRAM bytes, capacity TFLOPs, capacity VRAM, model, open, idle):
everything the fragmentation of a GPU depends on. `open`: it can take a pod at all."""


def gpu_key(gpu: GPUState) -> GPUKey:
    """A GPU's fragmentation state from its effective available figures."""
    is_open = gpu.whole_holders == 0 and phase_failure(gpu) is None
    return (
        max(gpu.available_tflops - gpu.assumed_tflops, 0),
        max(gpu.available_vram - gpu.assumed_vram, 0),
        gpu.capacity_tflops,
        gpu.capacity_vram,
        gpu.model,
        is_open,
        not gpu.holders,
    )


def after_placement(key: GPUKey, need: ResourceAmount, whole_card: bool) -> GPUKey:
    """The GPU's state once a pod with this per-GPU need is placed on it."""
    free_t, free_v, cap_t, cap_v, model, is_open, _ = key
    if whole_card:
        return (0, 0, cap_t, cap_v, model, False, False)
    free_t = max(free_t - need.tflops_on(cap_t), 0)
    free_v = max(free_v - need.vram_bytes, 0)
    return (free_t, free_v, cap_t, cap_v, model, is_open, False)


def _free_units(key: GPUKey, weights: PlacementWeights) -> int:
    """The GPU's free capacity in micro-GPUs (0 when it cannot take a pod at all)."""
    free_t, free_v, cap_t, cap_v, _, is_open, _ = key
    total = weights.tflops + weights.vram
    if not is_open or cap_t <= 0 or cap_v <= 0 or total <= 0:
        return 0  # nobody can use it: the same for every placement, left out
    share = (weights.tflops * free_t / cap_t + weights.vram * free_v / cap_v) / total
    return round(share * UNIT)


def measure_weights(mix: MixSnapshot, weights: PlacementWeights) -> PlacementWeights:
    """The placement weights restricted to the dimensions the mix asks for: free VRAM that
    no class requests (compute-percent pods ask none) is no capacity anyone is short of."""
    found = mix.measure
    if found is None:
        compute = any(c.whole_card or c.need.tflops_milli or c.need.percent_milli
                      for c in mix.classes)  # fmt: skip
        vram = any(c.whole_card or c.need.vram_bytes for c in mix.classes)
        if compute == vram:
            found = (weights.vram, weights.tflops)
        else:
            found = (weights.vram if vram else 0.0, weights.tflops if compute else 0.0)
        mix.measure = found
    return PlacementWeights(vram=found[0], tflops=found[1])


def _takes(key: GPUKey, need: ResourceAmount, whole_card: bool, model: str | None) -> bool:
    free_t, free_v, cap_t, _, gpu_model, is_open, idle = key
    if not is_open or (model is not None and model != gpu_model):
        return False
    if whole_card:
        return idle
    tflops = need.tflops_on(cap_t)
    return not (tflops and free_t < tflops) and not (need.vram_bytes and free_v < need.vram_bytes)


def _profile(
    key: GPUKey, mix: MixSnapshot, weights: PlacementWeights
) -> tuple[int, tuple[bool, ...]]:
    """(free units, which classes can take their per-GPU share on it), memoised."""
    memo = mix.gpu_memo
    found = memo.get(key)
    if found is None:
        if len(memo) > _MEMO_LIMIT:
            memo.clear()
        takes = tuple(_takes(key, c.need, c.whole_card, c.gpu_model) for c in mix.classes)
        found = memo[key] = (_free_units(key, measure_weights(mix, weights)), takes)
    return found


def node_fragmentation(
    keys: Sequence[GPUKey],
    mix: MixSnapshot,
    weights: PlacementWeights,
    cpu_free: int | None = None,
) -> int:
    """Σ over classes of count × the node's free units that class could not use, all of them
    for a class whose CPU request exceeds `cpu_free` (None: CPU not considered)."""
    return node_fragments(keys, mix, weights).at(cpu_free)


def node_fragments(
    keys: Sequence[GPUKey], mix: MixSnapshot, weights: PlacementWeights
) -> NodeFragments:
    """The node's expected fragmentation for its GPU state at any free CPU, memoised."""
    state = tuple(sorted(keys))
    memo = mix.node_memo
    found = memo.get(state)
    if found is not None:
        return found
    profiles = [_profile(k, mix, weights) for k in state]
    free_total = sum(units for units, _ in profiles)
    roomy = 0
    stranded: dict[int, int] = {}  # class CPU request → what its classes add when it fails
    for position, (kind, weight) in enumerate(zip(mix.classes, mix.weights, strict=True)):
        usable = 0
        hosts = 0
        for units, takes in profiles:
            if takes[position]:
                usable += units
                hosts += 1
        unusable = free_total if hosts < kind.count else free_total - usable
        roomy += weight * unusable
        if kind.cpu_milli > 0:
            stranded[kind.cpu_milli] = stranded.get(kind.cpu_milli, 0) + weight * (
                free_total - unusable
            )
    thresholds = tuple(sorted(stranded))
    extra = [0] * (len(thresholds) + 1)
    for i in range(len(thresholds) - 1, -1, -1):
        extra[i] = extra[i + 1] + stranded[thresholds[i]]
    found = NodeFragments(free_total, roomy, thresholds, tuple(extra))
    if len(memo) > _MEMO_LIMIT:
        memo.clear()
    memo[state] = found
    return found


def placement_delta(
    keys: Sequence[GPUKey],
    chosen: Iterable[int],
    need: ResourceAmount,
    whole_card: bool,
    mix: MixSnapshot,
    weights: PlacementWeights,
    cpu: CPUChange | None = None,
) -> int:
    """Increase of the node's expected fragmentation when the GPUs at positions `chosen`
    each take `need` (and the pod takes `cpu.request` of the node's `cpu.free` CPU)."""
    after = list(keys)
    for position in chosen:
        after[position] = after_placement(after[position], need, whole_card)
    before_cpu = after_cpu = None
    if cpu is not None:
        before_cpu, after_cpu = cpu.free, cpu.free - cpu.request
    return node_fragmentation(after, mix, weights, after_cpu) - node_fragmentation(
        keys, mix, weights, before_cpu
    )


@dataclass(frozen=True, slots=True)
class CPUChange:
    """The node's free CPU before a placement and what the pod takes of it (millicores)."""

    free: int
    request: int
