"""request_from_pod: normalised annotations → AllocationRequest (scheduling.md §2)."""

from __future__ import annotations

from typing import Any

import pytest

from tensorfusion.domain.admission import AnnotationError
from tensorfusion.domain.pod_request import request_from_pod
from tensorfusion.domain.vocabulary import IsolationMode, QoSLevel, TopologyMode, TopologySource

from .admission_builders import P


def worker(annotations: dict[str, str], **extra: Any) -> dict[str, Any]:
    pod: dict[str, Any] = {
        "metadata": {
            "name": "w",
            "namespace": "ns",
            "uid": "uid-1",
            "labels": {P + "workload": "wl"},
            "annotations": {P + key: value for key, value in annotations.items()},
        },
        "spec": {"containers": [{"name": "app"}]},
    }
    pod.update(extra)
    return pod


def test_full_request() -> None:
    pod = worker(
        {
            "gpupool": "pool",
            "tflops-request": "10",
            "tflops-limit": "20",
            "vram-request": "4Gi",
            "vram-limit": "8Gi",
            "gpu-count": "2",
            "gpu-indices": "1,3",
            "isolation": "hard",
            "qos": "critical",
            "gpu-model": "A100",
            "vendor": "NVIDIA",
            "require-gpu-topology": "true",
            "gpu-topology-max-tier": "2",
            "gpu-topology-source": "numa",
            "container-gpu-count": '{"b":1,"a":1}',
        }
    )
    pod["spec"]["containers"][0]["resources"] = {"limits": {P + "index_1": "2"}}
    request = request_from_pod(pod)
    assert request.pool == "pool"
    assert (request.namespace, request.pod_name, request.pod_uid) == ("ns", "w", "uid-1")
    assert request.workload == "wl"
    assert request.count == 2
    assert request.gpu_indices == (1, 3)
    assert request.isolation is IsolationMode.HARD
    assert request.qos is QoSLevel.CRITICAL
    assert request.request.tflops_milli == 10_000 and request.request.vram_bytes == 4 << 30
    assert request.limit.tflops_milli == 20_000 and request.limit.vram_bytes == 8 << 30
    assert request.gpu_model == "A100" and request.vendor == "NVIDIA"
    assert request.topology.mode is TopologyMode.HARD
    assert request.topology.max_tier == 2
    assert request.topology.source is TopologySource.NUMA
    assert request.container_gpu_count == (("a", 1), ("b", 1))
    assert request.pod_index == 10
    assert request.key == "ns/w"


def test_defaults() -> None:
    request = request_from_pod(worker({"gpupool": "pool", "compute-percent-request": "50"}))
    assert request.count == 1
    assert request.isolation is IsolationMode.SOFT
    assert request.qos is QoSLevel.MEDIUM
    assert request.request.percent_milli == 50_000
    assert request.limit.is_zero()
    assert request.gpu_indices == () and request.gpu_model is None and request.pod_index is None
    assert request.topology.mode is None


def test_indices_give_the_count_when_it_is_absent() -> None:
    assert request_from_pod(worker({"gpupool": "p", "gpu-indices": "0,1,2"})).count == 3


def test_soft_topology_and_namespace_default() -> None:
    pod = worker({"gpupool": "p", "require-gpu-topology": "false"})
    del pod["metadata"]["namespace"]
    request = request_from_pod(pod)
    assert request.topology.mode is TopologyMode.SOFT
    assert request.namespace == "default"


@pytest.mark.parametrize(
    ("annotations", "message"),
    [
        ({}, f'{P}gpupool: invalid value "": required: the pool the pod was admitted to'),
        (
            {"gpupool": "p", "vram-limit": "16GB"},
            f'{P}vram-limit: invalid value "16GB": not a quantity (example: 16Gi)',
        ),
        (
            {"gpupool": "p", "gpu-count": "0"},
            f'{P}gpu-count: invalid value "0": must be an integer between 1 and 128',
        ),
        (
            {"gpupool": "p", "gpu-count": "2", "gpu-indices": "1"},
            f'{P}gpu-count: invalid value "2": must equal the number of entries of '
            f"{P}gpu-indices (1)",
        ),
        (
            {"gpupool": "p", "isolation": "x"},
            f'{P}isolation: invalid value "x": must be one of shared, soft, hard, partitioned',
        ),
        (
            {"gpupool": "p", "qos": "x"},
            f'{P}qos: invalid value "x": must be one of low, medium, high, critical',
        ),
        (
            {"gpupool": "p", "tflops-limit": "1", "compute-percent-limit": "1"},
            f'{P}compute-percent-limit: invalid value "1": mutually exclusive with {P}tflops-limit',
        ),
        (
            {"gpupool": "p", "container-gpu-count": "{bad"},
            f'{P}container-gpu-count: invalid value "{{bad": must be a JSON object of container '
            'name to GPU count, e.g. {"app":2}',
        ),
        (
            {"gpupool": "p", "gpu-topology-max-tier": "7"},
            f'{P}gpu-topology-max-tier: invalid value "7": must be an integer between 0 and 3',
        ),
        (
            {"gpupool": "p", "compute-percent-request": "150"},
            f'{P}compute-percent-request: invalid value "150": must be greater than 0 and at '
            "most 100",
        ),
    ],
)
def test_bad_annotations_raise(annotations: dict[str, str], message: str) -> None:
    with pytest.raises(AnnotationError) as caught:
        request_from_pod(worker(annotations))
    assert caught.value.message == message
    assert caught.value.code == 400


def test_all_problems_are_reported_together() -> None:
    with pytest.raises(AnnotationError) as caught:
        request_from_pod(worker({"qos": "x", "vram-request": "y"}))
    assert [item.message.split(":", 1)[0] for item in caught.value.problems] == [
        P + "gpupool",
        P + "vram-request",
        P + "qos",
    ]


def test_bad_index_resource_raises() -> None:
    pod = worker({"gpupool": "p"})
    pod["spec"]["containers"][0]["resources"] = {"limits": {P + "index_0": "9"}}
    with pytest.raises(AnnotationError, match="index_0"):
        request_from_pod(pod)
