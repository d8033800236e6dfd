"""The resource model of the ``tensor-fusion.ai/v1`` API (api.md §2) and its CRDs.

Load objects with :func:`load_object`, write them with :func:`to_wire`; :func:`render_crds`
produces the chart's CRD files.
"""

from tensorfusion.domain.model.base import (
    FreeForm,
    GoDuration,
    Int32,
    Int64,
    NonNegativeQuantity,
    Percent,
    PercentInt,
    QuantityValue,
    Range,
    Timestamp,
    WireModel,
)
from tensorfusion.domain.model.cluster import (
    ComputingVendorConfig,
    GPUPoolDefinition,
    TensorFusionCluster,
    TensorFusionClusterSpec,
    TensorFusionClusterStatus,
)
from tensorfusion.domain.model.crds import build_crd, build_crds, crd_file_name, render_crds
from tensorfusion.domain.model.declared import GPUNodeClaim, GPUNodeClass, TensorFusionConnection
from tensorfusion.domain.model.errors import FieldIssue, ModelError
from tensorfusion.domain.model.gpu import GPU, GPUStatus, RunningApp
from tensorfusion.domain.model.meta import (
    API_GROUP,
    API_VERSION,
    Condition,
    KubeObject,
    ObjectMeta,
    OwnerReference,
)
from tensorfusion.domain.model.node import GPUNode, GPUNodeSpec, GPUNodeStatus, PodGPUInfo
from tensorfusion.domain.model.pool import (
    CapacityConfig,
    GPUPool,
    GPUPoolSpec,
    GPUPoolStatus,
    NodeManagerConfig,
    Oversubscription,
    PoolPhase,
)
from tensorfusion.domain.model.provider import HardwareModelInfo, ProviderConfig, ProviderConfigSpec
from tensorfusion.domain.model.quota import GPUResourceQuota, GPUResourceQuotaSpec
from tensorfusion.domain.model.registry import (
    KINDS,
    KindInfo,
    kind_info,
    load_as,
    load_object,
    to_wire,
    unknown_fields,
)
from tensorfusion.domain.model.resources import GPUCapacity, Resource, Resources
from tensorfusion.domain.model.scheduling import (
    SchedulingConfigTemplate,
    SchedulingConfigTemplateSpec,
)
from tensorfusion.domain.model.selectors import LabelSelector, NodeSelector
from tensorfusion.domain.model.workload import (
    TensorFusionWorkload,
    WorkloadProfile,
    WorkloadProfileSpec,
)

__all__ = [
    "API_GROUP",
    "API_VERSION",
    "GPU",
    "KINDS",
    "CapacityConfig",
    "ComputingVendorConfig",
    "Condition",
    "FieldIssue",
    "FreeForm",
    "GPUCapacity",
    "GPUNode",
    "GPUNodeClaim",
    "GPUNodeClass",
    "GPUNodeSpec",
    "GPUNodeStatus",
    "GPUPool",
    "GPUPoolDefinition",
    "GPUPoolSpec",
    "GPUPoolStatus",
    "GPUResourceQuota",
    "GPUResourceQuotaSpec",
    "GPUStatus",
    "GoDuration",
    "HardwareModelInfo",
    "Int32",
    "Int64",
    "KindInfo",
    "KubeObject",
    "LabelSelector",
    "ModelError",
    "NodeManagerConfig",
    "NodeSelector",
    "NonNegativeQuantity",
    "ObjectMeta",
    "Oversubscription",
    "OwnerReference",
    "Percent",
    "PercentInt",
    "PodGPUInfo",
    "PoolPhase",
    "ProviderConfig",
    "ProviderConfigSpec",
    "QuantityValue",
    "Range",
    "Resource",
    "Resources",
    "RunningApp",
    "SchedulingConfigTemplate",
    "SchedulingConfigTemplateSpec",
    "TensorFusionCluster",
    "TensorFusionClusterSpec",
    "TensorFusionClusterStatus",
    "TensorFusionConnection",
    "TensorFusionWorkload",
    "Timestamp",
    "WireModel",
    "WorkloadProfile",
    "WorkloadProfileSpec",
    "build_crd",
    "build_crds",
    "crd_file_name",
    "kind_info",
    "load_as",
    "load_object",
    "render_crds",
    "to_wire",
    "unknown_fields",
]
