"""One NVML sample of one GPU (metrics.md §3.1), for `NvmlProvider`.

Each query that the GPU or driver does not support gives 0; any other NVML error of a query is
recorded in the sample's `errors` (the agent reports itself Degraded) and gives 0 too. NVLink
throughput is the change of NVML's cumulative per-link data counters (KiB) since the previous
sample, summed over the GPU's active links: 0 on the first sample and without NVLink.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from tensorfusion.domain.devices.inventory import DeviceSample, ProcessMemory

__all__ = ["PROCESS_QUERIES", "NvlinkCounters", "sample_device"]

_KB_PER_KIB: Final = 1.024
# NVML value types → the member of the value union that holds the value.
_MEMBER: Final[dict[int, str]] = {
    0: "dVal",
    1: "uiVal",
    2: "ulVal",
    3: "ullVal",
    4: "sllVal",
    5: "siVal",
    6: "usVal",
}
PROCESS_QUERIES: Final = (
    "nvmlDeviceGetComputeRunningProcesses",
    "nvmlDeviceGetGraphicsRunningProcesses",
)


@dataclass(frozen=True, slots=True)
class NvlinkCounters:
    """NVML's cumulative NVLink data counters of one GPU at one time."""

    at_s: float
    rx_kib: float
    tx_kib: float


class _Measure:
    def __init__(self, nvml: Any, unsupported: Callable[[BaseException], bool]) -> None:
        self.nvml = nvml
        self.unsupported = unsupported
        self.errors: list[str] = []

    def __call__(self, default: Any, function: str, *args: Any) -> Any:
        call = getattr(self.nvml, function, None)
        if call is None:
            return default
        try:
            return call(*args)
        except self.nvml.NVMLError as exc:
            if not self.unsupported(exc):
                self.errors.append(f"{function}: {exc}")
            return default


def _field_number(value: Any) -> float | None:
    if int(value.nvmlReturn) != 0:
        return None
    member = _MEMBER.get(int(value.valueType))
    return None if member is None else float(getattr(value.value, member))


def _nvlink_totals(measure: _Measure, handle: Any, links: tuple[int, ...]) -> tuple[float, float]:
    nvml = measure.nvml
    tx_id = getattr(nvml, "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX", None)
    rx_id = getattr(nvml, "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX", None)
    if not links or tx_id is None or rx_id is None:
        return 0.0, 0.0
    ids = [(field, link) for link in links for field in (rx_id, tx_id)]
    values = measure(None, "nvmlDeviceGetFieldValues", handle, ids)
    if values is None:
        return 0.0, 0.0
    rx = tx = 0.0
    for (field, _), value in zip(ids, values, strict=False):
        number = _field_number(value) or 0.0
        if field == rx_id:
            rx += number
        else:
            tx += number
    return rx, tx


def _rate(now: NvlinkCounters, before: NvlinkCounters | None) -> tuple[float, float]:
    if before is None or now.at_s <= before.at_s:
        return 0.0, 0.0
    span = now.at_s - before.at_s
    rx = max(now.rx_kib - before.rx_kib, 0.0) * _KB_PER_KIB / span
    tx = max(now.tx_kib - before.tx_kib, 0.0) * _KB_PER_KIB / span
    return rx, tx


def _processes(measure: _Measure, handle: Any) -> tuple[ProcessMemory, ...]:
    memory: dict[int, int] = {}
    for function in PROCESS_QUERIES:
        for process in measure([], function, handle) or []:
            used = getattr(process, "usedGpuMemory", None) or 0
            pid = int(process.pid)
            memory[pid] = max(memory.get(pid, 0), int(used))
    return tuple(ProcessMemory(pid, memory[pid]) for pid in sorted(memory))


def sample_device(
    nvml: Any,
    unsupported: Callable[[BaseException], bool],
    handle: Any,
    uuid: str,
    links: tuple[int, ...],
    now_s: float,
    previous: NvlinkCounters | None,
) -> tuple[DeviceSample, NvlinkCounters | None]:
    """The sample of the GPU `handle`, and its NVLink counters now (None without NVLink);
    `unsupported` tells an NVML error that means "cannot tell" from a device error."""
    measure = _Measure(nvml, unsupported)
    utilization = measure(None, "nvmlDeviceGetUtilizationRates", handle)
    memory = measure(None, "nvmlDeviceGetMemoryInfo", handle)
    temperature = measure(0, "nvmlDeviceGetTemperature", handle, nvml.NVML_TEMPERATURE_GPU)
    power_mw = measure(0, "nvmlDeviceGetPowerUsage", handle)

    def clock(name: str) -> float:
        return float(measure(0, "nvmlDeviceGetClockInfo", handle, getattr(nvml, name)))

    def pcie(name: str) -> float:
        return float(measure(0, "nvmlDeviceGetPcieThroughput", handle, getattr(nvml, name)))

    counters: NvlinkCounters | None = None
    nvlink_rx = nvlink_tx = 0.0
    if links:
        rx_kib, tx_kib = _nvlink_totals(measure, handle, links)
        counters = NvlinkCounters(now_s, rx_kib, tx_kib)
        nvlink_rx, nvlink_tx = _rate(counters, previous)
    sample = DeviceSample(
        uuid=uuid,
        compute_percentage=float(utilization.gpu) if utilization is not None else 0.0,
        memory_used_bytes=int(memory.used) if memory is not None else 0,
        temperature_c=float(temperature),
        power_w=float(power_mw) / 1000.0,
        pcie_rx_kb_per_s=pcie("NVML_PCIE_UTIL_RX_BYTES"),
        pcie_tx_kb_per_s=pcie("NVML_PCIE_UTIL_TX_BYTES"),
        graphics_clock_mhz=clock("NVML_CLOCK_GRAPHICS"),
        sm_clock_mhz=clock("NVML_CLOCK_SM"),
        memory_clock_mhz=clock("NVML_CLOCK_MEM"),
        video_clock_mhz=clock("NVML_CLOCK_VIDEO"),
        nvlink_rx_kb_per_s=nvlink_rx,
        nvlink_tx_kb_per_s=nvlink_tx,
        processes=_processes(measure, handle),
        errors=tuple(measure.errors),
    )
    return sample, counters
