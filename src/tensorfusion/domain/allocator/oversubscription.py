"""Virtual capacity of a node from the pool's oversubscription settings (scheduling.md §6)."""

from __future__ import annotations

from dataclasses import dataclass

from tensorfusion.domain.allocation_request import AllocationRequest
from tensorfusion.domain.model.pool import Oversubscription as OversubscriptionModel
from tensorfusion.domain.quantities import format_bytes, format_milli

__all__ = [
    "OversubscriptionSettings",
    "effective_limit",
    "limits_over_virtual",
    "shared_effective_limit",
    "virtual_capacity",
]


_MODEL_FIELDS = OversubscriptionModel.model_fields


@dataclass(frozen=True, slots=True)
class OversubscriptionSettings:
    """`capacityConfig.oversubscription` of a pool (percent values); the defaults are the
    model's (`allocator.mapping.oversubscription_of` builds it from a GPUPool)."""

    tflops_oversell_ratio: int = _MODEL_FIELDS["tflops_oversell_ratio"].default
    vram_expand_to_host_mem: int = _MODEL_FIELDS["vram_expand_to_host_mem"].default
    vram_expand_to_host_disk: int = _MODEL_FIELDS["vram_expand_to_host_disk"].default


def virtual_capacity(
    total_tflops: int,
    total_vram: int,
    ram_bytes: int,
    disk_bytes: int,
    settings: OversubscriptionSettings | None,
) -> tuple[int, int]:
    """(virtual TFLOPs in milli, virtual VRAM in bytes) of a node."""
    if settings is None:
        return total_tflops, total_vram
    tflops = total_tflops * settings.tflops_oversell_ratio // 100
    vram = (
        total_vram
        + disk_bytes * settings.vram_expand_to_host_disk // 100
        + ram_bytes * settings.vram_expand_to_host_mem // 100
    )
    return tflops, vram


def limits_over_virtual(tflops: int, vram: int, virtual: tuple[int, int]) -> str | None:
    """Why a node's limits (TFLOPs milli, VRAM bytes) exceed its virtual capacity, or None."""
    if tflops > virtual[0]:
        return (
            f"limits tflops {format_milli(tflops)} would exceed virtual capacity "
            f"{format_milli(virtual[0])}"
        )
    if vram > virtual[1]:
        return (
            f"limits vram {format_bytes(vram)} would exceed virtual capacity "
            f"{format_bytes(virtual[1])}"
        )
    return None


def effective_limit(request: AllocationRequest, gpu_capacities: list[int]) -> tuple[int, int]:
    """(TFLOPs milli, VRAM bytes) an allocation counts against virtual capacity.

    Per GPU: the limit if non-zero, else the request, times count; a percent value is
    converted with the first of the allocation's GPU TFLOPs capacities.
    """
    first = gpu_capacities[0] if gpu_capacities else 0
    limit, req = request.limit, request.request
    if limit.tflops_milli or limit.percent_milli:
        tflops = limit.tflops_on(first)
    else:
        tflops = req.tflops_on(first)
    vram = limit.vram_bytes or req.vram_bytes
    return tflops * request.count, vram * request.count


def shared_effective_limit(capacities: list[tuple[int, int]]) -> tuple[int, int]:
    """A shared allocation counts the sum of its GPUs' capacities."""
    return sum(c[0] for c in capacities), sum(c[1] for c in capacities)
