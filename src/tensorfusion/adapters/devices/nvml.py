"""The NVML GPU provider (`nvidia-ml-py`, module `pynvml`).

Discovery: uuid, index, product name, total memory (rounded down to a whole MiB), NUMA node
(NVML, else sysfs, else -1), PCI bus id, NVLink peers (active links by remote PCI bus id,
aggregated per peer; NVSwitch links make every GPU on the switch fabric a peer). Samples:
utilisation, memory used, temperature, power, clocks, PCIe and NVLink throughput, per-process
memory. NVML that cannot be loaded or initialised, or that fails a query every GPU needs, is a
`ProviderError` with the reason; an optional query a GPU or driver does not support gives its
default (0, -1, none), and any other error of a sampling query goes into the sample's `errors`.

The module is imported at the first call (or injected: tests pass a fake `pynvml`).
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Final

from tensorfusion.adapters.devices.host_facts import read_node_facts
from tensorfusion.adapters.devices.nvml_sample import NvlinkCounters, sample_device
from tensorfusion.domain.devices.inventory import (
    ComputeMode,
    DeviceInfo,
    DeviceSample,
    HostFacts,
    Inventory,
    ProviderError,
)
from tensorfusion.domain.devices.nvlink import ActiveLink, nvlink_peers

__all__ = ["NVML_UNAVAILABLE", "NvmlProvider", "load_pynvml", "text_of"]

NVML_UNAVAILABLE: Final = "NVML is not available on this node"
_HINT: Final = (
    "the NVIDIA driver must be installed and libnvidia-ml.so.1 loadable by the agent "
    "(or run the agent with the simulated GPU provider)"
)
_MIB: Final = 1 << 20
_UNSUPPORTED: Final = (
    "NVML_ERROR_NOT_SUPPORTED",
    "NVML_ERROR_FUNCTION_NOT_FOUND",
    "NVML_ERROR_NO_PERMISSION",
    "NVML_ERROR_NO_DATA",
    "NVML_ERROR_NOT_FOUND",
    "NVML_ERROR_INVALID_ARGUMENT",
    "NVML_ERROR_DEPRECATED",
)
# NVML's nvmlComputeMode_t (1, EXCLUSIVE_THREAD, is deprecated and read as exclusive process).
_COMPUTE_MODES: Final[dict[int, ComputeMode]] = {
    0: ComputeMode.DEFAULT, 1: ComputeMode.EXCLUSIVE_PROCESS, 2: ComputeMode.PROHIBITED,
    3: ComputeMode.EXCLUSIVE_PROCESS,
}  # fmt: skip
_COMPUTE_MODE_VALUES: Final = {
    ComputeMode.DEFAULT: 0, ComputeMode.PROHIBITED: 2, ComputeMode.EXCLUSIVE_PROCESS: 3,
}  # fmt: skip
# NVML's nvmlNvlinkVersion_t (1.0, 2.0, 2.2, 3.0, 3.1, 4.0, 5.0, 6.0) → NVLink generation.
_GENERATION: Final[dict[int, int]] = {1: 1, 2: 2, 3: 2, 4: 3, 5: 3, 6: 4, 7: 5, 8: 6}


def load_pynvml(import_module: Callable[[str], Any] = importlib.import_module) -> Any:
    """The `pynvml` module; ProviderError when the package is not installed."""
    try:
        return import_module("pynvml")
    except ImportError as exc:
        raise ProviderError(
            f"{NVML_UNAVAILABLE}: the Python package nvidia-ml-py (module pynvml) cannot be "
            f"imported ({exc}); install it, or run the agent with the simulated GPU provider"
        ) from None


def text_of(value: Any) -> str:
    """NVML text (bytes in some pynvml versions, str in others)."""
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


@dataclass(frozen=True, slots=True)
class _Found:
    info: DeviceInfo
    links: tuple[ActiveLink, ...]
    link_ids: tuple[int, ...]


class NvmlProvider:
    """A `DeviceProvider` over NVML; `close()` shuts NVML down."""

    def __init__(
        self,
        nvml: Any = None,
        *,
        sysfs_root: Path = Path("/sys"),
        node_facts: Callable[[], HostFacts] = read_node_facts,
    ) -> None:
        self._nvml = nvml
        self._sysfs_root = sysfs_root
        self._node_facts = node_facts
        self._ready = False
        self._known: tuple[DeviceInfo, ...] = ()
        self._link_ids: dict[str, tuple[int, ...]] = {}
        self._counters: dict[str, NvlinkCounters] = {}

    @property
    def name(self) -> str:
        """`nvml`."""
        return "nvml"

    def _ensure(self) -> Any:
        if self._nvml is None:
            self._nvml = load_pynvml()
        nvml = self._nvml
        if not self._ready:
            try:
                nvml.nvmlInit()
            except nvml.NVMLError as exc:
                raise ProviderError(f"{NVML_UNAVAILABLE}: nvmlInit: {exc}; {_HINT}") from None
            self._ready = True
        return nvml

    def close(self) -> None:
        """Shut NVML down (errors ignored); the next call initialises it again."""
        if self._ready and self._nvml is not None:
            with contextlib.suppress(self._nvml.NVMLError):
                self._nvml.nvmlShutdown()
        self._ready = False

    def unsupported(self, exc: BaseException) -> bool:
        """Whether an NVML error means "this GPU or driver cannot tell" (not a failure)."""
        codes = {getattr(self._nvml, name, None) for name in _UNSUPPORTED}
        return getattr(exc, "value", None) in codes

    def required(self, function: str, *args: Any, where: str = "") -> Any:
        """A query every GPU must answer; ProviderError on failure."""
        nvml = self._nvml
        try:
            return getattr(nvml, function)(*args)
        except nvml.NVMLError as exc:
            if getattr(exc, "value", None) == getattr(nvml, "NVML_ERROR_UNINITIALIZED", None):
                self._ready = False
            raise ProviderError(f"NVML failed: {function}{where}: {exc}") from None

    def optional(self, default: Any, function: str, *args: Any) -> Any:
        """A query that may be missing or unsupported: `default` on any NVML error."""
        call = getattr(self._nvml, function, None)
        if call is None:
            return default
        try:
            return call(*args)
        except self._nvml.NVMLError:
            return default

    def discover(self) -> Inventory:
        """The GPUs NVML sees and the host's facts."""
        self._ensure()
        count = int(self.required("nvmlDeviceGetCount"))
        found = [self._device(index) for index in range(count)]
        peers = nvlink_peers({f.info.pci_bus_id: f.links for f in found if f.info.pci_bus_id})
        devices = tuple(replace(f.info, nvlinks=peers.get(f.info.pci_bus_id, ())) for f in found)
        self._known = devices
        self._link_ids = {f.info.uuid: f.link_ids for f in found}
        return Inventory(devices=devices, node=self._node_facts())

    def driver_version(self) -> str:
        """The driver's version (`nvmlSystemGetDriverVersion`); "" when it cannot tell."""
        self._ensure()
        return text_of(self.optional("", "nvmlSystemGetDriverVersion"))

    def set_compute_mode(self, uuid: str, mode: ComputeMode) -> ComputeMode:
        """Set the compute mode of GPU `uuid` (needs root); the mode it had."""
        self._ensure()
        where = f" (GPU {uuid})"
        handle = self.required("nvmlDeviceGetHandleByUUID", uuid.encode(), where=where)
        before = int(self.required("nvmlDeviceGetComputeMode", handle, where=where))
        self.required("nvmlDeviceSetComputeMode", handle, _COMPUTE_MODE_VALUES[mode], where=where)
        return _COMPUTE_MODES.get(before, ComputeMode.DEFAULT)

    def sample(self, now_s: float) -> tuple[DeviceSample, ...]:
        """One sample per discovered GPU (discovering first if nothing was yet)."""
        nvml = self._ensure()
        if not self._known:
            self.discover()
        samples = []
        for device in self._known:
            uuid = device.uuid
            try:
                handle = nvml.nvmlDeviceGetHandleByUUID(uuid.encode())  # bytes for any pynvml
            except nvml.NVMLError as exc:
                samples.append(DeviceSample(uuid, 0.0, 0, errors=(f"GPU {uuid}: {exc}",)))
                continue
            links = self._link_ids.get(uuid, ())
            previous = self._counters.get(uuid)
            sample, counters = sample_device(
                nvml, self.unsupported, handle, uuid, links, now_s, previous
            )
            if counters is not None:
                self._counters[uuid] = counters
            samples.append(sample)
        return tuple(samples)

    def _device(self, index: int) -> _Found:
        where = f" (GPU {index})"
        handle = self.required("nvmlDeviceGetHandleByIndex", index, where=where)
        uuid = text_of(self.required("nvmlDeviceGetUUID", handle, where=where))
        model = text_of(self.required("nvmlDeviceGetName", handle, where=where))
        memory = self.required("nvmlDeviceGetMemoryInfo", handle, where=where)
        pci = self.optional(None, "nvmlDeviceGetPciInfo", handle)
        bus = text_of(pci.busId) if pci is not None else ""
        links, ids = self._links(handle)
        info = DeviceInfo(
            uuid=uuid,
            index=index,
            model=model,
            vendor="NVIDIA",
            vram_bytes=int(memory.total) // _MIB * _MIB,
            numa_node=self._numa(handle, bus),
            pci_bus_id=bus,
        )
        return _Found(info, links, ids)

    def _numa(self, handle: Any, bus: str) -> int:
        node = self.optional(None, "nvmlDeviceGetNumaNodeId", handle)
        if node is not None and int(node) >= 0:
            return int(node)
        domain, _, rest = bus.partition(":")
        if not rest:
            return -1
        sysfs_bus = f"{domain[-4:]}:{rest}".lower()
        path = self._sysfs_root / "bus" / "pci" / "devices" / sysfs_bus / "numa_node"
        try:
            return max(int(path.read_text(encoding="ascii").strip()), -1)
        except (OSError, ValueError):
            return -1

    def _links(self, handle: Any) -> tuple[tuple[ActiveLink, ...], tuple[int, ...]]:
        nvml = self._nvml
        enabled = getattr(nvml, "NVML_FEATURE_ENABLED", 1)
        switch = getattr(nvml, "NVML_NVLINK_DEVICE_TYPE_SWITCH", 2)
        links: list[ActiveLink] = []
        ids: list[int] = []
        for link in range(int(getattr(nvml, "NVML_NVLINK_MAX_LINKS", 18))):
            if self.optional(None, "nvmlDeviceGetNvLinkState", handle, link) != enabled:
                continue
            remote = self.optional(None, "nvmlDeviceGetNvLinkRemotePciInfo", handle, link)
            kind = self.optional(None, "nvmlDeviceGetNvLinkRemoteDeviceType", handle, link)
            raw_version = int(self.optional(0, "nvmlDeviceGetNvLinkVersion", handle, link))
            bus = text_of(remote.busId) if remote is not None else ""
            version = _GENERATION.get(raw_version, 0)
            links.append(ActiveLink(bus, version, to_switch=kind == switch))
            ids.append(link)
        return tuple(links), tuple(ids)
