"""The distribution of request sizes seen so far in a pool, learned online from arrivals.

The `FragmentationAware` placement mode measures fragmentation against this distribution
(scheduling.md, "FragmentationAware"). A pod counts once, on its first decision: retries of a
waiting pod (same UID) do not count again. The last `window` arrivals are kept, so the mix
follows a changing workload with bounded memory. Scoring uses a snapshot that is refreshed
when the arrivals since the last snapshot reach 1/16 of it, so the per-snapshot memo tables of
`fragmentation.py` stay valid for many decisions; the snapshot depends only on the sequence of
arrivals, never on time.
"""

from __future__ import annotations

import bisect
from collections import deque
from dataclasses import dataclass, field
from typing import Final

from tensorfusion.domain.allocation_request import AllocationRequest, ResourceAmount
from tensorfusion.domain.allocator.gpu_state import WHOLE_CARD_MODES

__all__ = ["MixSnapshot", "NodeFragments", "RequestClass", "WorkloadMix", "cpu_class"]

WINDOW: Final = 10_000
"""Arrivals kept per pool."""
_REFRESH_DIVISOR: Final = 16
"""A snapshot is refreshed once the arrivals since it reach 1/16 of the arrivals in it."""


def cpu_class(cpu_milli: int) -> int:
    """A CPU request rounded down to a power of two of whole cores (0 below one core), so
    that requests of similar size share a class and a class never asks more than its pods."""
    cores = cpu_milli // 1000
    return 0 if cores < 1 else 1000 << (cores.bit_length() - 1)


@dataclass(frozen=True, slots=True)
class RequestClass:
    """What decides where a request fits: GPU count, per-GPU need, whole card, model, and the
    pod's CPU request (`cpu_class`)."""

    count: int
    need: ResourceAmount
    whole_card: bool = False
    gpu_model: str | None = None
    cpu_milli: int = 0

    @classmethod
    def of(cls, request: AllocationRequest, cpu_milli: int = 0) -> RequestClass:
        """The class of an allocation request whose pod asks `cpu_milli` of CPU."""
        return cls(
            count=request.count,
            need=request.request,
            whole_card=request.isolation in WHOLE_CARD_MODES,
            gpu_model=request.gpu_model,
            cpu_milli=cpu_class(cpu_milli),
        )


@dataclass(frozen=True, slots=True)
class NodeFragments:
    """A node's expected fragmentation for one GPU state, as a function of its free CPU:
    `roomy` when every class's CPU request fits, plus `extra[i]` when the free CPU is below
    `thresholds[i]` (the classes' CPU requests, ascending) and so below every later one.
    `free`: the state's free capacity in the measure's units."""

    free: int
    roomy: int
    thresholds: tuple[int, ...] = ()
    extra: tuple[int, ...] = (0,)

    def at(self, cpu_free: int | None) -> int:
        """The expected fragmentation with `cpu_free` millicores free (None: unknown, as
        if every class fitted)."""
        if cpu_free is None or not self.thresholds:
            return self.roomy
        return self.roomy + self.extra[bisect.bisect_right(self.thresholds, cpu_free)]


@dataclass(slots=True, eq=False)
class MixSnapshot:
    """Classes with their arrival counts (the unnormalised distribution) and memo tables
    valid for this snapshot only."""

    classes: tuple[RequestClass, ...]
    weights: tuple[int, ...]
    serial: int = 0
    """Tells snapshots of one mix apart (memo keys outside the snapshot)."""
    measure: tuple[float, float] | None = None
    """The weights of free VRAM and TFLOPs in the fragmentation measure (set on first use)."""
    gpu_memo: dict[tuple[object, ...], tuple[int, tuple[bool, ...]]] = field(default_factory=dict)
    node_memo: dict[tuple[tuple[object, ...], ...], NodeFragments] = field(default_factory=dict)

    def as_dict(self) -> dict[RequestClass, int]:
        """Class → count."""
        return dict(zip(self.classes, self.weights, strict=True))


@dataclass(slots=True)
class WorkloadMix:
    """One pool's arrivals: a sliding window of request classes, deduplicated by pod UID."""

    window: int = WINDOW
    _arrivals: deque[tuple[str, RequestClass]] = field(default_factory=deque)
    _seen: set[str] = field(default_factory=set)
    _counts: dict[RequestClass, int] = field(default_factory=dict)
    _since: int = 0
    _snapshot: MixSnapshot | None = None
    _snapshot_total: int = 0

    def observe(self, request: AllocationRequest, cpu_milli: int = 0) -> bool:
        """Count the request's pod (asking `cpu_milli` of CPU) unless it was already counted;
        whether it was new."""
        uid = request.pod_uid
        if uid in self._seen:
            return False
        kind = RequestClass.of(request, cpu_milli)
        self._arrivals.append((uid, kind))
        self._seen.add(uid)
        self._counts[kind] = self._counts.get(kind, 0) + 1
        if len(self._arrivals) > self.window:
            old_uid, old_kind = self._arrivals.popleft()
            self._seen.discard(old_uid)
            left = self._counts[old_kind] - 1
            if left:
                self._counts[old_kind] = left
            else:
                del self._counts[old_kind]
        self._since += 1
        return True

    @property
    def arrivals(self) -> int:
        """Arrivals in the window."""
        return len(self._arrivals)

    def snapshot(self) -> MixSnapshot:
        """The distribution used for scoring (refreshed as described in the module)."""
        if self._snapshot is None or self._since * _REFRESH_DIVISOR >= self._snapshot_total:
            ordered = sorted(self._counts.items(), key=lambda item: _class_order(item[0]))
            serial = self._snapshot.serial + 1 if self._snapshot is not None else 1
            self._snapshot = MixSnapshot(
                tuple(kind for kind, _ in ordered), tuple(n for _, n in ordered), serial
            )
            self._snapshot_total = sum(self._counts.values())
            self._since = 0
        return self._snapshot


def _class_order(kind: RequestClass) -> tuple[object, ...]:
    need = kind.need
    return (kind.count, need.tflops_milli, need.percent_milli, need.vram_bytes,
            kind.whole_card, kind.gpu_model or "", kind.cpu_milli)  # fmt: skip
