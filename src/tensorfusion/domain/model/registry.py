"""The twelve kinds: names, scope, printer columns, and loading objects by ``kind``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal, TypeVar

from pydantic import BaseModel, ValidationError

from tensorfusion.domain.model.cluster import TensorFusionCluster
from tensorfusion.domain.model.declared import GPUNodeClaim, GPUNodeClass, TensorFusionConnection
from tensorfusion.domain.model.errors import FieldIssue, ModelError, describe_value, issues_from
from tensorfusion.domain.model.gpu import GPU
from tensorfusion.domain.model.meta import API_GROUP, API_VERSION, KubeObject
from tensorfusion.domain.model.node import GPUNode
from tensorfusion.domain.model.pool import GPUPool
from tensorfusion.domain.model.provider import ProviderConfig
from tensorfusion.domain.model.quota import GPUResourceQuota
from tensorfusion.domain.model.scheduling import SchedulingConfigTemplate
from tensorfusion.domain.model.workload import TensorFusionWorkload, WorkloadProfile

__all__ = [
    "KINDS",
    "KindInfo",
    "PrinterColumn",
    "kind_info",
    "load_as",
    "load_object",
    "to_wire",
    "unknown_fields",
]

ObjectT = TypeVar("ObjectT", bound=KubeObject)


@dataclass(frozen=True, slots=True)
class PrinterColumn:
    """One ``kubectl get`` column (``additionalPrinterColumns``)."""

    name: str
    json_path: str
    type: Literal["string", "integer", "number", "boolean", "date"] = "string"
    priority: int = 0

    def to_json(self) -> dict[str, Any]:
        """The CRD form of the column."""
        out: dict[str, Any] = {"jsonPath": self.json_path, "name": self.name, "type": self.type}
        if self.priority:
            out["priority"] = self.priority
        return out


@dataclass(frozen=True, slots=True)
class KindInfo:
    """What the API server needs to know about a kind, and its model."""

    kind: str
    plural: str
    namespaced: bool
    model: type[KubeObject]
    columns: tuple[PrinterColumn, ...]

    @property
    def singular(self) -> str:
        """Lower-case kind."""
        return self.kind.lower()

    @property
    def list_kind(self) -> str:
        """``<Kind>List``."""
        return f"{self.kind}List"

    @property
    def scope(self) -> Literal["Namespaced", "Cluster"]:
        """CRD scope."""
        return "Namespaced" if self.namespaced else "Cluster"

    @property
    def crd_name(self) -> str:
        """``<plural>.tensor-fusion.ai``."""
        return f"{self.plural}.{API_GROUP}"


def _col(name: str, path: str, type_: str = "string", priority: int = 0) -> PrinterColumn:
    return PrinterColumn(name, path, type_, priority)  # type: ignore[arg-type]


_AGE: Final = _col("Age", ".metadata.creationTimestamp", "date")
_PHASE: Final = _col("Phase", ".status.phase")


def _capacity_columns(prefix: str = ".status") -> tuple[PrinterColumn, ...]:
    return (
        _col("Total TFlops", f"{prefix}.totalTFlops"),
        _col("Total VRAM", f"{prefix}.totalVRAM"),
        _col("Available TFlops", f"{prefix}.availableTFlops"),
        _col("Available VRAM", f"{prefix}.availableVRAM"),
        _col("Virtual TFlops", f"{prefix}.virtualTFlops", priority=1),
        _col("Virtual VRAM", f"{prefix}.virtualVRAM", priority=1),
    )


_WORKLOAD_COLUMNS: Final = (
    _col("Pool", ".spec.poolName"),
    _col("QoS", ".spec.qos"),
    _col("Isolation", ".spec.isolation"),
    _col("GPU Count", ".spec.gpuCount", "integer"),
    _col("TFlops Request", ".spec.resources.requests.tflops"),
    _col("VRAM Request", ".spec.resources.requests.vram"),
)

KINDS: Final[tuple[KindInfo, ...]] = (
    KindInfo(
        "TensorFusionCluster",
        "tensorfusionclusters",
        False,
        TensorFusionCluster,
        (
            _PHASE,
            _col("Pools", ".status.totalPools", "integer"),
            _col("Nodes", ".status.totalNodes", "integer"),
            _col("GPUs", ".status.totalGPUs", "integer"),
            *_capacity_columns(),
            _AGE,
        ),
    ),
    KindInfo(
        "GPUPool",
        "gpupools",
        False,
        GPUPool,
        (
            _PHASE,
            _col("Nodes", ".status.totalNodes", "integer"),
            _col("GPUs", ".status.totalGPUs", "integer"),
            *_capacity_columns(),
            _col(
                "TFlops Oversell",
                ".spec.capacityConfig.oversubscription.tflopsOversellRatio",
                "integer",
                priority=1,
            ),
            _col("Scheduling Template", ".spec.schedulingConfigTemplate", priority=1),
            _AGE,
        ),
    ),
    KindInfo(
        "GPUNode",
        "gpunodes",
        False,
        GPUNode,
        (
            _PHASE,
            _col("GPUs", ".status.totalGPUs", "integer"),
            *_capacity_columns(),
            _col("Pods", ".status.totalGPUPods", "integer", priority=1),
            _AGE,
        ),
    ),
    KindInfo(
        "GPU",
        "gpus",
        False,
        GPU,
        (
            _PHASE,
            _col("Model", ".status.gpuModel"),
            _col("Total TFlops", ".status.capacity.tflops"),
            _col("Total VRAM", ".status.capacity.vram"),
            _col("Available TFlops", ".status.available.tflops"),
            _col("Available VRAM", ".status.available.vram"),
            _col("Node", r".status.nodeSelector.kubernetes\.io/hostname"),
            _col("Used By", ".status.usedBy", priority=1),
            _col("Isolation", ".status.isolationMode", priority=1),
            _col("UUID", ".status.uuid", priority=1),
            _AGE,
        ),
    ),
    KindInfo(
        "SchedulingConfigTemplate",
        "schedulingconfigtemplates",
        False,
        SchedulingConfigTemplate,
        (_col("Placement Mode", ".spec.placement.mode"), _AGE),
    ),
    KindInfo(
        "WorkloadProfile", "workloadprofiles", True, WorkloadProfile, (*_WORKLOAD_COLUMNS, _AGE)
    ),
    KindInfo(
        "TensorFusionWorkload",
        "tensorfusionworkloads",
        True,
        TensorFusionWorkload,
        (
            _PHASE,
            _col("Workers", ".status.workerCount", "integer"),
            _col("Ready", ".status.readyWorkers", "integer"),
            *_WORKLOAD_COLUMNS,
            _AGE,
        ),
    ),
    KindInfo(
        "GPUResourceQuota",
        "gpuresourcequotas",
        True,
        GPUResourceQuota,
        (
            _col("TFlops Requests Used", ".status.used.requests.tflops"),
            _col("VRAM Requests Used", ".status.used.requests.vram"),
            _col("Workers Used", ".status.used.workers", "integer"),
            _col("Max Workers", ".spec.total.maxWorkers", "integer"),
            _col("Alert Threshold", ".spec.total.alertThresholdPercent", "integer", priority=1),
            _AGE,
        ),
    ),
    KindInfo(
        "ProviderConfig",
        "providerconfigs",
        False,
        ProviderConfig,
        (_col("Vendor", ".spec.vendor"), _AGE),
    ),
    KindInfo("GPUNodeClaim", "gpunodeclaims", False, GPUNodeClaim, (_PHASE, _AGE)),
    KindInfo("GPUNodeClass", "gpunodeclasses", False, GPUNodeClass, (_AGE,)),
    KindInfo(
        "TensorFusionConnection",
        "tensorfusionconnections",
        True,
        TensorFusionConnection,
        (_PHASE, _AGE),
    ),
)

_BY_KIND: Final[dict[str, KindInfo]] = {info.kind: info for info in KINDS}


def kind_info(kind: str) -> KindInfo:
    """The registry entry of a kind; ``KeyError`` when the kind is not ours."""
    return _BY_KIND[kind]


def _identity(data: Mapping[str, Any]) -> tuple[str | None, str | None]:
    metadata = data.get("metadata")
    if not isinstance(metadata, Mapping):
        return None, None
    name, namespace = metadata.get("name"), metadata.get("namespace")
    return (
        name if isinstance(name, str) else None,
        namespace if isinstance(namespace, str) else None,
    )


def load_object(data: Mapping[str, Any]) -> KubeObject:
    """Validate a ``tensor-fusion.ai/v1`` object (a parsed manifest) into its model.

    Dispatches on ``kind``; raises :class:`ModelError` naming kind, object, field path, value and
    what is allowed.
    """
    if not isinstance(data, Mapping):
        raise ModelError(None, None, [FieldIssue("", "must be an object", describe_value(data))])
    kind = data.get("kind")
    name, namespace = _identity(data)
    info = _BY_KIND.get(kind) if isinstance(kind, str) else None
    if info is None:
        allowed = ", ".join(sorted(_BY_KIND))
        issue = (
            FieldIssue("kind", "required field is missing")
            if kind is None
            else FieldIssue("kind", f"must be one of {allowed}", describe_value(kind))
        )
        raise ModelError(None, name, [issue], namespace)
    return _validate(info.model, info.kind, data, name, namespace)


def load_as(model: type[ObjectT], data: Mapping[str, Any]) -> ObjectT:
    """Validate ``data`` as one known kind; the ``kind`` field must match when present."""
    expected = model.model_fields["kind"].default
    name, namespace = _identity(data)
    kind = data.get("kind", expected)
    if kind != expected:
        issue = FieldIssue("kind", f'must be "{expected}"', describe_value(kind))
        raise ModelError(expected, name, [issue], namespace)
    return _validate(model, expected, data, name, namespace)


def _validate(
    model: type[ObjectT],
    kind: str,
    data: Mapping[str, Any],
    name: str | None,
    namespace: str | None,
) -> ObjectT:
    api_version = data.get("apiVersion")
    if api_version != API_VERSION:
        issue = (
            FieldIssue("apiVersion", "required field is missing")
            if api_version is None
            else FieldIssue("apiVersion", f'must be "{API_VERSION}"', describe_value(api_version))
        )
        raise ModelError(kind, name, [issue], namespace)
    try:
        return model.model_validate(data)
    except ValidationError as error:
        raise ModelError(kind, name, issues_from(error), namespace) from None


def to_wire(obj: BaseModel, *, exclude_unset: bool = False) -> dict[str, Any]:
    """JSON-ready dict with camelCase keys, canonical quantities and no null fields."""
    return obj.model_dump(
        mode="json", by_alias=True, exclude_none=True, exclude_unset=exclude_unset
    )


def unknown_fields(obj: BaseModel, prefix: str = "") -> list[str]:
    """Wire paths of fields the model does not define (kept, but a likely typo)."""
    found: list[str] = []
    extra = obj.model_extra or {}
    if not getattr(obj, "crd_preserve_unknown_fields", False):
        found.extend(f"{prefix}{key}" for key in extra)
    for name, field in type(obj).model_fields.items():
        value = getattr(obj, name)
        path = f"{prefix}{field.alias or name}"
        _collect(value, path, found)
    return found


def _collect(value: Any, path: str, found: list[str]) -> None:
    if isinstance(value, BaseModel):
        found.extend(unknown_fields(value, f"{path}."))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _collect(item, f"{path}[{index}]", found)
    elif isinstance(value, dict):
        for key, item in value.items():
            if isinstance(item, BaseModel | list):
                _collect(item, f"{path}.{key}", found)
