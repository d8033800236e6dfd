"""The pod-resources client against a loopback PodResourcesLister, and the checkpoint fallback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tensorfusion.adapters.kubelet.pod_resources import (
    SOURCE_CHECKPOINT,
    SOURCE_POD_RESOURCES,
    PodResourcesError,
    list_pod_resources,
    read_checkpoint,
    read_device_assignments,
)
from tensorfusion.domain.devices.device_plugin_usage import CheckpointError, DeviceAssignment
from tensorfusion.domain.devices.kubelet_messages import (
    ContainerDevices,
    ContainerResources,
    KubeletPodResources,
    ListPodResourcesResponse,
    NUMANode,
    TopologyInfo,
)

from .kubelet_fakes import FakePodResourcesLister

GPU_A = "GPU-0aa1b2c3-d4e5-f6a7-b8c9-d0e1f2a3b4c5"

RESPONSE = ListPodResourcesResponse(
    (
        KubeletPodResources(
            "trainer",
            "ml",
            (
                ContainerResources(
                    "main",
                    (
                        ContainerDevices("nvidia.com/gpu", (GPU_A,), TopologyInfo((NUMANode(0),))),
                        ContainerDevices("tensor-fusion.ai/index_0", ("index_0-1",)),
                    ),
                ),
                ContainerResources("sidecar"),
            ),
        ),
        KubeletPodResources("idle", "default"),
    )
)

CHECKPOINT = {
    "Data": {
        "PodDeviceEntries": [
            {
                "PodUID": "uid-1",
                "ContainerName": "main",
                "ResourceName": "nvidia.com/gpu",
                "DeviceIDs": {"1": ["GPU-b"], "0": ["GPU-a"]},
                "AllocResp": "CgA=",
            }
        ],
        "RegisteredDevices": {"nvidia.com/gpu": ["GPU-a", "GPU-b"]},
    },
    "Checksum": 12345,
}


@pytest.fixture
def pod_resources_socket(socket_dir: Path) -> Path:
    return socket_dir / "pod-resources.sock"


async def test_list_returns_the_kubelet_answer_as_records(pod_resources_socket: Path) -> None:
    server = await FakePodResourcesLister(pod_resources_socket, RESPONSE).start()
    try:
        assert await list_pod_resources(pod_resources_socket) == RESPONSE
        assert server.calls == 1
    finally:
        await server.stop()


async def test_a_missing_socket_is_an_error_naming_it(pod_resources_socket: Path) -> None:
    with pytest.raises(PodResourcesError, match=r"pod-resources\.sock: pod-resources socket"):
        await list_pod_resources(pod_resources_socket)


async def test_a_failing_list_is_an_error_with_the_grpc_code(pod_resources_socket: Path) -> None:
    server = await FakePodResourcesLister(pod_resources_socket, RESPONSE, error="broken").start()
    try:
        with pytest.raises(PodResourcesError, match="List failed: INTERNAL: broken"):
            await list_pod_resources(pod_resources_socket)
    finally:
        await server.stop()


async def test_assignments_come_from_pod_resources_when_it_answers(
    pod_resources_socket: Path, socket_dir: Path
) -> None:
    checkpoint = socket_dir / "kubelet_internal_checkpoint"
    checkpoint.write_text(json.dumps(CHECKPOINT))
    server = await FakePodResourcesLister(pod_resources_socket, RESPONSE).start()
    try:
        found = await read_device_assignments(pod_resources_socket, checkpoint)
    finally:
        await server.stop()
    assert found.source == SOURCE_POD_RESOURCES
    assert found.assignments == (
        DeviceAssignment("ml/trainer", "main", "nvidia.com/gpu", (GPU_A,)),
        DeviceAssignment("ml/trainer", "main", "tensor-fusion.ai/index_0", ("index_0-1",)),
    )


async def test_assignments_fall_back_to_the_checkpoint_file(
    pod_resources_socket: Path, socket_dir: Path
) -> None:
    checkpoint = socket_dir / "kubelet_internal_checkpoint"
    checkpoint.write_text(json.dumps(CHECKPOINT))

    found = await read_device_assignments(pod_resources_socket, checkpoint)

    assert found.source == SOURCE_CHECKPOINT
    assert found.assignments == (
        DeviceAssignment("uid-1", "main", "nvidia.com/gpu", ("GPU-a", "GPU-b")),
    )


async def test_no_source_at_all_is_a_checkpoint_error(
    pod_resources_socket: Path, socket_dir: Path
) -> None:
    missing = socket_dir / "kubelet_internal_checkpoint"
    with pytest.raises(CheckpointError, match=r"kubelet_internal_checkpoint: cannot read"):
        await read_device_assignments(pod_resources_socket, missing)


def test_read_checkpoint_parses_the_old_list_shape(socket_dir: Path) -> None:
    path = socket_dir / "kubelet_internal_checkpoint"
    entry = {"PodUID": "u", "ContainerName": "c", "ResourceName": "r", "DeviceIDs": ["x", "y"]}
    path.write_text(json.dumps({"Data": {"PodDeviceEntries": [entry]}}))

    checkpoint = read_checkpoint(path)

    assert [e.device_ids for e in checkpoint.entries] == [("x", "y")]
    assert checkpoint.registered_devices == {}


def test_read_checkpoint_names_the_file_and_field_of_a_malformed_file(socket_dir: Path) -> None:
    path = socket_dir / "kubelet_internal_checkpoint"
    path.write_text(json.dumps({"Data": {"PodDeviceEntries": [{"DeviceIDs": 7}]}}))

    with pytest.raises(CheckpointError) as raised:
        read_checkpoint(path)

    assert str(raised.value).startswith(f"{path}: Data.PodDeviceEntries[0].DeviceIDs: expected")
