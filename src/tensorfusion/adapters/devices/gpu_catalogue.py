"""The GPU-info catalogue: the packaged `gpu_info.yaml`, or a file in the same format."""

from __future__ import annotations

from functools import cache
from importlib import resources
from pathlib import Path

from tensorfusion.domain.devices.inventory import ProviderError
from tensorfusion.domain.devices.tflops import GPUInfo, parse_gpu_catalogue

__all__ = ["PACKAGED_CATALOGUE", "load_gpu_catalogue"]

PACKAGED_CATALOGUE = "gpu_info.yaml"


@cache
def _packaged() -> tuple[GPUInfo, ...]:
    text = resources.files("tensorfusion.data").joinpath(PACKAGED_CATALOGUE).read_text("utf-8")
    return parse_gpu_catalogue(text, PACKAGED_CATALOGUE)


def load_gpu_catalogue(path: Path | None = None) -> tuple[GPUInfo, ...]:
    """The catalogue at `path` (for example the chart's mounted `gpu-info.yaml`), else the
    packaged one (read once); ProviderError names the file when it is unreadable or bad."""
    if path is None:
        return _packaged()
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        reason = exc.strerror or exc
        raise ProviderError(f"{path}: cannot read the GPU-info catalogue: {reason}") from None
    return parse_gpu_catalogue(text, str(path))
