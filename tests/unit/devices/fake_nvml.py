# ruff: noqa: N802  (the method names are pynvml's)
"""A fake `pynvml` module: the functions, constants and error class `NvmlProvider` uses, over
GPUs described by `FakeGpu`. A function listed in `FakeGpu.failing` raises that NVML error; a
name in `FakeNvml.missing` does not exist (an old pynvml)."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

NOT_SUPPORTED = 3
NO_PERMISSION = 4
DRIVER_NOT_LOADED = 9
LIBRARY_NOT_FOUND = 12
FUNCTION_NOT_FOUND = 13
GPU_IS_LOST = 15
UNINITIALIZED = 1
UNKNOWN = 999
_TEXT = {
    UNINITIALIZED: "Uninitialized",
    NOT_SUPPORTED: "Not Supported",
    NO_PERMISSION: "Insufficient Permissions",
    DRIVER_NOT_LOADED: "Driver Not Loaded",
    LIBRARY_NOT_FOUND: "NVML Shared Library Not Found",
    FUNCTION_NOT_FOUND: "Function Not Found",
    GPU_IS_LOST: "GPU is lost",
    UNKNOWN: "Unknown Error",
}


class FakeNVMLError(Exception):
    """pynvml's NVMLError: the code in `value`, its text as the message."""

    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.value = value

    def __str__(self) -> str:
        return _TEXT.get(self.value, f"NVML Error with code {self.value}")


@dataclass
class FakeLink:
    """One active NVLink; counters are NVML's cumulative KiB."""

    remote_bus: str
    version: int = 6  # NVML_NVLINK_VERSION_4_0
    to_switch: bool = False
    rx_kib: int = 0
    tx_kib: int = 0


@dataclass
class FakeGpu:
    """One GPU as the fake NVML reports it."""

    uuid: str
    name: Any = "NVIDIA H100 80GB HBM3"
    total: int = 81559 * (1 << 20) + 12345
    used: int = 0
    bus: Any = b"00000000:19:00.0"
    numa: int = 0
    util: int = 0
    temperature: int = 0
    power_mw: int = 0
    clocks: dict[int, int] = field(default_factory=dict)
    pcie: dict[int, int] = field(default_factory=dict)
    links: dict[int, FakeLink] = field(default_factory=dict)
    compute: list[tuple[int, int | None]] = field(default_factory=list)
    graphics: list[tuple[int, int | None]] = field(default_factory=list)
    failing: dict[str, int] = field(default_factory=dict)


