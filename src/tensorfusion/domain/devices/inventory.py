"""The device inventory of one node (deployment.md §9.1) and the interface every GPU provider
implements.

`DeviceProvider.discover()` returns the node's `Inventory` (run at start, every
`--discovery-interval` and on demand); `sample()` returns one `DeviceSample` per GPU for the
metrics tables (metrics.md §3.1, §3.2). A provider raises `ProviderError` with a message a user
can act on (never a traceback): a malformed simulation file names the file, the field and the
value; NVML missing or failing says so.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol

__all__ = [
    "ComputeMode",
    "ComputeModeControl",
    "DeviceInfo",
    "DeviceProvider",
    "DeviceSample",
    "HostFacts",
    "Inventory",
    "LimiterCounters",
    "NVLinkPeer",
    "ProcessMemory",
    "ProviderError",
]


class ProviderError(RuntimeError):
    """The provider cannot discover or sample; the message names what and why."""


@dataclass(frozen=True, slots=True)
class NVLinkPeer:
    """One active NVLink connection to a peer GPU."""

    peer_pci_bus_id: str
    links: int
    version: int
    bandwidth_mb_per_s: int


@dataclass(frozen=True, slots=True)
class DeviceInfo:
    """One GPU as discovered (`uuid` in the device's native case; the object name is lower)."""

    uuid: str
    index: int
    model: str
    vendor: str
    vram_bytes: int
    """Total memory, rounded down to a whole MiB."""
    numa_node: int = -1
    pci_bus_id: str = ""
    nvlinks: tuple[NVLinkPeer, ...] = ()


@dataclass(frozen=True, slots=True)
class HostFacts:
    """Host facts for `GPUNode.status.nodeInfo`."""

    host_ram_bytes: int = 0
    data_disk_bytes: int = 0


@dataclass(frozen=True, slots=True)
class Inventory:
    """What one discovery found."""

    devices: tuple[DeviceInfo, ...] = ()
    node: HostFacts = field(default_factory=HostFacts)


@dataclass(frozen=True, slots=True)
class ProcessMemory:
    """VRAM used by one process on one GPU."""

    pid: int
    memory_bytes: int


@dataclass(frozen=True, slots=True)
class LimiterCounters:
    """Cumulative limiter events of one worker on one GPU (the simulated provider only)."""

    compute_throttled: int = 0
    vram_freezed: int = 0
    vram_resumed: int = 0


@dataclass(frozen=True, slots=True)
class DeviceSample:
    """One sample of one GPU (metrics.md §3.1); `workers` maps a worker pod name to its share
    of the GPU in percent and its VRAM in bytes, `limiter` its counters."""

    uuid: str
    compute_percentage: float
    memory_used_bytes: int
    temperature_c: float = 0.0
    power_w: float = 0.0
    pcie_rx_kb_per_s: float = 0.0
    pcie_tx_kb_per_s: float = 0.0
    graphics_clock_mhz: float = 0.0
    sm_clock_mhz: float = 0.0
    memory_clock_mhz: float = 0.0
    video_clock_mhz: float = 0.0
    nvlink_rx_kb_per_s: float = 0.0
    nvlink_tx_kb_per_s: float = 0.0
    processes: tuple[ProcessMemory, ...] = ()
    worker_compute_percentage: tuple[tuple[str, float], ...] = ()
    worker_memory_bytes: tuple[tuple[str, int], ...] = ()
    limiter: tuple[tuple[str, LimiterCounters], ...] = ()
    errors: tuple[str, ...] = ()
    """Device errors seen while sampling (the agent reports itself Degraded)."""


class DeviceProvider(Protocol):
    """A source of GPUs: NVML, or a simulation."""

    @property
    def name(self) -> str:
        """`nvml` or `simulated:<file>`, for logs and `/readyz`."""
        ...

    def discover(self) -> Inventory:
        """The GPUs and host facts now; ProviderError when the provider cannot tell."""
        ...

    def sample(self, now_s: float) -> tuple[DeviceSample, ...]:
        """One sample per GPU at `now_s` (seconds since the epoch); ProviderError on failure."""
        ...


class ComputeMode(StrEnum):
    """NVML compute modes (`nvmlComputeMode_t`)."""

    DEFAULT = "Default"
    PROHIBITED = "Prohibited"
    EXCLUSIVE_PROCESS = "ExclusiveProcess"


class ComputeModeControl(Protocol):
    """A provider that can set a GPU's compute mode (NVML, or the simulated one)."""

    def set_compute_mode(self, uuid: str, mode: ComputeMode) -> ComputeMode:
        """Set the mode of the GPU `uuid`; the mode it had. ProviderError on failure."""
        ...
