"""The simulated GPU provider: discovery and samples computed from a `SimulationSpec`.

Pure: samples depend only on the spec and the time since `start_s`. `replace(spec)` swaps the
spec (a GPU left out of the new one has disappeared from the next discovery and sample on).
"""

from __future__ import annotations

from tensorfusion.domain.devices.inventory import ComputeMode, DeviceSample, Inventory
from tensorfusion.domain.devices.simulation import SimulatedGpu, SimulationSpec
from tensorfusion.domain.devices.simulation_steps import GpuLoad, WorkerLoad, counters_at, load_at

__all__ = ["SimulatedProvider", "sample_gpu"]

_IDLE_GPU = GpuLoad()
_IDLE_WORKER = WorkerLoad()


def sample_gpu(gpu: SimulatedGpu, elapsed_s: float) -> DeviceSample:
    """One GPU's sample `elapsed_s` seconds after the start."""
    load = load_at(gpu.usage, elapsed_s, _IDLE_GPU)
    workers = [(w.name, load_at(w.steps, elapsed_s, _IDLE_WORKER)) for w in gpu.workers]
    return DeviceSample(
        uuid=gpu.device.uuid,
        compute_percentage=load.compute_percentage,
        memory_used_bytes=load.memory_used_bytes,
        temperature_c=load.temperature_c,
        power_w=load.power_w,
        pcie_rx_kb_per_s=load.pcie_rx_kb_per_s,
        pcie_tx_kb_per_s=load.pcie_tx_kb_per_s,
        graphics_clock_mhz=load.graphics_clock_mhz,
        sm_clock_mhz=load.sm_clock_mhz,
        memory_clock_mhz=load.memory_clock_mhz,
        video_clock_mhz=load.video_clock_mhz,
        nvlink_rx_kb_per_s=load.nvlink_rx_kb_per_s,
        nvlink_tx_kb_per_s=load.nvlink_tx_kb_per_s,
        worker_compute_percentage=tuple((name, w.compute_percentage) for name, w in workers),
        worker_memory_bytes=tuple((name, w.memory_used_bytes) for name, w in workers),
        limiter=tuple((w.name, counters_at(w.steps, elapsed_s)) for w in gpu.workers),
        errors=load.errors,
    )


class SimulatedProvider:
    """A `DeviceProvider` over a parsed simulated GPU file; time runs from `start_s`."""

    def __init__(self, spec: SimulationSpec, start_s: float) -> None:
        self._spec = spec
        self._start_s = start_s
        self._compute_modes: dict[str, ComputeMode] = {}

    def compute_mode(self, uuid: str) -> ComputeMode:
        """A GPU's compute mode (Default until set)."""
        return self._compute_modes.get(uuid, ComputeMode.DEFAULT)

    def set_compute_mode(self, uuid: str, mode: ComputeMode) -> ComputeMode:
        """Set a GPU's compute mode; the mode it had."""
        previous = self.compute_mode(uuid)
        self._compute_modes[uuid] = mode
        return previous

    @property
    def name(self) -> str:
        """`simulated:<file>`."""
        return f"simulated:{self._spec.source}"

    @property
    def spec(self) -> SimulationSpec:
        """The spec in force."""
        return self._spec

    @property
    def start_s(self) -> float:
        """Seconds since the epoch at which step times count from."""
        return self._start_s

    def replace(self, spec: SimulationSpec) -> None:
        """Use `spec` from now on; the start time stays, so counters keep counting."""
        self._spec = spec

    def discover(self) -> Inventory:
        """The spec's GPUs and node facts."""
        return Inventory(devices=tuple(g.device for g in self._spec.gpus), node=self._spec.node)

    def sample(self, now_s: float) -> tuple[DeviceSample, ...]:
        """One sample per GPU at `now_s` (before the start counts as the start)."""
        elapsed = max(now_s - self._start_s, 0.0)
        return tuple(sample_gpu(gpu, elapsed) for gpu in self._spec.gpus)
