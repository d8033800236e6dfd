"""Read a worker pod's normalised annotations into an `AllocationRequest` (scheduling.md §2).

Unparsable or missing required values raise `AnnotationError` naming the annotation, so the
allocator can report every node as unresolvable; nothing defaults to zero silently.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from tensorfusion.domain.allocation_request import (
    AllocationRequest,
    ResourceAmount,
    TopologyOverrides,
)
from tensorfusion.domain.annotation_errors import AnnotationError, Problem, invalid_value
from tensorfusion.domain.annotation_values import (
    InvalidValueError,
    parse_bool,
    parse_enum,
    parse_index_list,
    parse_int,
    parse_non_empty,
    parse_percent_milli,
    parse_tflops_milli,
    parse_vram_bytes,
)
from tensorfusion.domain.annotations import (
    INDEX_MAX,
    INDEX_MIN,
    KEYS,
    IndexResourceError,
    Keys,
    pod_index_from_containers,
)
from tensorfusion.domain.object_views import (
    annotations_of,
    labels_of,
    name_of,
    namespace_of,
    uid_of,
)
from tensorfusion.domain.vocabulary import IsolationMode, QoSLevel, TopologyMode, TopologySource

__all__ = ["request_from_pod"]

T = TypeVar("T")
_CONTAINER_COUNT_RULE = 'must be a JSON object of container name to GPU count, e.g. {"app":2}'


def _container_gpu_count(text: str) -> tuple[tuple[str, int], ...]:
    try:
        value = json.loads(text)
    except ValueError:
        raise InvalidValueError(_CONTAINER_COUNT_RULE) from None
    if not isinstance(value, dict) or not all(
        isinstance(count, int) and not isinstance(count, bool) and count > 0
        for count in value.values()
    ):
        raise InvalidValueError(_CONTAINER_COUNT_RULE)
    return tuple(sorted(value.items()))


def request_from_pod(pod: Mapping[str, Any], keys: Keys = KEYS) -> AllocationRequest:
    """The allocation request of a worker pod; raises `AnnotationError` on bad annotations."""
    annotations = annotations_of(pod)
    problems: list[Problem] = []

    def take(key: str, parser: Callable[[str], T]) -> T | None:
        text = annotations.get(key)
        if text is None:
            return None
        try:
            return parser(str(text))
        except InvalidValueError as error:
            problems.append(invalid_value(key, str(text), error.rule))
            return None

    pool = annotations.get(keys.gpupool)
    if not isinstance(pool, str) or not pool.strip():
        problems.append(
            invalid_value(
                keys.gpupool, str(pool or ""), "required: the pool the pod was admitted to"
            )
        )
        pool = ""
    tflops_request = take(keys.tflops_request, parse_tflops_milli)
    tflops_limit = take(keys.tflops_limit, parse_tflops_milli)
    vram_request = take(keys.vram_request, parse_vram_bytes)
    vram_limit = take(keys.vram_limit, parse_vram_bytes)
    percent_request = take(keys.compute_percent_request, parse_percent_milli)
    percent_limit = take(keys.compute_percent_limit, parse_percent_milli)
    for tflops_key, percent_key in (
        (keys.tflops_request, keys.compute_percent_request),
        (keys.tflops_limit, keys.compute_percent_limit),
    ):
        if tflops_key in annotations and percent_key in annotations:
            problems.append(
                invalid_value(
                    percent_key,
                    str(annotations[percent_key]),
                    f"mutually exclusive with {tflops_key}",
                    rank_as="tflops-with-compute-percent",
                )
            )
    count = take(keys.gpu_count, lambda text: parse_int(text, INDEX_MIN, INDEX_MAX))
    indices = take(keys.gpu_indices, parse_index_list) or ()
    if count is None:
        count = len(indices) or 1
    elif indices and count != len(indices):
        problems.append(
            invalid_value(
                keys.gpu_count,
                str(annotations[keys.gpu_count]),
                f"must equal the number of entries of {keys.gpu_indices} ({len(indices)})",
                rank_as="gpu-count-with-gpu-indices",
            )
        )
    isolation = take(keys.isolation, lambda text: parse_enum(text, IsolationMode))
    qos = take(keys.qos, lambda text: parse_enum(text, QoSLevel))
    required = take(keys.require_gpu_topology, parse_bool)
    topology = TopologyOverrides(
        mode=None if required is None else TopologyMode.HARD if required else TopologyMode.SOFT,
        max_tier=take(keys.gpu_topology_max_tier, lambda text: parse_int(text, 0, 3)),
        source=take(keys.gpu_topology_source, lambda text: parse_enum(text, TopologySource)),
    )
    gpu_model = take(keys.gpu_model, parse_non_empty)
    vendor = take(keys.vendor, parse_non_empty)
    partition = take(keys.partition_id, parse_non_empty)
    split = take(keys.container_gpu_count, _container_gpu_count) or ()
    try:
        pod_index = pod_index_from_containers(pod, keys)
    except IndexResourceError as error:
        problems.append(Problem(str(error)))
        pod_index = None
    if problems:
        raise AnnotationError(problems)
    return AllocationRequest(
        pool=pool.strip(),
        namespace=namespace_of(pod) or "default",
        pod_name=name_of(pod),
        pod_uid=uid_of(pod),
        workload=str(labels_of(pod).get(keys.workload) or ""),
        count=count,
        isolation=isolation or IsolationMode.SOFT,
        qos=qos or QoSLevel.MEDIUM,
        request=ResourceAmount(tflops_request or 0, percent_request or 0, vram_request or 0),
        limit=ResourceAmount(tflops_limit or 0, percent_limit or 0, vram_limit or 0),
        gpu_indices=indices,
        gpu_model=gpu_model,
        vendor=vendor,
        partition_template_id=partition,
        topology=topology,
        pod_index=pod_index,
        container_gpu_count=split,
    )
