"""TensorFusionCluster (cluster-scoped): the top-level object that owns the pools (api.md §2.1)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from tensorfusion.domain.model.base import Int32, Int64, WireModel
from tensorfusion.domain.model.capacity import CapacityFigures
from tensorfusion.domain.model.meta import Condition, KubeObject
from tensorfusion.domain.model.pool import GPUPoolSpec, PoolPhase

__all__ = [
    "ComputingVendorConfig",
    "ComputingVendorParams",
    "GPUPoolDefinition",
    "TensorFusionCluster",
    "TensorFusionClusterSpec",
    "TensorFusionClusterStatus",
    "VendorType",
]

VendorType = Literal[
    "aws",
    "lambda-labs",
    "gcp",
    "azure",
    "oracle-oci",
    "ibm",
    "openshift",
    "vultr",
    "together-ai",
    "alibaba",
    "nvidia",
    "tencent",
    "runpod",
    "karpenter",
    "mock",
]


class GPUPoolDefinition(WireModel):
    """One pool of the cluster: created as GPUPool ``<cluster>-<name>``."""

    name: str
    is_default: bool = False
    spec_template: GPUPoolSpec


class ComputingVendorParams(WireModel):
    """Credentials and settings of the cloud vendor connection (declared)."""

    default_region: str | None = None
    access_key_path: str | None = None
    secret_key_path: str | None = None
    iam_role: str | None = None
    config_file: str | None = None
    extra_params: dict[str, str] | None = None


class ComputingVendorConfig(WireModel):
    """Cloud vendor used for provisioning (declared: provisioning is out of scope)."""

    crd_preserve_unknown_fields = True

    name: str | None = None
    type: VendorType | None = None
    auth_type: Literal["accessKey", "serviceAccountRole"] | None = None
    enable: bool = True
    params: ComputingVendorParams | None = None


class TensorFusionClusterSpec(WireModel):
    """Desired state of a cluster: its pools and cloud vendor."""

    gpu_pools: list[GPUPoolDefinition] = Field(default_factory=list, alias="gpuPools")
    computing_vendor: ComputingVendorConfig | None = None


class TensorFusionClusterStatus(CapacityFigures):
    """Observed state of a cluster: sums over its pools."""

    phase: PoolPhase = PoolPhase.PENDING
    conditions: list[Condition] = Field(default_factory=list)
    total_pools: Int32 | None = None
    total_nodes: Int32 | None = None
    total_gpus: Int32 | None = Field(None, alias="totalGPUs")
    ready_gpu_pools: list[str] = Field(default_factory=list, alias="readyGPUPools")
    not_ready_gpu_pools: list[str] = Field(default_factory=list, alias="notReadyGPUPools")
    retry_count: Int64 = 0
    utilized_tflops_percent: str | None = Field(None, alias="utilizedTFlopsPercent")
    utilized_vram_percent: str | None = Field(None, alias="utilizedVRAMPercent")
    allocated_tflops_percent: str | None = Field(None, alias="allocatedTFlopsPercent")
    allocated_vram_percent: str | None = Field(None, alias="allocatedVRAMPercent")
    saved_costs_per_month: str | None = None
    potential_savings_per_month: str | None = None
    cloud_vendor_config_hash: str | None = None


class TensorFusionCluster(KubeObject):
    """The top-level object: one GPUPool per ``spec.gpuPools[]`` entry."""

    kind: Literal["TensorFusionCluster"] = "TensorFusionCluster"
    spec: TensorFusionClusterSpec = Field(default_factory=TensorFusionClusterSpec)
    status: TensorFusionClusterStatus = Field(default_factory=TensorFusionClusterStatus)
