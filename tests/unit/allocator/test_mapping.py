"""The one mapper from CRD objects (as the API server returns them) to allocator records."""

from __future__ import annotations

from typing import Any

import pytest

from tensorfusion.domain.allocator.allocator import Allocator
from tensorfusion.domain.allocator.gpu_state import GPUCapabilities
from tensorfusion.domain.allocator.mapping import (
    capabilities_from_annotation,
    gpu_state,
    host_facts,
    hypervisor_index0,
    pool_settings,
    quota_spec,
)
from tensorfusion.domain.allocator.oversubscription import OversubscriptionSettings
from tensorfusion.domain.allocator.quota import QuotaCaps
from tensorfusion.domain.model import GPU, GPUNode, GPUPool, GPUResourceQuota, load_as
from tensorfusion.domain.model.scheduling import SchedulingConfigTemplate
from tensorfusion.domain.vocabulary import GPUPhase, IsolationPolicy, PlacementMode

from .builders import tflops, vram

V1 = "tensor-fusion.ai/v1"


def _gpu(annotations: dict[str, str] | None = None, **status: Any) -> GPU:
    body: dict[str, Any] = {
        "phase": "Running",
        "gpuModel": "NVIDIA A100-SXM4-80GB",
        "capacity": {"tflops": "312", "vram": "80Gi"},
        "uuid": "GPU-1",
        "index": 3,
        "numaNode": 1,
        "nodeSelector": {"kubernetes.io/hostname": "node-a"},
        "isolationPolicy": "Dynamic",
        "topology": {"peers": [{"peerGPUUUID": "GPU-2", "tier": 0, "bandwidth": 600000}]},
        **status,
    }
    return load_as(
        GPU,
        {
            "apiVersion": V1,
            "kind": "GPU",
            "metadata": {
                "name": "gpu-1",
                "labels": {"tensor-fusion.ai/gpupool": "shared"},
                "annotations": annotations or {},
            },
            "status": body,
        },
    )


def test_a_gpu_object_maps_every_fact_the_allocator_reads() -> None:
    mapped = gpu_state(_gpu())
    state = mapped.state
    assert mapped.problems == ()
    assert (state.name, state.node, state.pool) == ("gpu-1", "node-a", "shared")
    assert (state.capacity_tflops, state.capacity_vram) == (tflops("312"), vram("80Gi"))
    assert (state.phase, state.index, state.numa_node, state.uuid) == (
        GPUPhase.RUNNING,
        3,
        1,
        "GPU-1",
    )
    assert state.model == "NVIDIA A100-SXM4-80GB" and state.vendor == "NVIDIA"
    assert state.isolation_mode == "soft" and state.isolation_policy is IsolationPolicy.DYNAMIC
    assert [(p.peer_uuid, p.tier, p.bandwidth) for p in state.peers] == [("GPU-2", 0, 600000)]
    assert state.capabilities is None and state.missing_since == ""


@pytest.mark.parametrize(
    "text",
    [
        '{"supportsSoftIsolation": true, "supportsHardIsolation": false}',
        '{"SupportsSoftIsolation": true, "SupportsHardIsolation": false}',
        '{"SUPPORTSSOFTISOLATION": true}',
    ],
)
def test_capability_keys_are_read_case_insensitively(text: str) -> None:
    capabilities, problem = capabilities_from_annotation(text)
    assert problem is None
    assert capabilities == GPUCapabilities(
        supports_soft=True, supports_hard=False, supports_partitioning=False
    )


def test_an_unreadable_capabilities_annotation_is_reported_and_supports_everything() -> None:
    mapped = gpu_state(_gpu({"tensor-fusion.ai/virtualization-capabilities": "{not json"}))
    assert mapped.state.capabilities is None
    assert len(mapped.problems) == 1
    assert "tensor-fusion.ai/virtualization-capabilities" in mapped.problems[0]
    assert "'{not json'" in mapped.problems[0]


def test_a_gpu_without_a_node_is_reported() -> None:
    mapped = gpu_state(_gpu(nodeSelector={}))
    assert mapped.state.node == ""
    assert "status.nodeSelector" in mapped.problems[0]


def test_a_gpu_its_agent_has_not_reported_yet_is_no_problem() -> None:
    """Found on real nodes: the agent creates the GPU object, then writes its status; the
    allocator in between read it as an invalid object and sent a Warning Event per GPU."""
    unreported = load_as(GPU, {"apiVersion": V1, "kind": "GPU", "metadata": {"name": "gpu-1"}})
    mapped = gpu_state(unreported)
    assert (mapped.state.node, mapped.problems) == ("", ())


