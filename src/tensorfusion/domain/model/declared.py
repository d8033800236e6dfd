"""Kinds installed so that existing objects round-trip, but not acted upon (api.md §2.9)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from tensorfusion.domain.model.base import WireModel
from tensorfusion.domain.model.meta import KubeObject

__all__ = [
    "GPUNodeClaim",
    "GPUNodeClass",
    "OpaqueSpec",
    "OpaqueStatus",
    "TensorFusionConnection",
]


class OpaqueSpec(WireModel):
    """A spec kept verbatim."""

    crd_preserve_unknown_fields = True


class OpaqueStatus(WireModel):
    """A status kept verbatim."""

    crd_preserve_unknown_fields = True


class GPUNodeClaim(KubeObject):
    """A request for a provisioned GPU node (declared)."""

    kind: Literal["GPUNodeClaim"] = "GPUNodeClaim"
    spec: OpaqueSpec = Field(default_factory=OpaqueSpec)
    status: OpaqueStatus = Field(default_factory=OpaqueStatus)


class GPUNodeClass(KubeObject):
    """Cloud settings of provisioned GPU nodes (declared)."""

    kind: Literal["GPUNodeClass"] = "GPUNodeClass"
    spec: OpaqueSpec = Field(default_factory=OpaqueSpec)
    status: OpaqueStatus = Field(default_factory=OpaqueStatus)


class TensorFusionConnection(KubeObject):
    """A remote-vGPU client's connection to a worker (declared; remote mode is denied)."""

    kind: Literal["TensorFusionConnection"] = "TensorFusionConnection"
    spec: OpaqueSpec = Field(default_factory=OpaqueSpec)
    status: OpaqueStatus = Field(default_factory=OpaqueStatus)
