"""Native pods of a trace: pods without the TensorFusion label, placed as kube-scheduler would.

A native pod takes CPU, memory and a pod slot (the native filters and NodeResourcesFit score of
`domain.scheduling.native`), and whole `nvidia.com/gpu` cards: a card is free for it when no
TensorFusion pod holds anything on it, and while the pod runs the card is `usedBy:
nvidia-device-plugin`, so the GPU allocator skips it. Among the nodes that pass, the highest
NodeResourcesFit score wins, ties going to the first node by name (kube-scheduler picks one of
the tied nodes at random; the simulator stays reproducible). In a FragmentationAware pool a
pod without cards first goes where taking its CPU raises the pool's expected fragmentation
least (a CPU-heavy pod on a node whose free GPUs then no class could use strands them), as the
openb experiment schedules every task with the policy under test.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from tensorfusion.domain.admission.dry_run import not_a_gpu_worker
from tensorfusion.domain.allocator.allocator import Allocator
from tensorfusion.domain.allocator.gpu_state import TENSOR_FUSION_USER
from tensorfusion.domain.quantities import QuantityError, parse_quantity
from tensorfusion.domain.scheduling.fragmentation import CPUChange
from tensorfusion.domain.scheduling.fragmentation_choice import CPUOnlyCost, cpu_only_cost
from tensorfusion.domain.scheduling.native.cluster_view import NativeCluster, PodNativeView
from tensorfusion.domain.scheduling.placement import PlacementWeights
from tensorfusion.domain.vocabulary import GPUPhase

__all__ = [
    "DEVICE_PLUGIN_USER",
    "GPU_RESOURCE",
    "NativePlacement",
    "NativePlacer",
    "gpu_request_problem",
    "is_native",
]

GPU_RESOURCE: Final = "nvidia.com/gpu"
DEVICE_PLUGIN_USER: Final = "nvidia-device-plugin"


def is_native(manifest: Mapping[str, Any]) -> bool:
    """Whether the pod is ordinary (admission would not act on it: no TensorFusion label)."""
    return not_a_gpu_worker(manifest) is not None


def _whole(value: Any) -> int | None:
    try:
        amount = parse_quantity(str(value)).value
    except QuantityError:
        return None
    if amount < 0 or amount != amount.to_integral_value():
        return None
    return int(amount)


def gpu_request_problem(manifest: Mapping[str, Any]) -> str | None:
    """What is wrong with the pod's `nvidia.com/gpu` requests and limits (None: nothing).

    Cards are whole (an integer >= 0), and a container that gives both must give equal values,
    as the API server requires of extended resources.
    """
    containers = (manifest.get("spec") or {}).get("containers") or []
    for i, container in enumerate(containers):
        resources = container.get("resources") or {} if isinstance(container, dict) else {}
        given: dict[str, int] = {}
        for part in ("requests", "limits"):
            values = resources.get(part) or {}
            if not isinstance(values, dict) or GPU_RESOURCE not in values:
                continue
            raw = values[GPU_RESOURCE]
            cards = _whole(raw)
            where = f"spec.containers[{i}].resources.{part}.{GPU_RESOURCE}"
            if cards is None:
                return (
                    f"{where}: invalid value {raw!r}: {GPU_RESOURCE} counts whole cards, "
                    "allowed values are integers >= 0"
                )
            given[part] = cards
        if len(given) == 2 and given["requests"] != given["limits"]:
            return (
                f"spec.containers[{i}].resources.requests.{GPU_RESOURCE}: invalid value "
                f"{given['requests']}: must equal the limit ({given['limits']})"
            )
    return None


_NO_COST: Final = CPUOnlyCost(0, 0)


@dataclass(frozen=True, slots=True)
class NativePlacement:
    """Where a native pod goes: its node and the cards it holds there."""

    node: str
    gpus: tuple[str, ...] = ()


@dataclass(slots=True)
class NativePlacer:
    """Chooses nodes for native pods and hands whole cards to the device plugin and back."""

    native: NativeCluster
    allocator: Allocator
    weights: PlacementWeights = field(default_factory=PlacementWeights)
    decisions: int = 0
    _held: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def place(self, uid: str, nodes: list[str] | None = None) -> NativePlacement | None:
        """Choose among `nodes` (None: every node) and take the cards; None: fits nowhere."""
        self.decisions += 1
        view = self.native.view(uid)
        cards = self.cards(uid)
        if not view.fits_somewhere():
            return None
        best: tuple[int, int, int, str] | None = None
        request = view.cpu_request()
        for node in self.native.node_names() if nodes is None else sorted(nodes):
            if not view.admits(node) or (cards and len(self._idle_cards(node)) < cards):
                continue
            cost = self._fragmentation(node, view, request, cards)
            key = (cost.delta, cost.units_per_core, -view.fit(node), node)
            if best is None or key < best:
                best = key
        if best is None:
            return None
        node = best[3]
        gpus = tuple(self._idle_cards(node)[:cards])
        self._set_user(gpus, DEVICE_PLUGIN_USER)
        self.native.bind(uid, node)
        self._held[uid] = gpus
        return NativePlacement(node, gpus)

    def release(self, uid: str) -> None:
        """The pod left: its requests leave the node and its cards return to TensorFusion."""
        self.native.unbind(uid)
        self._set_user(self._held.pop(uid, ()), TENSOR_FUSION_USER)

    def cards(self, uid: str) -> int:
        """The whole `nvidia.com/gpu` cards the compiled pod requests (limits stand for
        missing requests, init containers counted as kube-scheduler counts them)."""
        return self.native.pods[uid].resources.requests.get(GPU_RESOURCE)

    def explain(self, uid: str) -> str:
        """Why the pod fits nowhere, kube-scheduler style: `0/N nodes are available: ...`."""
        view: PodNativeView = self.native.view(uid)
        cards = self.cards(uid)
        reasons: Counter[str] = Counter()
        names = self.native.node_names()
        for node in names:
            rejection = view.rejection(node)
            if rejection is not None:
                reasons[rejection[1]] += 1
            elif cards and len(self._idle_cards(node)) < cards:
                reasons[f"fewer than {cards} idle {GPU_RESOURCE} cards"] += 1
        parts = ", ".join(f"{n} {reason}" for reason, n in sorted(reasons.items()))
        return f"0/{len(names)} nodes are available: {parts}."

    def _fragmentation(
        self, node: str, view: PodNativeView, request: int, cards: int
    ) -> CPUOnlyCost:
        """What a pod without cards costs a FragmentationAware pool on the node (nothing
        elsewhere: the default scheduler's choice)."""
        free = view.cpu_free(node)
        if cards or free is None:
            return _NO_COST
        cost = cpu_only_cost(self.allocator, node, CPUChange(free, request), self.weights)
        return _NO_COST if cost is None else cost

    def _idle_cards(self, node: str) -> list[str]:
        state = self.allocator.nodes.get(node)
        if state is None:
            return []
        idle = [
            g for g in state.gpus
            if g.used_by == TENSOR_FUSION_USER and g.phase is GPUPhase.RUNNING and g.is_idle()
        ]  # fmt: skip
        idle.sort(key=lambda g: (g.index if g.index is not None else -1, g.name))
        return [g.name for g in idle]

    def _set_user(self, gpus: tuple[str, ...], user: str) -> None:
        for name in gpus:
            known = self.allocator.gpus[name]
            self.allocator.upsert_gpu(dataclasses.replace(known, used_by=user))
