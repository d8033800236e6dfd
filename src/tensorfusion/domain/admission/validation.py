"""Syntax check of every TensorFusion annotation of a pod (admission.md §5, "format" column).

All problems are collected; nothing stops at the first one. The result holds the parsed values in
exact integer units (TFLOPs and percent in thousandths, VRAM in bytes).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, TypeVar

from tensorfusion.domain.annotation_errors import Problem, invalid_value
from tensorfusion.domain.annotation_values import (
    InvalidValueError,
    enum_rule,
    parse_bool,
    parse_enum,
    parse_index_list,
    parse_int,
    parse_name_list,
    parse_non_empty,
    parse_percent_milli,
    parse_tflops_milli,
    parse_vram_bytes,
)
from tensorfusion.domain.annotations import DISABLE_FEATURES, INDEX_MAX, INDEX_MIN, Keys
from tensorfusion.domain.durations import DurationError, parse_go_duration
from tensorfusion.domain.object_views import annotations_of, labels_of
from tensorfusion.domain.vocabulary import IsolationMode, QoSLevel, TopologySource

__all__ = [
    "AUTOSCALE_TARGETS",
    "REMOTE_RULE",
    "ParsedAnnotations",
    "validate_annotations",
]

AUTOSCALE_TARGETS: Final = ("compute", "vram", "all")
REMOTE_RULE: Final = "remote vGPU is not supported by this version"
_MEBIBYTE: Final = 1 << 20

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class ParsedAnnotations:
    """The pod's TF annotations, parsed; None = absent (or invalid, with a problem recorded)."""

    raw: Mapping[str, str] = field(default_factory=dict)
    enabled_replicas: int | None = None
    workload_profile: str | None = None
    gpupool: str | None = None
    is_local_gpu: bool | None = None
    sidecar_worker: bool | None = None
    dedicated_gpu: bool | None = None
    autoscale: bool | None = None
    gang_enabled: bool | None = None
    require_gpu_topology: bool | None = None
    isolation: IsolationMode | None = None
    partition_id: str | None = None
    worker_pod_template: str | None = None
    tflops_limit: int | None = None
    tflops_request: int | None = None
    vram_limit: int | None = None
    vram_request: int | None = None
    percent_limit: int | None = None
    percent_request: int | None = None
    gpu_count: int | None = None
    gpu_indices: tuple[int, ...] | None = None
    qos: QoSLevel | None = None
    gpu_model: str | None = None
    vendor: str | None = None
    inject_container: tuple[str, ...] | None = None
    autoscale_target: str | None = None
    disable_features: tuple[str, ...] | None = None
    gang_min_members: int | None = None
    gang_timeout: str | None = None
    eviction_protection: str | None = None
    gpu_topology_max_tier: int | None = None
    gpu_topology_source: TopologySource | None = None
    host_port_auto: bool = False


def _enum_of(values: tuple[str, ...]) -> Callable[[str], str]:
    def parse(text: str) -> str:
        if text not in values:
            raise InvalidValueError(enum_rule(values))
        return text

    return parse


def _duration(text: str) -> str:
    parse_go_duration(text)
    return text


def _min_members(text: str) -> int:
    value = parse_int(text, 0)
    if value == 1:
        raise InvalidValueError("must be 0 or an integer of at least 2")
    return value


class _Collector:
    def __init__(self, annotations: Mapping[str, str]) -> None:
        self.annotations = annotations
        self.problems: list[Problem] = []
        self.values: dict[str, Any] = {}

    def take(self, attribute: str, key: str, parser: Callable[[str], T]) -> T | None:
        text = self.annotations.get(key)
        if text is None:
            return None
        try:
            value = parser(str(text))
        except (InvalidValueError, DurationError) as error:
            self.problems.append(invalid_value(key, str(text), error.rule))
            return None
        self.values[attribute] = value
        return value


