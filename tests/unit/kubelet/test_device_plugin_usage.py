"""The rules of deployment.md §9.4: which GPUs another device plugin holds; the checkpoint file."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tensorfusion.domain.devices.device_plugin_usage import (
    USED_BY_NVIDIA_DEVICE_PLUGIN as NVIDIA,
)
from tensorfusion.domain.devices.device_plugin_usage import (
    USED_BY_THIRD_PARTY_DEVICE_PLUGIN as THIRD_PARTY,
)
from tensorfusion.domain.devices.device_plugin_usage import (
    CheckpointEntry,
    CheckpointError,
    DeviceAssignment,
    assignments_from_checkpoint,
    assignments_from_pod_resources,
    device_plugin_usage,
    parse_checkpoint,
    used_by_changes,
)
from tensorfusion.domain.devices.kubelet_messages import (
    ContainerDevices,
    ContainerResources,
    KubeletPodResources,
    ListPodResourcesResponse,
)

UUID = "gpu-0aa1b2c3-d4e5-f6a7-b8c9-d0e1f2a3b4c5"  # 40 characters
PARENT = "gpu-99999999-8888-7777-6666-555555555555"


def usage(resource: str, *ids: str, **options: Any) -> dict[str, str]:
    return device_plugin_usage([DeviceAssignment("ns/pod", "c", resource, ids)], **options)


def test_nvidia_gpu_resource_counts_with_the_id_lower_cased() -> None:
    assert usage("nvidia.com/gpu", UUID.upper()) == {UUID: NVIDIA}


def test_shared_gpu_resource_names_count_by_prefix() -> None:
    assert usage("nvidia.com/gpu.shared", UUID) == {UUID: NVIDIA}


def test_replica_suffix_is_cut() -> None:
    assert usage("nvidia.com/gpu", f"{UUID.upper()}::3") == {UUID: NVIDIA}


def test_a_double_colon_without_a_number_is_not_a_replica_suffix() -> None:
    assert usage("nvidia.com/gpu", "dev::x") == {"dev::x": NVIDIA}


def test_mig_device_maps_to_its_parent_gpu() -> None:
    mig = "MIG-11111111-2222-3333-4444-555555555555"
    found = usage("nvidia.com/mig-1g.10gb", mig, mig_parents={mig: PARENT.upper()})
    assert found == {PARENT: NVIDIA}


def test_old_style_mig_id_names_its_parent() -> None:
    found = usage("nvidia.com/mig-3g.40gb", f"MIG-{PARENT.upper()}/1/0")
    assert found == {PARENT: NVIDIA}


def test_ids_over_40_characters_are_a_third_party_plugin_truncated_to_40() -> None:
    assert usage("nvidia.com/gpu", f"{UUID}-hami-7") == {UUID: THIRD_PARTY}


def test_an_id_of_exactly_40_characters_is_the_nvidia_plugin() -> None:
    assert len(UUID) == 40
    assert usage("nvidia.com/gpu", UUID) == {UUID: NVIDIA}


def test_other_resources_do_not_count() -> None:
    assert usage("amd.com/gpu", UUID) == {}
    assert usage("example.com/nvidia.com/gpu", UUID) == {}


def test_resources_listed_in_device_plugin_detection_count() -> None:
    found = usage("hami.io/vgpu", UUID, extra_resource_prefixes=["hami.io/"])
    assert found == {UUID: NVIDIA}


def test_our_index_resources_never_count() -> None:
    found = usage("tensor-fusion.ai/index_0", UUID, extra_resource_prefixes=["tensor-fusion.ai/"])
    assert found == {}
    assert usage("tensor-fusion.ai/other", UUID, extra_resource_prefixes=["tensor-fusion.ai/"])


def test_a_gpu_claimed_both_ways_is_the_third_partys_in_any_order() -> None:
    nvidia = DeviceAssignment("a", "c", "nvidia.com/gpu", (UUID,))
    hami = DeviceAssignment("b", "c", "nvidia.com/gpu", (f"{UUID}-1",))
    assert device_plugin_usage([hami, nvidia]) == {UUID: THIRD_PARTY}
    assert device_plugin_usage([nvidia, hami]) == {UUID: THIRD_PARTY}


def test_gpus_go_back_to_tensor_fusion_on_release() -> None:
    current = {UUID: NVIDIA, PARENT: "tensor-fusion", "gpu-c": THIRD_PARTY}
    assert used_by_changes(current, {PARENT: NVIDIA, "gpu-c": THIRD_PARTY}) == {
        UUID: "tensor-fusion",
        PARENT: NVIDIA,
    }


def test_pod_resources_answer_flattens_to_assignments() -> None:
    response = ListPodResourcesResponse(
        (
            KubeletPodResources(
                "p",
                "ns",
                (ContainerResources("c", (ContainerDevices("nvidia.com/gpu", ("x", "y")),)),),
            ),
        )
    )
    assert assignments_from_pod_resources(response) == (
        DeviceAssignment("ns/p", "c", "nvidia.com/gpu", ("x", "y")),
    )


def checkpoint_text(device_ids: Any, **entry: Any) -> str:
    base = {"PodUID": "u1", "ContainerName": "c", "ResourceName": "nvidia.com/gpu"}
    return json.dumps(
        {
            "Data": {
                "PodDeviceEntries": [{**base, **entry, "DeviceIDs": device_ids}],
                "RegisteredDevices": {"nvidia.com/gpu": ["GPU-a", "GPU-b", "GPU-c"]},
            },
            "Checksum": 1,
        }
    )


def test_checkpoint_with_ids_per_numa_node_in_node_order() -> None:
    checkpoint = parse_checkpoint(checkpoint_text({"10": ["GPU-c"], "2": ["GPU-b"], "0": None}))
    assert checkpoint.entries == (CheckpointEntry("u1", "c", "nvidia.com/gpu", ("GPU-b", "GPU-c")),)
    assert checkpoint.registered_devices == {"nvidia.com/gpu": ("GPU-a", "GPU-b", "GPU-c")}
    assert assignments_from_checkpoint(checkpoint) == (
        DeviceAssignment("u1", "c", "nvidia.com/gpu", ("GPU-b", "GPU-c")),
    )


def test_checkpoint_with_the_old_list_of_ids() -> None:
    checkpoint = parse_checkpoint(checkpoint_text(["GPU-a"]).encode())
    assert checkpoint.entries[0].device_ids == ("GPU-a",)


def test_an_empty_checkpoint_has_no_entries() -> None:
    checkpoint = parse_checkpoint('{"Data": {"PodDeviceEntries": null, "RegisteredDevices": null}}')
    assert checkpoint.entries == ()
    assert checkpoint.registered_devices == {}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{not json", "f: not JSON"),
        ("[]", "f: (top level): expected an object, got []"),
        ('{"Checksum": 1}', "f: Data: expected an object, got null"),
        ('{"Data": {"PodDeviceEntries": {}}}', "f: Data.PodDeviceEntries: expected a list, got {}"),
        (
            checkpoint_text(5),
            "f: Data.PodDeviceEntries[0].DeviceIDs: expected a list or an object of lists"
            " per NUMA node, got 5",
        ),
        (
            checkpoint_text({"x": ["GPU-a"]}),
            'f: Data.PodDeviceEntries[0].DeviceIDs: expected NUMA node numbers as keys, got "x"',
        ),
        (
            checkpoint_text({"0": [1]}),
            "f: Data.PodDeviceEntries[0].DeviceIDs['0']: expected a list of strings, got [1]",
        ),
        (
            checkpoint_text([], PodUID=3),
            "f: Data.PodDeviceEntries[0].PodUID: expected a string, got 3",
        ),
        (
            '{"Data": {"RegisteredDevices": {"r": "GPU-a"}}}',
            "f: Data.RegisteredDevices['r']: expected a list of strings, got \"GPU-a\"",
        ),
    ],
)
def test_a_malformed_checkpoint_names_the_file_and_field(text: str, message: str) -> None:
    with pytest.raises(CheckpointError) as raised:
        parse_checkpoint(text, "f")
    assert str(raised.value).startswith(message)
