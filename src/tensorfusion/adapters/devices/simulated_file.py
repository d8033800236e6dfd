"""The simulated GPU provider driven by a YAML file (format: `domain/devices/simulation.py`).

The file is read at construction (a bad file fails at start) and again on every `discover()`,
so editing it adds or removes GPUs at the next discovery; a file that became unreadable or
malformed makes that discovery fail and keeps the previous spec. Samples use the spec of the
last successful read; step times count from `start_s` (default: construction).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from tensorfusion.domain.devices.inventory import (
    ComputeMode,
    DeviceSample,
    Inventory,
    ProviderError,
)
from tensorfusion.domain.devices.simulated_provider import SimulatedProvider
from tensorfusion.domain.devices.simulation import SimulationSpec, parse_simulation

__all__ = ["SimulatedFileProvider", "read_simulation"]


def read_simulation(path: Path, node_name: str = "") -> SimulationSpec:
    """Read and parse the file; ProviderError names it (unreadable, not YAML, bad field)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ProviderError(
            f"{path}: cannot read the simulated GPU file: {exc.strerror or exc}"
        ) from None
    except UnicodeDecodeError as exc:
        raise ProviderError(f"{path}: the simulated GPU file is not UTF-8 text: {exc}") from None
    return parse_simulation(text, str(path), node_name)


class SimulatedFileProvider:
    """A `DeviceProvider` over a simulated GPU file, re-read on every discovery."""

    def __init__(
        self,
        path: Path,
        *,
        node_name: str = "",
        start_s: float | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._path = path
        self._node_name = node_name
        spec = read_simulation(path, node_name)
        self._provider = SimulatedProvider(spec, clock() if start_s is None else start_s)

    @property
    def name(self) -> str:
        """`simulated:<file>`."""
        return self._provider.name

    @property
    def path(self) -> Path:
        """The file."""
        return self._path

    @property
    def spec(self) -> SimulationSpec:
        """The spec of the last successful read."""
        return self._provider.spec

    def discover(self) -> Inventory:
        """Re-read the file, then the GPUs and node facts it lists."""
        self._provider.replace(read_simulation(self._path, self._node_name))
        return self._provider.discover()

    def sample(self, now_s: float) -> tuple[DeviceSample, ...]:
        """One sample per GPU of the last read spec at `now_s`."""
        return self._provider.sample(now_s)

    def compute_mode(self, uuid: str) -> ComputeMode:
        """A GPU's compute mode (kept in memory: Default at start)."""
        return self._provider.compute_mode(uuid)

    def set_compute_mode(self, uuid: str, mode: ComputeMode) -> ComputeMode:
        """Set a GPU's compute mode in memory; the mode it had."""
        return self._provider.set_compute_mode(uuid, mode)
