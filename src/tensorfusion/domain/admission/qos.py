"""QoS derivation (admission.md §6)."""

from __future__ import annotations

from tensorfusion.domain.allocation_request import ResourceAmount
from tensorfusion.domain.model import GPUPool
from tensorfusion.domain.vocabulary import QoSLevel

__all__ = ["derive_qos"]


def derive_qos(
    annotation: QoSLevel | None,
    profile: QoSLevel | None,
    requests: ResourceAmount,
    limits: ResourceAmount,
    pool: GPUPool | None,
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
    default = None if pool is None else pool.spec.qos_config.default_qos
    return default or QoSLevel.MEDIUM
