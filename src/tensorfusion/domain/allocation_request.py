"""What one worker pod asks of the allocator (scheduling.md §2), in exact integer units."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tensorfusion.domain.annotation_values import (
    InvalidValueError,
    parse_percent_milli,
    parse_tflops_milli,
    parse_vram_bytes,
)
from tensorfusion.domain.quantities import format_bytes, format_milli
from tensorfusion.domain.vocabulary import IsolationMode, QoSLevel, TopologyMode, TopologySource

__all__ = [
    "AllocationRequest",
    "ResourceAmount",
    "TopologyOverrides",
    "percent_to_tflops_milli",
    "sm_percent",
]


@dataclass(frozen=True, slots=True)
class ResourceAmount:
    """Per-GPU TFLOPs (milli), compute percent (milli-percent, 100% = 100000) and VRAM (bytes).

    TFLOPs and percent are mutually exclusive; both zero means "no compute asked".
    """

    tflops_milli: int = 0
    percent_milli: int = 0
    vram_bytes: int = 0

    def is_zero(self) -> bool:
        """True when no component is set."""
        return not (self.tflops_milli or self.percent_milli or self.vram_bytes)

    def tflops_on(self, capacity_tflops_milli: int) -> int:
        """TFLOPs (milli) this amount takes on a GPU of the given capacity."""
        if self.percent_milli:
            return percent_to_tflops_milli(self.percent_milli, capacity_tflops_milli)
        return self.tflops_milli

    @classmethod
    def from_json(cls, value: object) -> ResourceAmount:
        """A CRD-style object (`tflops`, `compute`, `vram`); a missing or unreadable component
        is 0."""
        fields = value if isinstance(value, Mapping) else {}
        return cls(
            tflops_milli=_component(parse_tflops_milli, fields.get("tflops")),
            percent_milli=_component(parse_percent_milli, fields.get("compute")),
            vram_bytes=_component(parse_vram_bytes, fields.get("vram")),
        )

    def to_json(self) -> dict[str, str]:
        """CRD-style object: keys `tflops`, `compute`, `vram`, zero keys omitted."""
        out: dict[str, str] = {}
        if self.tflops_milli:
            out["tflops"] = format_milli(self.tflops_milli)
        if self.percent_milli:
            out["compute"] = format_milli(self.percent_milli)
        if self.vram_bytes:
            out["vram"] = format_bytes(self.vram_bytes)
        return out


def _component(parse: Callable[[str], int], value: Any) -> int:
    text = str(value) if isinstance(value, (str, int, float)) else ""
    if not text.strip():
        return 0
    try:
        return parse(text)
    except InvalidValueError:
        return 0


def percent_to_tflops_milli(percent_milli: int, capacity_tflops_milli: int) -> int:
    """`percent × capacity / 100`, rounded up to 0.001 TFLOPs (scheduling.md §2)."""
    return -((-percent_milli * capacity_tflops_milli) // 100_000)


def sm_percent(limit_tflops_milli: int, capacity_tflops_milli: int) -> int:
    """`clamp(ceil(limit / capacity × 100), 1, 100)`; 0 without a limit or a capacity."""
    if limit_tflops_milli <= 0 or capacity_tflops_milli <= 0:
        return 0
    percent = -(-limit_tflops_milli * 100 // capacity_tflops_milli)
    return min(max(percent, 1), 100)


@dataclass(frozen=True, slots=True)
class TopologyOverrides:
    """Per-pod overrides of GPUNetworkTopologyAware (None = plugin config)."""

    mode: TopologyMode | None = None
    max_tier: int | None = None
    source: TopologySource | None = None


@dataclass(frozen=True, slots=True)
class AllocationRequest:
    """The allocator's only input about a pod: read from its normalised annotations."""

    pool: str
    namespace: str
    pod_name: str
    pod_uid: str
    workload: str = ""
    count: int = 1
    isolation: IsolationMode = IsolationMode.SOFT
    qos: QoSLevel = QoSLevel.MEDIUM
    request: ResourceAmount = field(default_factory=ResourceAmount)
    limit: ResourceAmount = field(default_factory=ResourceAmount)
    gpu_indices: tuple[int, ...] = ()
    gpu_model: str | None = None
    vendor: str | None = None
    partition_template_id: str | None = None
    topology: TopologyOverrides = field(default_factory=TopologyOverrides)
    pod_index: int | None = None
    container_gpu_count: tuple[tuple[str, int], ...] = ()

    @property
    def key(self) -> str:
        """`namespace/name` of the pod."""
        return f"{self.namespace}/{self.pod_name}"
