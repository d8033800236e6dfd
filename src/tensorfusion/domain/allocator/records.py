"""Allocation records and per-node allocator state (scheduling.md §3, §12)."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from tensorfusion.domain.allocation_request import AllocationRequest
from tensorfusion.domain.allocator.gpu_state import GPUState
from tensorfusion.domain.allocator.quota import QuotaAmounts

__all__ = [
    "RECOVERY_INCONSISTENT_REASON",
    "AllocationRecord",
    "NodeState",
    "RecordState",
    "RestoreOutcome",
]


class RecordState(StrEnum):
    """Whether an allocation was made by `filter` (assumed) or durably bound (committed)."""

    ASSUMED = "assumed"
    COMMITTED = "committed"


@dataclass(slots=True)
class AllocationRecord:
    """One pod's GPUs and what they were charged."""

    request: AllocationRequest
    node: str
    gpus: tuple[str, ...]
    state: RecordState
    since: float
    expires_at: float | None
    charged: tuple[tuple[int, int], ...]
    quota: QuotaAmounts
    effective_limit: tuple[int, int]
    pending: bool = True

    @property
    def uid(self) -> str:
        """The pod UID that keys the record."""
        return self.request.pod_uid


@dataclass(slots=True)
class NodeState:
    """A node's GPUs, workers and host facts as the allocator tracks them."""

    name: str
    gpus: list[GPUState] = field(default_factory=list)
    missing_gpus: list[GPUState] = field(default_factory=list)
    """GPUs marked missing: out of totals and placement, their allocations still held."""
    committed_workers: set[str] = field(default_factory=set)
    assumed_workers: set[str] = field(default_factory=set)
    pending_indices: dict[int, str] = field(default_factory=dict)
    hypervisor_index0: int | None = None
    ram_bytes: int = 0
    disk_bytes: int = 0
    limit_tflops: int = 0
    limit_vram: int = 0
    committed_limit_tflops: int = 0
    committed_limit_vram: int = 0

    @property
    def workers(self) -> int:
        """Committed plus assumed worker pods."""
        return len(self.committed_workers) + len(self.assumed_workers)

    def total_capacity(self) -> tuple[int, int]:
        """Sum of the capacities of the node's GPUs (TFLOPs milli, VRAM bytes)."""
        return (
            sum(g.capacity_tflops for g in self.gpus),
            sum(g.capacity_vram for g in self.gpus),
        )


RECOVERY_INCONSISTENT_REASON = "GPUAllocationInconsistent"
"""Event reason for a pod whose `gpu-ids` name GPUs that are unknown or on another node."""


@dataclass(frozen=True, slots=True)
class RestoreOutcome:
    """A record rebuilt at recovery and the `gpu-ids` entries it had to skip."""

    record: AllocationRecord
    unknown_gpus: tuple[str, ...] = ()
    elsewhere_gpus: tuple[str, ...] = ()

    @property
    def consistent(self) -> bool:
        """Whether every GPU of `gpu-ids` was found on the pod's node."""
        return not (self.unknown_gpus or self.elsewhere_gpus)

    def message(self) -> str | None:
        """The Event message for an inconsistent record; None when consistent."""
        if self.consistent:
            return None
        parts = []
        if self.unknown_gpus:
            parts.append(f"unknown GPUs {', '.join(self.unknown_gpus)}")
        if self.elsewhere_gpus:
            parts.append(f"GPUs of another node {', '.join(self.elsewhere_gpus)} (kept charged)")
        record = self.record
        return (
            f"pod {record.request.key} on node {record.node}: gpu-ids names {'; '.join(parts)}; "
            f"the pod holds {len(record.gpus)} of {record.request.count} GPUs and its full "
            "quota charge"
        )
