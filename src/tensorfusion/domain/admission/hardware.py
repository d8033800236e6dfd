"""GPU model, vendor and dedicated GPUs of a TF pod (admission.md §4 step 11)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from tensorfusion.domain.admission.facts import InvalidObject
from tensorfusion.domain.allocation_request import ResourceAmount
from tensorfusion.domain.annotation_errors import Problem, invalid_value
from tensorfusion.domain.annotations import Keys
from tensorfusion.domain.model import GPU, GPUCapacity
from tensorfusion.domain.vocabulary import IsolationMode

__all__ = [
    "SOFT_UNSUPPORTED_VENDORS",
    "dedicated_gpu_capacity",
    "max_capacity_by_model",
    "skipped_gpu_warnings",
    "soft_isolation_problem",
]

# Vendors whose soft limiter is not shipped (compared case-insensitively).
SOFT_UNSUPPORTED_VENDORS: Final = frozenset({"amd", "hygon", "metax"})


def soft_isolation_problem(
    isolation: IsolationMode, vendor: str | None, keys: Keys
) -> Problem | None:
    """`soft` with AMD, Hygon or MetaX is denied; empty or other vendors pass."""
    if isolation is not IsolationMode.SOFT or not vendor:
        return None
    if vendor.lower() not in SOFT_UNSUPPORTED_VENDORS:
        return None
    return invalid_value(
        keys.isolation,
        isolation.value,
        f'soft isolation is not supported for vendor "{vendor}" (use shared or hard)',
    )


def _capacity(gpu: GPU) -> ResourceAmount:
    capacity = gpu.status.capacity or GPUCapacity()
    tflops, vram = capacity.tflops, capacity.vram
    return ResourceAmount(
        tflops_milli=0 if tflops is None else tflops.milli(),
        vram_bytes=0 if vram is None else vram.ceil(),
    )


def max_capacity_by_model(gpus: Iterable[GPU]) -> dict[str, ResourceAmount]:
    """Per `status.gpuModel`, the largest capacity (by TFLOPs, then VRAM) among GPU objects."""
    best: dict[str, ResourceAmount] = {}
    for gpu in gpus:
        model = gpu.status.gpu_model
        capacity = _capacity(gpu)
        if not model:
            continue
        current = best.get(model)
        key = (capacity.tflops_milli, capacity.vram_bytes)
        if current is None or key > (current.tflops_milli, current.vram_bytes):
            best[model] = capacity
    return best


def dedicated_gpu_capacity(
    model: str | None, gpus: Iterable[GPU], keys: Keys
) -> tuple[ResourceAmount | None, Problem | None]:
    """`dedicated-gpu="true"`: the largest capacity of the model; a problem without one."""
    if not model:
        return None, invalid_value(
            keys.dedicated_gpu, "true", f"requires {keys.gpu_model} (or the profile's gpuModel)"
        )
    capacity = max_capacity_by_model(gpus).get(model)
    if capacity is None:
        return None, invalid_value(
            keys.gpu_model, model, f"no GPU of this model exists (required by {keys.dedicated_gpu})"
        )
    return capacity, None


def skipped_gpu_warnings(
    model: str | None, invalid: Iterable[InvalidObject], keys: Keys
) -> list[str]:
    """A warning per invalid GPU object of the model (or of an unreadable model), left out of
    the `dedicated-gpu` capacity lookup."""
    if not model:
        return []
    return [
        f'{keys.dedicated_gpu}: GPU object left out of the capacity of model "{model}": '
        f"{gpu.details}"
        for gpu in invalid
        if gpu.gpu_model in (None, model)
    ]
