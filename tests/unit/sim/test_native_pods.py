"""Native pods in the workload file: CPU, memory, pod slots and whole nvidia.com/gpu cards."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from tensorfusion.cli.main import app
from tensorfusion.sim.cluster_file import ClusterFile
from tensorfusion.sim.engine import PodOutcome, SimPod
from tensorfusion.sim.input_errors import InputError
from tensorfusion.sim.native_pods import DEVICE_PLUGIN_USER
from tensorfusion.sim.runner import SimulationOptions, new_simulation
from tensorfusion.sim.virtual_cluster import VirtualCluster
from tensorfusion.sim.workload_file import WorkloadFile, load_workload

CLUSTER: dict[str, Any] = {
    "hardware": [{"model": "T4", "fp16TFlops": "65", "vram": "16Gi"}],
    "pools": [{"name": "p", "isDefault": True}],
    "nodes": [
        {"name": "n", "replicas": 2, "pool": "p", "cpu": "64", "memory": "256Gi",
         "gpus": {"model": "T4", "count": 4}},
    ],
}  # fmt: skip


def native(name: str, cpu: str, cards: int = 0, **entry: Any) -> dict[str, Any]:
    resources: dict[str, Any] = {"requests": {"cpu": cpu, "memory": "1Gi"}}
    if cards:
        resources["limits"] = {"nvidia.com/gpu": str(cards)}
    return {"name": name, "pod": {"spec": {"containers": [{"name": "c", "resources": resources}]}},
            **entry}  # fmt: skip


def whole_card(name: str, **entry: Any) -> dict[str, Any]:
    annotations = {"tensor-fusion.ai/gpu-count": "1",
                   "tensor-fusion.ai/compute-percent-request": "100"}  # fmt: skip
    pod = {
        "metadata": {"labels": {"tensor-fusion.ai/enabled": "true"}, "annotations": annotations},
        "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]},
    }
    return {"name": name, "pod": pod, **entry}


def run(entries: list[dict[str, Any]]) -> tuple[list[SimPod], VirtualCluster]:
    simulation = new_simulation(
        ClusterFile.model_validate(CLUSTER), WorkloadFile.model_validate({"workloads": entries}),
        Path("cluster.yaml"), SimulationOptions(alerts=False),
    )  # fmt: skip
    result = simulation.run()
    return result.pods, simulation.cluster


def test_native_pods_take_cpu_on_the_least_allocated_node_and_keep_tf_pods_off_it() -> None:
    pods, _ = run([
        native("big-0", "60", duration=100),
        native("big-1", "60", arrival=1, duration=100),
        whole_card("tf", arrival=2, replicas=2, duration=100),
    ])  # fmt: skip
    by_name = {p.name: p for p in pods}
    assert {by_name["big-0"].node, by_name["big-1"].node} == {"n-0", "n-1"}
    assert by_name["big-0"].outcome is PodOutcome.COMPLETED
    # 4 cores left on each node: the TF pods (1 core each) still fit, on GPUs of either node.
    assert all(by_name[f"tf-{i}"].placed_at == 2 for i in range(2))


def test_a_native_pod_that_does_not_fit_waits_and_is_placed_when_capacity_frees() -> None:
    pods, _ = run([
        native("first", "60", duration=50),
        native("second", "60", duration=50),
        native("third", "60", arrival=1, duration=10),
    ])  # fmt: skip
    third = next(p for p in pods if p.name == "third")
    assert third.placed_at == 50
    assert third.attempts == 2


def test_a_waiting_native_pod_is_explained_by_node_reasons() -> None:
    pods, _ = run([native("huge", "100")])
    (pod,) = pods
    assert pod.outcome is PodOutcome.WAITING
    assert pod.message == "0/2 nodes are available: 2 Insufficient cpu."


def test_whole_cards_go_to_the_device_plugin_and_come_back() -> None:
    entries = [
        native("cards", "1", cards=4, duration=10),
        native("cards-too", "1", cards=4, duration=100),
        whole_card("tf", arrival=1, duration=100),
        whole_card("after", arrival=20, replicas=4, duration=100),
    ]
    simulation = new_simulation(
        ClusterFile.model_validate(CLUSTER), WorkloadFile.model_validate({"workloads": entries}),
        Path("cluster.yaml"), SimulationOptions(alerts=False, until=15),
    )  # fmt: skip
    result = simulation.run()
    pods = {p.name: p for p in result.pods}
    gpus = simulation.cluster.allocator.gpus
    # Both nodes' 4 cards are held by the device plugin: the TF pod found no GPU at 1.
    assert pods["tf"].attempts == 2
    held = pods["cards-too"].gpus
    assert len(held) == 4 and all(gpus[g].used_by == DEVICE_PLUGIN_USER for g in held)
    # The first pod left at 10: its cards returned, and the waiting TF pod got one of them.
    assert pods["cards"].outcome is PodOutcome.COMPLETED
    assert all(gpus[g].used_by == "tensor-fusion" for g in pods["cards"].gpus)
    assert pods["tf"].placed_at == 10 and pods["tf"].gpus[0] in pods["cards"].gpus


@pytest.mark.parametrize(
    ("limits", "fragment"),
    [
        ({"nvidia.com/gpu": "0.5"}, "invalid value '0.5': nvidia.com/gpu counts whole cards"),
        ({"nvidia.com/gpu": "-1"}, "invalid value '-1'"),
    ],
)
def test_fractional_cards_are_refused_naming_file_entry_field_and_value(
    tmp_path: Path, limits: dict[str, str], fragment: str
) -> None:
    entry = {"name": "odd", "pod": {"spec": {"containers": [
        {"name": "c", "resources": {"limits": limits}}]}}}  # fmt: skip
    path = tmp_path / "w.yaml"
    path.write_text(yaml.safe_dump({"workloads": [entry]}), encoding="utf-8")
    with pytest.raises(InputError) as error:
        load_workload(path)
    message = str(error.value)
    assert str(path) in message and "workloads[0]" in message and "'odd'" in message
    assert "spec.containers[0].resources.limits.nvidia.com/gpu" in message
    assert fragment in message and "allowed values are integers >= 0" in message


def test_cli_exits_2_on_a_request_unequal_to_the_limit(tmp_path: Path) -> None:
    resources = {"requests": {"nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "2"}}
    entry = {"name": "uneven", "pod": {"spec": {"containers": [
        {"name": "c", "resources": resources}]}}}  # fmt: skip
    workload = tmp_path / "w.yaml"
    workload.write_text(yaml.safe_dump({"workloads": [entry]}), encoding="utf-8")
    cluster = tmp_path / "c.yaml"
    cluster.write_text(yaml.safe_dump(CLUSTER), encoding="utf-8")
    result = CliRunner().invoke(app, ["simulate", str(cluster), str(workload), "--quiet"])
    assert result.exit_code == 2
    assert "must equal the limit (2)" in result.stderr and "'uneven'" in result.stderr


@pytest.mark.parametrize("mode", ["FragmentationAware", "NodeCompactGPULowLoad"])
def test_in_a_fragmentation_aware_pool_a_cpu_pod_goes_where_no_gpu_needs_the_cpu(
    mode: str,
) -> None:
    # A 20-core native pod, then four whole-card pods that fill one node's GPUs, then a
    # 40-core native pod: the default choice puts it beside the other node's free GPUs;
    # FragmentationAware takes the CPU of the node whose GPUs are all held.
    cluster = {**CLUSTER, "pools": [{"name": "p", "isDefault": True, "placementMode": mode}]}
    simulation = new_simulation(
        ClusterFile.model_validate(cluster),
        WorkloadFile.model_validate({"workloads": [
            native("warm", "20", duration=100),
            whole_card("tf", arrival=1, replicas=4, duration=100),
            native("cpu", "40", arrival=2, duration=100),
        ]}),
        Path("cluster.yaml"), SimulationOptions(alerts=False),
    )  # fmt: skip
    by_name = {p.name: p for p in simulation.run().pods}
    gpu_nodes = {by_name[f"tf-{i}"].node for i in range(4)}
    if mode == "FragmentationAware":
        assert gpu_nodes == {by_name["cpu"].node}
    else:
        assert by_name["cpu"].node not in gpu_nodes
