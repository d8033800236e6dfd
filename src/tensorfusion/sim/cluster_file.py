"""The simulator's cluster file: nodes, GPUs, pools, quotas, hardware table, policies."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from tensorfusion.domain.allocator.quota_status import quota_spec_problems
from tensorfusion.domain.autoscaling.settings import AutoScaleConfigError, parse_auto_set
from tensorfusion.domain.model import Oversubscription, unknown_fields
from tensorfusion.domain.model.quota import GPUResourceQuotaSpec, QuotaSingle, QuotaTotal
from tensorfusion.domain.model.scheduling import VerticalScalingRule
from tensorfusion.domain.quantities import QuantityError, parse_quantity
from tensorfusion.domain.vocabulary import GPUPhase, IsolationPolicy, PlacementMode
from tensorfusion.sim.input_errors import load_model
from tensorfusion.sim.input_limits import (
    CLUSTER_FILE_LIMITS,
    MAX_CLUSTER_GPUS,
    MAX_CLUSTER_NODES,
    too_many,
)

__all__ = [
    "ClusterFile",
    "GPUSpec",
    "HardwareModel",
    "NodeSpec",
    "PoolSpec",
    "QuotaFile",
    "load_cluster",
]


def _quantity(value: Any) -> str:
    text = str(value)
    try:
        quantity = parse_quantity(text)
    except QuantityError:
        raise ValueError("not a quantity (examples: 16Gi, 312, 1500m)") from None
    if quantity.value < 0:
        raise ValueError("must not be negative")
    return text


_NODE_NAME = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def _node_name(value: str) -> str:
    if len(value) > 253 or not _NODE_NAME.fullmatch(value):
        raise ValueError(
            "must be a DNS subdomain: lower-case letters, digits, '-' and '.', "
            "starting and ending with a letter or digit"
        )
    return value


QuantityText = Annotated[str, Field(min_length=1)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)


class HardwareModel(_Strict):
    """One row of the hardware table: model → fp16 TFLOPs and VRAM."""

    model: str = Field(min_length=1)
    vendor: str = "NVIDIA"
    fp16_tflops: QuantityText = Field(alias="fp16TFlops")
    vram: QuantityText

    _check = field_validator("fp16_tflops", "vram", mode="before")(_quantity)


class PoolCapacitySpec(_Strict):
    """The part of a pool's `capacityConfig` the simulator acts on (the GPUPool model's type)."""

    oversubscription: Oversubscription | None = None


class PoolSpec(_Strict):
    """A GPU pool of the virtual cluster."""

    name: str = Field(min_length=1)
    is_default: bool = Field(False, alias="isDefault")
    placement_mode: PlacementMode = Field(
        PlacementMode.NODE_COMPACT_GPU_LOW_LOAD, alias="placementMode"
    )
    capacity_config: PoolCapacitySpec = Field(
        default_factory=PoolCapacitySpec, alias="capacityConfig"
    )
    default_isolation_mode: Literal["shared", "soft", "hard", "partitioned"] = Field(
        "soft", alias="defaultIsolationMode"
    )
    default_qos: Literal["low", "medium", "high", "critical"] | None = Field(
        None, alias="defaultQoS"
    )
    vertical_scaling_rules: list[VerticalScalingRule] = Field(
        default_factory=list, alias="verticalScalingRules"
    )
    """The SchedulingConfigTemplate's rules: read by the right-sizing what-if (`--auto-scale`)."""


class GPUOverride(_Strict):
    """Per-index facts of one GPU of a node (phase, usedBy, NUMA node)."""

    index: int = Field(ge=0)
    phase: GPUPhase | None = None
    used_by: str | None = Field(None, alias="usedBy")
    numa_node: int | None = Field(None, alias="numaNode", ge=-1)


class GPUSpec(_Strict):
    """The GPUs of a node: `count` cards of one model with NUMA and NVLink topology."""

    model: str = Field(min_length=1)
    count: int = Field(ge=1, le=128)
    numa_nodes: int = Field(0, alias="numaNodes", ge=0, le=16)
    nvlink: Literal["none", "all", "pairs", "numa"] = "none"
    overrides: list[GPUOverride] = Field(default_factory=list)


class TaintSpec(_Strict):
    """A Kubernetes node taint."""

    key: str = Field(min_length=1)
    value: str = ""
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]


class NodeSpec(_Strict):
    """One node, or `replicas` identical nodes named `<name>-<i>`."""

    name: str = Field(min_length=1)
    replicas: int = Field(1, ge=1, le=100000)
    pool: str = Field(min_length=1)
    cpu: QuantityText = "64"
    memory: QuantityText = "512Gi"
    pods: int = Field(110, ge=1)
    ephemeral_storage: QuantityText = Field("1Ti", alias="ephemeralStorage")
    host_ram: QuantityText | None = Field(None, alias="hostRAM")
    data_disk: QuantityText = Field("0", alias="dataDisk")
    labels: dict[str, str] = Field(default_factory=dict)
    taints: list[TaintSpec] = Field(default_factory=list)
    unschedulable: bool = False
    requested: dict[str, QuantityText] = Field(default_factory=dict)
    gpus: GPUSpec
    agent_ready: bool = Field(True, alias="agentReady")

    _check = field_validator("cpu", "memory", "ephemeral_storage", "host_ram", "data_disk",
                             mode="before")(_quantity)  # fmt: skip
    _check_name = field_validator("name")(_node_name)

    def node_names(self) -> list[str]:
        """The node's name, or `<name>-<i>` (zero-padded) for each replica."""
        if self.replicas == 1:
            return [self.name]
        width = len(str(self.replicas - 1))
        return [f"{self.name}-{i:0{width}d}" for i in range(self.replicas)]

    @field_validator("requested", mode="before")
    @classmethod
    def _check_requested(cls, value: Any) -> Any:
        if isinstance(value, dict):
            return {k: _quantity(v) for k, v in value.items()}
        return value


