"""QoS derivation (admission.md §6)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tensorfusion.domain.allocation_request import ResourceAmount
from tensorfusion.domain.vocabulary import QoSLevel

__all__ = ["derive_qos"]


def derive_qos(
    annotation: QoSLevel | None,
    profile: QoSLevel | None,
    requests: ResourceAmount,
    limits: ResourceAmount,
    pool: Mapping[str, Any],
) -> QoSLevel:
    """Annotation; else profile; else `high` for equal non-zero TFLOPs and VRAM requests and
    limits (percent does not qualify); else the pool's `qosConfig.defaultQoS`; else `medium`.
    """
    if annotation is not None:
        return annotation
    if profile is not None:
        return profile
    if (
        requests.tflops_milli
        and requests.vram_bytes
        and limits.tflops_milli == requests.tflops_milli
        and limits.vram_bytes == requests.vram_bytes
    ):
        return QoSLevel.HIGH
    default = ((pool.get("spec") or {}).get("qosConfig") or {}).get("defaultQoS")
    try:
        return QoSLevel(default) if default else QoSLevel.MEDIUM
    except ValueError:
        return QoSLevel.MEDIUM
