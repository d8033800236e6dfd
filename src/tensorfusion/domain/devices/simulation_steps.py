"""Usage over time in a simulated GPU file: a constant, or steps that change some fields.

A GPU's `usage` and each worker's entry under `workers` is either one mapping (constant from
the start) or a list of steps, each with `at` (seconds from the provider's start, a number or a
duration such as `30s`) and the fields that change then; the others keep their previous values,
which start at zero. `at` must increase from step to step. `simulation.py` documents the fields.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Final, Generic, TypeVar

from tensorfusion.domain.devices.document_fields import DocumentFields, join
from tensorfusion.domain.devices.inventory import LimiterCounters
from tensorfusion.domain.quantities import format_bytes

__all__ = [
    "GPU_FIELDS",
    "WORKER_FIELDS",
    "GpuLoad",
    "Step",
    "WorkerLoad",
    "counters_at",
    "load_at",
    "parse_steps",
]


@dataclass(frozen=True, slots=True)
class GpuLoad:
    """What a simulated GPU reports from one step on."""

    compute_percentage: float = 0.0
    memory_used_bytes: int = 0
    temperature_c: float = 0.0
    power_w: float = 0.0
    pcie_rx_kb_per_s: float = 0.0
    pcie_tx_kb_per_s: float = 0.0
    nvlink_rx_kb_per_s: float = 0.0
    nvlink_tx_kb_per_s: float = 0.0
    graphics_clock_mhz: float = 0.0
    sm_clock_mhz: float = 0.0
    memory_clock_mhz: float = 0.0
    video_clock_mhz: float = 0.0
    errors: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class WorkerLoad:
    """What one worker uses on one GPU from one step on, and its limiter event rates."""

    compute_percentage: float = 0.0
    memory_used_bytes: int = 0
    compute_throttled_per_s: float = 0.0
    vram_freezed_per_s: float = 0.0
    vram_resumed_per_s: float = 0.0


LoadT = TypeVar("LoadT", GpuLoad, WorkerLoad)


@dataclass(frozen=True, slots=True)
class Step(Generic[LoadT]):
    """From `at_s` seconds after the start until the next step, the load is `load`."""

    at_s: float
    load: LoadT


_PERCENT: Final = "percent"
_BYTES: Final = "bytes"
_NUMBER: Final = "number"
_CELSIUS: Final = "celsius"
_TEXTS: Final = "texts"

GPU_FIELDS: Final[dict[str, tuple[str, str]]] = {
    "compute": ("compute_percentage", _PERCENT),
    "memoryUsed": ("memory_used_bytes", _BYTES),
    "temperature": ("temperature_c", _CELSIUS),
    "power": ("power_w", _NUMBER),
    "pcieRx": ("pcie_rx_kb_per_s", _NUMBER),
    "pcieTx": ("pcie_tx_kb_per_s", _NUMBER),
    "nvlinkRx": ("nvlink_rx_kb_per_s", _NUMBER),
    "nvlinkTx": ("nvlink_tx_kb_per_s", _NUMBER),
    "graphicsClock": ("graphics_clock_mhz", _NUMBER),
    "smClock": ("sm_clock_mhz", _NUMBER),
    "memoryClock": ("memory_clock_mhz", _NUMBER),
    "videoClock": ("video_clock_mhz", _NUMBER),
    "errors": ("errors", _TEXTS),
}
"""Document key → (GpuLoad attribute, kind of value)."""

WORKER_FIELDS: Final[dict[str, tuple[str, str]]] = {
    "compute": ("compute_percentage", _PERCENT),
    "memoryUsed": ("memory_used_bytes", _BYTES),
    "computeThrottledPerSecond": ("compute_throttled_per_s", _NUMBER),
    "vramFreezedPerSecond": ("vram_freezed_per_s", _NUMBER),
    "vramResumedPerSecond": ("vram_resumed_per_s", _NUMBER),
}
"""Document key → (WorkerLoad attribute, kind of value)."""


def _value(doc: DocumentFields, path: str, kind: str, value: Any, vram_bytes: int) -> Any:
    if kind == _PERCENT:
        return doc.number(path, value, 0.0, 100.0)
    if kind == _CELSIUS:
        return doc.number(path, value, -273.0)
    if kind == _NUMBER:
        return doc.number(path, value)
    if kind == _BYTES:
        count = doc.byte_count(path, value)
        if count > vram_bytes:
            doc.fail(path, f"must be at most the GPU's vram ({format_bytes(vram_bytes)})", value)
        return count
    items = doc.sequence(path, value)
    return tuple(doc.text(join(path, i), item) for i, item in enumerate(items))


def _apply(
    doc: DocumentFields,
    path: str,
    entry: Mapping[str, Any],
    load: LoadT,
    fields: Mapping[str, tuple[str, str]],
    vram_bytes: int,
) -> LoadT:
    changes = {
        fields[key][0]: _value(doc, join(path, key), fields[key][1], value, vram_bytes)
        for key, value in entry.items()
        if key != "at"
    }
    return replace(load, **changes)


def parse_steps(
    doc: DocumentFields,
    path: str,
    value: Any,
    initial: LoadT,
    fields: Mapping[str, tuple[str, str]],
    vram_bytes: int,
) -> tuple[Step[LoadT], ...]:
    """A constant mapping (one step at 0) or a list of steps, with carried-over values."""
    if isinstance(value, Mapping):
        entry = doc.mapping(path, value, tuple(fields))
        return (Step(0.0, _apply(doc, path, entry, initial, fields, vram_bytes)),)
    if not isinstance(value, list):
        doc.fail(path, "must be a mapping (constant) or a list of steps with `at`", value)
    steps: list[Step[LoadT]] = []
    load = initial
    for i, item in enumerate(doc.sequence(path, value, non_empty=True)):
        where = join(path, i)
        entry = doc.mapping(where, item, ("at", *fields), required=("at",))
        at_s = doc.seconds(join(where, "at"), entry["at"])
        if steps and at_s <= steps[-1].at_s:
            doc.fail(
                join(where, "at"),
                f"must be later than the previous step's at ({steps[-1].at_s:g} s)",
                entry["at"],
            )
        load = _apply(doc, where, entry, load, fields, vram_bytes)
        steps.append(Step(at_s, load))
    return tuple(steps)


def load_at(steps: tuple[Step[LoadT], ...], elapsed_s: float, idle: LoadT) -> LoadT:
    """The load in force `elapsed_s` seconds after the start (`idle` before the first step)."""
    current = idle
    for step in steps:
        if step.at_s > elapsed_s:
            break
        current = step.load
    return current


def _integral(
    steps: tuple[Step[WorkerLoad], ...], elapsed_s: float, rate: Callable[[WorkerLoad], float]
) -> int:
    total = 0.0
    for i, step in enumerate(steps):
        end = steps[i + 1].at_s if i + 1 < len(steps) else math.inf
        span = min(end, elapsed_s) - step.at_s
        if span > 0:
            total += rate(step.load) * span
    return math.floor(total + 1e-9)


def counters_at(steps: tuple[Step[WorkerLoad], ...], elapsed_s: float) -> LimiterCounters:
    """Cumulative limiter events from the start to `elapsed_s`: each rate times its time."""
    return LimiterCounters(
        compute_throttled=_integral(steps, elapsed_s, lambda load: load.compute_throttled_per_s),
        vram_freezed=_integral(steps, elapsed_s, lambda load: load.vram_freezed_per_s),
        vram_resumed=_integral(steps, elapsed_s, lambda load: load.vram_resumed_per_s),
    )