class QuotaFile(_Strict):
    """A namespace's GPUResourceQuota: `total` and `single` are the model's spec types."""

    namespace: str = Field(min_length=1)
    name: str = "quota"
    total: QuotaTotal = Field(default_factory=QuotaTotal)
    single: QuotaSingle = Field(default_factory=QuotaSingle)

    def spec(self) -> GPUResourceQuotaSpec:
        """The GPUResourceQuota `spec`."""
        return GPUResourceQuotaSpec(total=self.total, single=self.single)


class ClusterFile(_Strict):
    """The whole virtual cluster."""

    isolation_policy: IsolationPolicy = Field(IsolationPolicy.STATIC, alias="isolationPolicy")
    hardware: list[HardwareModel] = Field(min_length=1)
    pools: list[PoolSpec] = Field(min_length=1)
    nodes: list[NodeSpec] = Field(min_length=1)
    quotas: list[QuotaFile] = Field(default_factory=list)
    scheduler_config: dict[str, Any] | None = Field(None, alias="schedulerConfig")

    @model_validator(mode="after")
    def _references(self) -> ClusterFile:
        _bounded(self.nodes)
        _unique("hardware", "model", [h.model for h in self.hardware])
        _unique("pools", "name", [p.name for p in self.pools])
        seen: dict[str, int] = {}
        for i, node in enumerate(self.nodes):
            for name in node.node_names():
                if name in seen:
                    raise ValueError(
                        f"nodes[{i}] ({node.name}): node name {name!r} is also a node of "
                        f"nodes[{seen[name]}]; names must be unique"
                    )
                seen[name] = i
            for j, override in enumerate(node.gpus.overrides):
                if override.index >= node.gpus.count:
                    raise ValueError(
                        f"nodes[{i}] ({node.name}).gpus.overrides[{j}].index: invalid value "
                        f"{override.index}: the node has GPUs 0..{node.gpus.count - 1}"
                    )
        _model_sections_hold(self)
        models = {h.model for h in self.hardware}
        pools = {p.name for p in self.pools}
        for i, node in enumerate(self.nodes):
            if node.pool not in pools:
                raise ValueError(
                    f"nodes[{i}] ({node.name}).pool: invalid value {node.pool!r}: "
                    f"no such pool (pools: {', '.join(sorted(pools))})"
                )
            if node.gpus.model not in models:
                raise ValueError(
                    f"nodes[{i}] ({node.name}).gpus.model: invalid value {node.gpus.model!r}: "
                    f"not in the hardware table ({', '.join(sorted(models))})"
                )
        return self


def _bounded(nodes: list[NodeSpec]) -> None:
    """The nodes and GPUs in total within their limits, checked before any name is built."""
    total = sum(n.replicas for n in nodes)
    if total > MAX_CLUSTER_NODES:
        raise ValueError(f"nodes: {too_many(total, 'nodes', MAX_CLUSTER_NODES)}")
    gpus = sum(n.replicas * n.gpus.count for n in nodes)
    if gpus > MAX_CLUSTER_GPUS:
        raise ValueError(f"nodes: {too_many(gpus, 'GPUs', MAX_CLUSTER_GPUS)}")


def _model_sections_hold(cluster: ClusterFile) -> None:
    """The sections typed by the CRD models: no unknown keys, and quota specs that hold."""
    problems: list[str] = []
    for i, pool in enumerate(cluster.pools):
        over = pool.capacity_config.oversubscription
        if over is not None:
            where = f"pools[{i}] ({pool.name}).capacityConfig.oversubscription."
            problems += [f"{where}{path}: unknown field" for path in unknown_fields(over)]
        for j, rule in enumerate(pool.vertical_scaling_rules):
            where = f"pools[{i}] ({pool.name}).verticalScalingRules[{j}]."
            problems += [f"{where}{path}: unknown field" for path in unknown_fields(rule)]
            try:
                parse_auto_set(rule.auto_scaling.auto_set_resources if rule.auto_scaling else None)
            except AutoScaleConfigError as exc:
                problems.append(f"{where}autoScaling.autoSetResources.{exc}")
    for i, quota in enumerate(cluster.quotas):
        where = f"quotas[{i}] ({quota.namespace})"
        for section in ("total", "single"):
            problems += [
                f"{where}.{section}.{path}: unknown field"
                for path in unknown_fields(getattr(quota, section))
            ]
        problems += [
            f"{where}.{problem.removeprefix('spec.')}"
            for problem in quota_spec_problems(quota.spec())
        ]
    if problems:
        raise ValueError("; ".join(problems))


def _unique(section: str, key: str, values: list[str]) -> None:
    seen: dict[str, int] = {}
    for i, value in enumerate(values):
        if value in seen:
            raise ValueError(
                f"{section}[{i}].{key}: invalid value {value!r}: already used by "
                f"{section}[{seen[value]}]; must be unique"
            )
        seen[value] = i


def load_cluster(path: Path) -> ClusterFile:
    """Read and validate a cluster file; InputError names the file, field and value."""
    return load_model(path, "cluster file", ClusterFile, "a mapping with nodes, pools and hardware",
                      CLUSTER_FILE_LIMITS)  # fmt: skip
