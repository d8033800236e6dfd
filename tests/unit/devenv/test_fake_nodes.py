"""The simulated GPU file of a fake node and the usage of its worker pods."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tensorfusion.devenv.fake_nodes import FakeNode, WorkerGPUUsage, fake_nodes, simulation_text
from tensorfusion.devenv.workload_pods import worker_loads
from tensorfusion.domain.devices.simulation import parse_simulation
from tensorfusion.sim.cluster_file import load_cluster

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "cluster.yaml"


@pytest.fixture(scope="module")
def nodes() -> list[FakeNode]:
    return fake_nodes(load_cluster(EXAMPLE))


def test_every_node_of_the_example_with_its_hardware(nodes: list[FakeNode]) -> None:
    assert [n.name for n in nodes] == ["a100-0", "a100-1", "l40s-0", "l40s-1"]
    assert nodes[0].product == "NVIDIA-A100-SXM4-80GB"
    assert sum(n.spec.gpus.count for n in nodes) == 32


def test_the_simulation_file_is_what_the_agent_reads(nodes: list[FakeNode]) -> None:
    node = nodes[0]
    loads = [WorkerGPUUsage("train-0", 3, 32.5, 3 << 30)]
    spec = parse_simulation(simulation_text(node, loads), "test", node.name)
    devices = [gpu.device for gpu in spec.gpus]
    assert [d.uuid for d in devices] == [f"GPU-a100-0-{i}" for i in range(8)]
    assert [d.numa_node for d in devices] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert [[w.name for w in gpu.workers] for gpu in spec.gpus] == [
        [], [], [], ["train-0"], [], [], [], []]  # fmt: skip
    assert [len(d.nvlinks) for d in devices] == [7] * 8  # nvlink: all


def _pod(annotations: dict[str, str], name: str = "w") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "default", "annotations": annotations}}


def test_a_worker_uses_what_it_requested_on_the_gpus_it_holds(nodes: list[FakeNode]) -> None:
    node = nodes[0]  # A100: 312 TFLOPS
    pod = _pod({"tensor-fusion.ai/gpu-ids": "gpu-a100-0-1,gpu-a100-0-5",
                "tensor-fusion.ai/tflops-request": "156",
                "tensor-fusion.ai/vram-request": "4Gi"})  # fmt: skip
    assert worker_loads(pod, node) == [WorkerGPUUsage("w", 1, 50.0, 4 << 30),
                                       WorkerGPUUsage("w", 5, 50.0, 4 << 30)]  # fmt: skip


def test_compute_percent_requests_and_foreign_gpus(nodes: list[FakeNode]) -> None:
    node = nodes[0]
    pod = _pod({"tensor-fusion.ai/gpu-ids": "gpu-a100-0-2,gpu-l40s-0-0",
                "tensor-fusion.ai/compute-percent-request": "25"})  # fmt: skip
    assert worker_loads(pod, node) == [WorkerGPUUsage("w", 2, 25.0, 0)]
    assert worker_loads(_pod({}), node) == []
    too_much = _pod({"tensor-fusion.ai/gpu-ids": "gpu-a100-0-0",
                     "tensor-fusion.ai/tflops-request": "1000"})  # fmt: skip
    assert worker_loads(too_much, node)[0].compute_percent == 100.0