def test_missing_since_and_zero_capacity_are_mapped() -> None:
    mapped = gpu_state(
        _gpu({"tensor-fusion.ai/gpu-missing-since": "2026-12-01T00:00:00Z"}, capacity=None)
    )
    assert mapped.state.missing and mapped.state.capacity_tflops == 0


def _pool(spec: dict[str, Any]) -> GPUPool:
    return load_as(
        GPUPool, {"apiVersion": V1, "kind": "GPUPool", "metadata": {"name": "p"}, "spec": spec}
    )


def test_pool_settings_follow_the_template_and_keep_an_absent_oversubscription_absent() -> None:
    template = load_as(
        SchedulingConfigTemplate,
        {
            "apiVersion": V1,
            "kind": "SchedulingConfigTemplate",
            "metadata": {"name": "t"},
            "spec": {"placement": {"mode": "LowLoadFirst"}},
        },
    )
    plain = pool_settings(_pool({}))
    assert plain.oversubscription is None
    assert plain.placement_mode is PlacementMode.NODE_COMPACT_GPU_LOW_LOAD
    linked = pool_settings(_pool({"schedulingConfigTemplate": "t"}), {"t": template})
    assert linked.placement_mode is PlacementMode.LOW_LOAD_FIRST
    dangling = pool_settings(_pool({"schedulingConfigTemplate": "gone"}), {"t": template})
    assert dangling.placement_mode is PlacementMode.NODE_COMPACT_GPU_LOW_LOAD
    sold = pool_settings(
        _pool({"capacityConfig": {"oversubscription": {"tflopsOversellRatio": 2000}}})
    )
    assert sold.oversubscription == OversubscriptionSettings(2000, 50, 70)
    # The record's own defaults are the model's.
    assert OversubscriptionSettings() == OversubscriptionSettings(500, 50, 70)


def test_quota_spec_reads_caps_and_the_model_defaults() -> None:
    quota = load_as(
        GPUResourceQuota,
        {
            "apiVersion": V1,
            "kind": "GPUResourceQuota",
            "metadata": {"name": "q", "namespace": "ml"},
            "spec": {
                "total": {"requests": {"tflops": "2000"}, "limits": {"vram": "1Ti"}},
                "single": {"maxRequests": {"tflops": "200", "vram": "40Gi"}, "maxGPUCount": 4},
            },
        },
    )
    spec = quota_spec(quota)
    assert (spec.namespace, spec.name) == ("ml", "q")
    assert spec.total_requests == QuotaCaps(tflops("2000"), 0)
    assert spec.total_limits == QuotaCaps(0, vram("1Ti"))
    assert spec.single_max_requests == QuotaCaps(tflops("200"), vram("40Gi"))
    assert (spec.max_workers, spec.alert_threshold_percent, spec.single_max_gpu_count) == (
        32768,
        95,
        4,
    )


def test_host_facts_and_the_agent_index_resource() -> None:
    node = load_as(
        GPUNode,
        {
            "apiVersion": V1,
            "kind": "GPUNode",
            "metadata": {"name": "node-a"},
            "status": {"nodeInfo": {"ramSize": "1Ti", "dataDiskSize": "2Ti"}},
        },
    )
    assert host_facts(node) == (vram("1Ti"), vram("2Ti"))
    assert host_facts(None) == (0, 0)
    assert hypervisor_index0({"status": {"allocatable": {"tensor-fusion.ai/index_0": "36"}}}) == 36
    assert hypervisor_index0({"status": {"allocatable": {}}}) is None
    assert hypervisor_index0({"status": {"allocatable": {"tensor-fusion.ai/index_0": "x"}}}) is None


def test_mapped_gpus_fill_an_allocator() -> None:
    allocator = Allocator()
    allocator.upsert_gpu(gpu_state(_gpu()).state)
    assert [g.name for g in allocator.nodes["node-a"].gpus] == ["gpu-1"]
    assert [g.name for g in allocator.pool_gpus("shared")] == ["gpu-1"]


def test_a_negative_capacity_reads_as_zero_and_is_reported() -> None:
    mapped = gpu_state(_gpu(capacity={"tflops": "-300", "vram": "80Gi"}))
    assert mapped.state.capacity_tflops == 0
    assert mapped.problems == (
        "status.capacity.tflops: invalid value -300: must not be negative; read as 0 (the GPU "
        "is not schedulable)",
    )


def test_a_capability_that_is_not_a_boolean_is_false_and_reported() -> None:
    capabilities, problem = capabilities_from_annotation('{"supportsHardIsolation": "true"}')
    assert capabilities is not None and not capabilities.supports_hard
    assert problem is not None and 'supportsHardIsolation: "true"' in problem
