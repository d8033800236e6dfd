"""What worker pods hold of each GPU, by their own annotations: the over-commit check of the
scheduling tests and of `bench/extender.py` (fake GPUs of 312 TFLOPs and 80 GiB each)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

from tensorfusion.domain.annotations import KEYS
from tensorfusion.domain.quantities import parse_quantity

__all__ = ["GPU_TFLOPS", "GPU_VRAM_BYTES", "over_committed"]

GPU_TFLOPS: Final = 312.0
GPU_VRAM_BYTES: Final = 80.0 * 2**30


def over_committed(pods: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """GPU name → what it holds, for each GPU whose pods ask more TFLOPs or VRAM than it has
    (and "no gpu-ids" for a pod that names none)."""
    held: dict[str, list[float]] = {}
    found: dict[str, str] = {}
    for pod in pods:
        annotations = (pod.get("metadata") or {}).get("annotations") or {}
        gpus = [g for g in str(annotations.get(KEYS.gpu_ids) or "").split(",") if g]
        if not gpus:
            found[f"pod {pod['metadata']['name']}"] = f"no {KEYS.gpu_ids}"
        for gpu in gpus:
            figures = held.setdefault(gpu, [0.0, 0.0])
            figures[0] += float(annotations[KEYS.tflops_request])
            figures[1] += float(parse_quantity(annotations[KEYS.vram_request]).value)
    for gpu, (tflops, vram) in held.items():
        if tflops > GPU_TFLOPS or vram > GPU_VRAM_BYTES:
            found[gpu] = f"{tflops:g} TFLOPs, {vram / 2**30:g} GiB"
    return found
