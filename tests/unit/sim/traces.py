"""Random small clusters and traces for the simulator's property tests."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from tensorfusion.sim.cluster_file import ClusterFile
from tensorfusion.sim.workload_file import WorkloadFile

POOL = "shared"
PREFIX = "tensor-fusion.ai/"
HARDWARE = [
    {"model": "big", "fp16TFlops": "300", "vram": "80Gi"},
    {"model": "small", "fp16TFlops": "100", "vram": "24Gi"},
]


@st.composite
def clusters(draw: st.DrawFn) -> ClusterFile:
    """One pool of 1-4 node groups (1-4 GPUs of either model), sometimes a namespace quota."""
    nodes = [
        {
            "name": f"n{i}",
            "replicas": draw(st.integers(1, 2)),
            "pool": POOL,
            "cpu": draw(st.sampled_from(["4", "16", "64"])),
            "memory": draw(st.sampled_from(["32Gi", "256Gi"])),
            "gpus": {
                "model": draw(st.sampled_from(["big", "small"])),
                "count": draw(st.integers(1, 4)),
                "numaNodes": 1,
                "nvlink": draw(st.sampled_from(["none", "all"])),
            },
        }
        for i in range(draw(st.integers(1, 4)))
    ]
    pool: dict[str, Any] = {
        "name": POOL,
        "isDefault": True,
        "placementMode": draw(
            st.sampled_from(["CompactFirst", "LowLoadFirst", "NodeCompactGPULowLoad"])
        ),
    }
    data: dict[str, Any] = {"hardware": HARDWARE, "pools": [pool], "nodes": nodes}
    if draw(st.booleans()):
        total: dict[str, Any] = {"requests": {"tflops": draw(st.sampled_from(["150", "400"]))}}
        total["maxWorkers"] = draw(st.integers(1, 4))
        data["quotas"] = [{"namespace": "team", "name": "q", "total": total}]
    return ClusterFile.model_validate(data)


@st.composite
def entries(draw: st.DrawFn, number: int) -> dict[str, Any]:
    """One trace entry: a few identical pods asking for GPUs (and sometimes much CPU)."""
    annotations = {PREFIX + "vram-request": draw(st.sampled_from(["4Gi", "20Gi", "40Gi"]))}
    if draw(st.booleans()):
        annotations[PREFIX + "compute-percent-request"] = draw(st.sampled_from(["10", "60"]))
    else:
        annotations[PREFIX + "tflops-request"] = draw(st.sampled_from(["10", "50", "150"]))
    annotations[PREFIX + "gpu-count"] = str(draw(st.integers(1, 2)))
    if draw(st.integers(0, 3)) == 0:
        annotations[PREFIX + "gpu-model"] = draw(st.sampled_from(["big", "small"]))
    cpu = draw(st.sampled_from(["1", "4", "12"]))
    return {
        "name": f"e{number}",
        "replicas": draw(st.integers(1, 6)),
        "arrival": draw(st.integers(0, 20)) * 60,
        "interval": draw(st.integers(0, 6)) * 30,
        "duration": draw(st.integers(1, 40)) * 60,
        "pod": {
            "metadata": {
                "namespace": draw(st.sampled_from(["default", "team"])),
                "labels": {PREFIX + "enabled": "true"},
                "annotations": annotations,
            },
            "spec": {
                "containers": [
                    {"name": "c", "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}}
                ]
            },
        },
    }


@st.composite
def workloads(draw: st.DrawFn) -> WorkloadFile:
    """1-5 entries."""
    count = draw(st.integers(1, 5))
    return WorkloadFile.model_validate({"workloads": [draw(entries(i)) for i in range(count)]})
