"""Quantity fields: accepted spellings, canonical output and exact values."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tensorfusion.domain.model import (
    API_VERSION,
    GPU,
    GPUNode,
    ModelError,
    Resource,
    TensorFusionWorkload,
    load_as,
    to_wire,
)
from tensorfusion.domain.quantities import format_bytes, format_milli


def _workload(requests: dict[str, Any]) -> TensorFusionWorkload:
    data = {
        "apiVersion": API_VERSION,
        "kind": "TensorFusionWorkload",
        "metadata": {"name": "w", "namespace": "ns"},
        "spec": {"resources": {"requests": requests}},
    }
    return load_as(TensorFusionWorkload, data)


@pytest.mark.parametrize(
    ("text", "value", "canonical"),
    [
        ("100", Decimal(100), "100"),
        ("0.5", Decimal("0.5"), "500m"),
        ("500m", Decimal("0.5"), "500m"),
        ("1e3", Decimal(1000), "1e3"),
        (312, Decimal(312), "312"),
        (0.5, Decimal("0.5"), "500m"),
    ],
)
def test_tflops_spellings(text: Any, value: Decimal, canonical: str) -> None:
    workload = _workload({"tflops": text})
    tflops = workload.spec.resources.requests.tflops
    assert tflops is not None and tflops.value == value
    assert to_wire(workload)["spec"]["resources"]["requests"]["tflops"] == canonical


@pytest.mark.parametrize(
    ("text", "count", "canonical"),
    [
        ("16Gi", 16 * 2**30, "16Gi"),
        ("81920Mi", 80 * 2**30, "80Gi"),
        ("1536Mi", 1536 * 2**20, "1536Mi"),
        ("1G", 10**9, "1G"),
        (1024, 1024, "1024"),
    ],
)
def test_vram_spellings(text: Any, count: int, canonical: str) -> None:
    workload = _workload({"vram": text})
    vram = workload.spec.resources.requests.vram
    assert vram is not None and vram.value == count
    assert to_wire(workload)["spec"]["resources"]["requests"]["vram"] == canonical


@pytest.mark.parametrize("bad", ["16GB", "1.2.3", " 5", "", "Gi", True, [], {"a": 1}, float("nan")])
def test_bad_quantities_are_rejected(bad: Any) -> None:
    with pytest.raises(ModelError, match="must be a Kubernetes quantity"):
        _workload({"vram": bad})


def test_status_quantities_may_be_negative() -> None:
    node = load_as(
        GPUNode,
        {
            "apiVersion": API_VERSION,
            "kind": "GPUNode",
            "status": {"virtualAvailableTFlops": "-20", "nodeInfo": {"ramSize": "512Gi"}},
        },
    )
    assert node.status.virtual_available_tflops is not None
    assert node.status.virtual_available_tflops.value == -20
    assert node.status.node_info is not None
    assert to_wire(node)["status"]["nodeInfo"] == {"ramSize": "512Gi"}


def test_gpu_capacity_is_written_canonically() -> None:
    gpu = load_as(
        GPU,
        {
            "apiVersion": API_VERSION,
            "kind": "GPU",
            "metadata": {"name": "gpu-0"},
            "status": {"capacity": {"tflops": "989.5", "vram": "81920Mi"}},
        },
    )
    assert to_wire(gpu)["status"]["capacity"] == {"tflops": "989500m", "vram": "80Gi"}


@given(
    tflops=st.integers(min_value=0, max_value=10**9),
    vram=st.integers(min_value=0, max_value=2**50),
)
def test_resource_round_trip_is_exact(tflops: int, vram: int) -> None:
    wire = {"tflops": format_milli(tflops), "vram": format_bytes(vram)}
    resource = Resource.model_validate(wire)
    assert resource.tflops is not None and resource.tflops.milli() == tflops
    assert resource.vram is not None and resource.vram.value == vram
    again = Resource.model_validate(to_wire(resource))
    assert again == resource
    assert to_wire(again) == to_wire(resource)
