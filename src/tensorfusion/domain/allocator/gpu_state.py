"""The allocator's in-memory record of one GPU (scheduling.md §3)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

from tensorfusion.domain.allocation_request import AllocationRequest
from tensorfusion.domain.quantities import format_bytes, format_milli
from tensorfusion.domain.topology import PeerLink
from tensorfusion.domain.vocabulary import GPUPhase, IsolationMode, IsolationPolicy

__all__ = [
    "LOCKABLE_MODES",
    "WHOLE_CARD_MODES",
    "GPUCapabilities",
    "GPUState",
    "RunningPod",
    "RunningWorkload",
    "resource_failure",
    "room_failure",
    "whole_card_failure",
]

TENSOR_FUSION_USER = "tensor-fusion"
WHOLE_CARD_MODES: Final = frozenset({IsolationMode.SHARED, IsolationMode.PARTITIONED})
"""Modes whose allocation takes the whole card (§5: shared; partitioned found at recovery)."""
LOCKABLE_MODES: Final = frozenset({IsolationMode.SHARED, IsolationMode.SOFT, IsolationMode.HARD})
"""Modes `activeIsolationMode` can hold (the GPU status model's enum)."""


@dataclass(frozen=True, slots=True)
class GPUCapabilities:
    """The `virtualization-capabilities` annotation; None = annotation absent (all supported)."""

    supports_soft: bool = True
    supports_hard: bool = True
    supports_partitioning: bool = True

    def supports(self, mode: IsolationMode) -> bool:
        """Whether the GPU can run pods of this isolation mode."""
        if mode is IsolationMode.SOFT:
            return self.supports_soft
        if mode is IsolationMode.HARD:
            return self.supports_hard
        if mode is IsolationMode.PARTITIONED:
            return self.supports_partitioning
        return True


@dataclass(frozen=True, slots=True)
class RunningPod:
    """One pod in a GPU's `runningApps[].pods`."""

    request: AllocationRequest

    def to_json(self) -> dict[str, object]:
        """The `runningApps[].pods[]` entry of GPU status."""
        r = self.request
        return {
            "name": r.pod_name,
            "namespace": r.namespace,
            "uid": r.pod_uid,
            "requests": r.request.to_json(),
            "limits": r.limit.to_json(),
            "qos": r.qos.value,
            "isolation": r.isolation.value,
        }


@dataclass(slots=True)
class RunningWorkload:
    """One workload's entry in a GPU's `runningApps`, keyed by (workload, namespace)."""

    name: str
    namespace: str
    pods: dict[str, RunningPod] = field(default_factory=dict)

    @property
    def count(self) -> int:
        """Number of pods of the workload on the GPU."""
        return len(self.pods)


@dataclass(slots=True)
class GPUState:
    """A GPU as the allocator sees it: informer-copied facts plus the fields it owns.

    Integer units: TFLOPs in milli, VRAM in bytes. `committed_*` is the sum of committed
    requests, `available_*` = capacity − committed clamped to [0, capacity] (kept in step by
    `settle_available`), `assumed_*` the sum of assumed requests; effective = available − assumed.
    Deriving `available` from the sums means a capacity change never loses track of what pods
    hold, clamped or not.
    """

    name: str
    node: str
    pool: str
    capacity_tflops: int
    capacity_vram: int
    phase: GPUPhase = GPUPhase.RUNNING
    used_by: str = TENSOR_FUSION_USER
    vendor: str = "NVIDIA"
    model: str = ""
    uuid: str = ""
    index: int | None = None
    numa_node: int = -1
    isolation_mode: str = ""
    isolation_policy: IsolationPolicy | None = None
    capabilities: GPUCapabilities | None = None
    peers: tuple[PeerLink, ...] = ()
    message: str = ""
    missing_since: str = ""
    """`tensor-fusion.ai/gpu-missing-since`: the device is gone; out of totals and placement."""
    available_tflops: int = 0
    available_vram: int = 0
    committed_tflops: int = 0
    committed_vram: int = 0
    assumed_tflops: int = 0
    assumed_vram: int = 0
    active_isolation_mode: str = ""
    dynamic_isolation_conflict: bool = False
    partitions: dict[str, str] = field(default_factory=dict)
    running_apps: dict[tuple[str, str], RunningWorkload] = field(default_factory=dict)
    holders: dict[str, IsolationMode] = field(default_factory=dict)
    whole_holders: int = 0

    @property
    def missing(self) -> bool:
        """Whether the node agent reported the device gone."""
        return bool(self.missing_since)

    @property
    def effective_tflops(self) -> int:
        """Available TFLOPs (milli) after assumed requests."""
        return self.available_tflops - self.assumed_tflops

    @property
    def effective_vram(self) -> int:
        """Available VRAM (bytes) after assumed requests."""
        return self.available_vram - self.assumed_vram

    def isolation_state(self) -> tuple[IsolationPolicy | None, str, str, bool]:
        """What isolation compatibility (§5.2) depends on."""
        return (
            self.isolation_policy,
            self.isolation_mode,
            self.active_isolation_mode,
            self.dynamic_isolation_conflict,
        )

    def is_idle(self) -> bool:
        """No pod holds the GPU, nothing is charged on it and no partitions are allocated."""
        return (
            not self.holders
            and self.effective_tflops == self.capacity_tflops
            and self.effective_vram == self.capacity_vram
            and not self.partitions
        )

    def settle_available(self) -> None:
        """`available` = capacity − committed, within [0, capacity]."""
        self.available_tflops = min(
            max(self.capacity_tflops - self.committed_tflops, 0), self.capacity_tflops
        )
        self.available_vram = min(
            max(self.capacity_vram - self.committed_vram, 0), self.capacity_vram
        )


def room_failure(
    gpu: GPUState, request: AllocationRequest, explain: bool
) -> tuple[bool, str] | None:
    """Why the GPU has no room for the request (§4 stages 5-6), or None: (whole-card stage,
    reason; the reason of a resource shortfall only with `explain`). The one capacity check,
    used by the filter and by `restore`."""
    whole = whole_card_failure(gpu, request)
    if whole is not None:
        return request.isolation in WHOLE_CARD_MODES, whole
    shortfall = resource_failure(gpu, request, explain)
    return None if shortfall is None else (False, shortfall)


def whole_card_failure(gpu: GPUState, request: AllocationRequest) -> str | None:
    """A whole-card request on a GPU that is not idle, or another on a GPU held whole."""
    if request.isolation in WHOLE_CARD_MODES:
        if not gpu.is_idle():
            return "GPU is not idle"
    elif gpu.whole_holders:
        return "GPU is held whole by a shared pod"
    return None


def resource_failure(gpu: GPUState, request: AllocationRequest, explain: bool) -> str | None:
    """Effective free TFLOPs or VRAM short of the request (the text only with `explain`)."""
    need = request.request
    need_tflops = (
        need.tflops_milli if not need.percent_milli else need.tflops_on(gpu.capacity_tflops)
    )
    eff_tflops = gpu.available_tflops - gpu.assumed_tflops
    if need_tflops and eff_tflops < need_tflops:
        return (
            f"available tflops {format_milli(eff_tflops)} < request {format_milli(need_tflops)}"
            if explain
            else ""
        )
    eff_vram = gpu.available_vram - gpu.assumed_vram
    if need.vram_bytes and eff_vram < need.vram_bytes:
        return (
            f"available vram {format_bytes(eff_vram)} < request {format_bytes(need.vram_bytes)}"
            if explain
            else ""
        )
    return None