def validate_annotations(
    pod: Mapping[str, Any], keys: Keys
) -> tuple[ParsedAnnotations, list[Problem], list[str]]:
    """Parse every TF annotation present; return the values, the problems and the warnings."""
    annotations = annotations_of(pod)
    labels = labels_of(pod)
    warnings: list[str] = []
    c = _Collector(annotations)
    c.take("enabled_replicas", keys.enabled_replicas, lambda t: parse_int(t, 0))
    c.take("workload_profile", keys.workload_profile, parse_non_empty)
    c.take("gpupool", keys.gpupool, parse_non_empty)
    for attribute in (
        "is_local_gpu",
        "sidecar_worker",
        "dedicated_gpu",
        "autoscale",
        "gang_enabled",
        "require_gpu_topology",
    ):
        c.take(attribute, getattr(keys, attribute), parse_bool)
    c.take("isolation", keys.isolation, lambda t: parse_enum(t, IsolationMode))
    c.take("partition_id", keys.partition_id, parse_non_empty)
    template = annotations.get(keys.worker_pod_template)
    if template is not None:
        c.problems.append(invalid_value(keys.worker_pod_template, str(template), REMOTE_RULE))
    c.take("tflops_limit", keys.tflops_limit, parse_tflops_milli)
    c.take("tflops_request", keys.tflops_request, parse_tflops_milli)
    vram_limit = c.take("vram_limit", keys.vram_limit, parse_vram_bytes)
    vram_request = c.take("vram_request", keys.vram_request, parse_vram_bytes)
    c.take("percent_limit", keys.compute_percent_limit, parse_percent_milli)
    c.take("percent_request", keys.compute_percent_request, parse_percent_milli)
    for tflops_key, percent_key in (
        (keys.tflops_limit, keys.compute_percent_limit),
        (keys.tflops_request, keys.compute_percent_request),
    ):
        if tflops_key in annotations and percent_key in annotations:
            c.problems.append(
                invalid_value(
                    percent_key,
                    str(annotations[percent_key]),
                    f"mutually exclusive with {tflops_key}",
                    rank_as="tflops-with-compute-percent",
                )
            )
    for key, value in ((keys.vram_limit, vram_limit), (keys.vram_request, vram_request)):
        if value is not None and 0 < value < _MEBIBYTE:
            warnings.append(
                f'{key}: "{annotations[key]}" is less than 1Mi; VRAM is counted in bytes '
                f"(did you mean {annotations[key]}Mi?)"
            )
    count = c.take("gpu_count", keys.gpu_count, lambda t: parse_int(t, INDEX_MIN, INDEX_MAX))
    indices = c.take("gpu_indices", keys.gpu_indices, parse_index_list)
    if count is not None and indices is not None and count != len(indices):
        c.problems.append(
            invalid_value(
                keys.gpu_count,
                str(annotations[keys.gpu_count]),
                f"must equal the number of entries of {keys.gpu_indices} ({len(indices)})",
                rank_as="gpu-count-with-gpu-indices",
            )
        )
    c.take("qos", keys.qos, lambda t: parse_enum(t, QoSLevel))
    c.take("gpu_model", keys.gpu_model, parse_non_empty)
    c.take("vendor", keys.vendor, parse_non_empty)
    c.take("inject_container", keys.inject_container, _container_list(pod))
    c.take("autoscale_target", keys.autoscale_target, _enum_of(AUTOSCALE_TARGETS))
    features = c.take("disable_features", keys.disable_features, parse_name_list)
    for item in features or ():
        if item not in DISABLE_FEATURES:
            warnings.append(
                f'{keys.disable_features}: unknown feature "{item}" ignored '
                f"(known: {', '.join(DISABLE_FEATURES)})"
            )
    c.take("gang_min_members", keys.gang_min_members, _min_members)
    c.take("gang_timeout", keys.gang_timeout, _duration)
    c.take("eviction_protection", keys.eviction_protection, _duration)
    c.take("gpu_topology_max_tier", keys.gpu_topology_max_tier, lambda t: parse_int(t, 0, 3))
    c.take(
        "gpu_topology_source",
        keys.gpu_topology_source,
        lambda t: parse_enum(t, TopologySource),
    )
    host_port_auto = labels.get(keys.host_port) == "auto"
    if host_port_auto:
        warnings.append(
            f"{keys.host_port}=auto: host port assignment is declared but not acted on "
            "by this version"
        )
    parsed = ParsedAnnotations(raw=annotations, host_port_auto=host_port_auto, **c.values)
    return parsed, c.problems, warnings


def _container_list(pod: Mapping[str, Any]) -> Callable[[str], tuple[str, ...]]:
    names = [str(item.get("name", "")) for item in (pod.get("spec") or {}).get("containers") or ()]

    def parse(text: str) -> tuple[str, ...]:
        items = parse_name_list(text)
        if not items:
            raise InvalidValueError("must list at least one container name")
        missing = [item for item in items if item not in names]
        if missing:
            known = ", ".join(names) or "none"
            raise InvalidValueError(
                f"no container named {', '.join(missing)} in the pod (containers: {known})"
            )
        return items

    return parse