class FakeNvml:
    """The module object handed to `NvmlProvider(nvml=...)`."""

    NVMLError = FakeNVMLError
    NVML_ERROR_UNINITIALIZED = UNINITIALIZED
    NVML_ERROR_INVALID_ARGUMENT = 2
    NVML_ERROR_NOT_SUPPORTED = NOT_SUPPORTED
    NVML_ERROR_NO_PERMISSION = NO_PERMISSION
    NVML_ERROR_NOT_FOUND = 6
    NVML_ERROR_FUNCTION_NOT_FOUND = FUNCTION_NOT_FOUND
    NVML_ERROR_GPU_IS_LOST = GPU_IS_LOST
    NVML_ERROR_NO_DATA = 21
    NVML_ERROR_DEPRECATED = 26
    NVML_FEATURE_ENABLED = 1
    NVML_NVLINK_MAX_LINKS = 18
    NVML_NVLINK_DEVICE_TYPE_GPU = 0
    NVML_NVLINK_DEVICE_TYPE_SWITCH = 2
    NVML_TEMPERATURE_GPU = 0
    NVML_CLOCK_GRAPHICS = 0
    NVML_CLOCK_SM = 1
    NVML_CLOCK_MEM = 2
    NVML_CLOCK_VIDEO = 3
    NVML_PCIE_UTIL_TX_BYTES = 0
    NVML_PCIE_UTIL_RX_BYTES = 1
    NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX = 138
    NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX = 139

    def __init__(
        self,
        gpus: list[FakeGpu],
        *,
        init_error: int | None = None,
        failing: dict[str, int] | None = None,
        missing: tuple[str, ...] = (),
    ) -> None:
        self.gpus = gpus
        self.init_error = init_error
        self.failing = failing or {}
        self.missing = missing
        self.inits = 0
        self.shutdowns = 0

    def __getattribute__(self, name: str) -> Any:
        if name.startswith("nvml") and name in object.__getattribute__(self, "missing"):
            raise AttributeError(name)
        return object.__getattribute__(self, name)

    def _check(self, function: str, gpu: FakeGpu | None = None) -> None:
        code = self.failing.get(function)
        if code is None and gpu is not None:
            code = gpu.failing.get(function)
        if code is not None:
            raise FakeNVMLError(code)

    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise FakeNVMLError(self.init_error)
        self.inits += 1

    def nvmlShutdown(self) -> None:
        self.shutdowns += 1

    def nvmlDeviceGetCount(self) -> int:
        self._check("nvmlDeviceGetCount")
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeGpu:
        self._check("nvmlDeviceGetHandleByIndex", self.gpus[index])
        return self.gpus[index]

    def nvmlDeviceGetHandleByUUID(self, uuid: bytes) -> FakeGpu:
        for gpu in self.gpus:
            if gpu.uuid.encode() == uuid:
                self._check("nvmlDeviceGetHandleByUUID", gpu)
                return gpu
        raise FakeNVMLError(6)

    def nvmlDeviceGetUUID(self, gpu: FakeGpu) -> str:
        self._check("nvmlDeviceGetUUID", gpu)
        return gpu.uuid

    def nvmlDeviceGetName(self, gpu: FakeGpu) -> Any:
        self._check("nvmlDeviceGetName", gpu)
        return gpu.name

    def nvmlDeviceGetMemoryInfo(self, gpu: FakeGpu) -> SimpleNamespace:
        self._check("nvmlDeviceGetMemoryInfo", gpu)
        return SimpleNamespace(total=gpu.total, used=gpu.used, free=gpu.total - gpu.used)

    def nvmlDeviceGetPciInfo(self, gpu: FakeGpu) -> SimpleNamespace:
        self._check("nvmlDeviceGetPciInfo", gpu)
        return SimpleNamespace(busId=gpu.bus)

    def nvmlDeviceGetNumaNodeId(self, gpu: FakeGpu) -> int:
        self._check("nvmlDeviceGetNumaNodeId", gpu)
        return gpu.numa

    def _link(self, function: str, gpu: FakeGpu, link: int) -> FakeLink:
        self._check(function, gpu)
        if link not in gpu.links:
            raise FakeNVMLError(NOT_SUPPORTED)
        return gpu.links[link]

    def nvmlDeviceGetNvLinkState(self, gpu: FakeGpu, link: int) -> int:
        self._link("nvmlDeviceGetNvLinkState", gpu, link)
        return 1

    def nvmlDeviceGetNvLinkVersion(self, gpu: FakeGpu, link: int) -> int:
        return self._link("nvmlDeviceGetNvLinkVersion", gpu, link).version

    def nvmlDeviceGetNvLinkRemoteDeviceType(self, gpu: FakeGpu, link: int) -> int:
        return 2 if self._link("nvmlDeviceGetNvLinkRemoteDeviceType", gpu, link).to_switch else 0

    def nvmlDeviceGetNvLinkRemotePciInfo(self, gpu: FakeGpu, link: int) -> SimpleNamespace:
        remote = self._link("nvmlDeviceGetNvLinkRemotePciInfo", gpu, link).remote_bus
        return SimpleNamespace(busId=remote.encode())

    def nvmlDeviceGetUtilizationRates(self, gpu: FakeGpu) -> SimpleNamespace:
        self._check("nvmlDeviceGetUtilizationRates", gpu)
        return SimpleNamespace(gpu=gpu.util, memory=0)

    def nvmlDeviceGetTemperature(self, gpu: FakeGpu, sensor: int) -> int:
        self._check("nvmlDeviceGetTemperature", gpu)
        return gpu.temperature

    def nvmlDeviceGetPowerUsage(self, gpu: FakeGpu) -> int:
        self._check("nvmlDeviceGetPowerUsage", gpu)
        return gpu.power_mw

    def nvmlDeviceGetClockInfo(self, gpu: FakeGpu, kind: int) -> int:
        self._check("nvmlDeviceGetClockInfo", gpu)
        return gpu.clocks.get(kind, 0)

    def nvmlDeviceGetPcieThroughput(self, gpu: FakeGpu, counter: int) -> int:
        self._check("nvmlDeviceGetPcieThroughput", gpu)
        return gpu.pcie.get(counter, 0)

    def nvmlDeviceGetFieldValues(self, gpu: FakeGpu, ids: list[tuple[int, int]]) -> list[Any]:
        self._check("nvmlDeviceGetFieldValues", gpu)
        values = []
        for field_id, link in ids:
            fake = gpu.links[link]
            rx = field_id == self.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX
            kib = fake.rx_kib if rx else fake.tx_kib
            value = SimpleNamespace(ullVal=kib)
            values.append(SimpleNamespace(nvmlReturn=0, valueType=3, value=value))
        return values

    def _processes(self, entries: list[tuple[int, int | None]]) -> list[SimpleNamespace]:
        return [SimpleNamespace(pid=pid, usedGpuMemory=used) for pid, used in entries]

    def nvmlDeviceGetComputeRunningProcesses(self, gpu: FakeGpu) -> list[SimpleNamespace]:
        self._check("nvmlDeviceGetComputeRunningProcesses", gpu)
        return self._processes(gpu.compute)

    def nvmlDeviceGetGraphicsRunningProcesses(self, gpu: FakeGpu) -> list[SimpleNamespace]:
        self._check("nvmlDeviceGetGraphicsRunningProcesses", gpu)
        return self._processes(gpu.graphics)
